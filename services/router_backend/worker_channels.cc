#include "services/router_backend/worker_channels.h"

#include <set>

#include "lib/base/log.h"
#include "lib/rpc/channel_factory.h"

namespace oscarkv::router_backend {

std::shared_ptr<WorkerStubs> MakeWorkerStubs(const std::string& address) {
  auto s = std::make_shared<WorkerStubs>();
  s->address = address;
  s->channel = rpc::MakeChannel(address, rpc::ChannelOptions{});
  s->prefill = ::oscarkv::prefill::v1::PrefillService::NewStub(s->channel);
  s->decode = ::oscarkv::decode::v1::DecodeService::NewStub(s->channel);
  return s;
}

std::shared_ptr<WorkerStubs> WorkerChannels::Get(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<WorkerStubs>& s = by_address_[address];
  // A channel whose last connection attempt failed waits out gRPC's backoff before the next
  // one and fails calls until then. The worker placed here is registered live (it may just have
  // restarted), so dial it afresh instead.
  if (s == nullptr || s->channel->GetState(/*try_to_connect=*/false) ==
                          GRPC_CHANNEL_TRANSIENT_FAILURE) {
    s = MakeWorkerStubs(address);
  }
  return s;
}

std::vector<std::string> WorkerChannels::Retain(const std::vector<router::WorkerView>& workers) {
  std::set<std::string> live;
  for (const router::WorkerView& w : workers) {
    if (w.health != router::WorkerHealth::kDead) live.insert(w.spec.address);
  }
  std::vector<std::string> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = by_address_.begin(); it != by_address_.end();) {
    if (live.count(it->first) != 0) {
      ++it;
      continue;
    }
    LOG(INFO) << "router: dropped the channel to " << it->first
              << " (no live worker registered there)";
    dropped.push_back(it->first);
    it = by_address_.erase(it);
  }
  return dropped;
}

std::vector<std::string> WorkerChannels::addresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.reserve(by_address_.size());
  for (const auto& [address, stubs] : by_address_) out.push_back(address);
  return out;
}

}  // namespace oscarkv::router_backend
