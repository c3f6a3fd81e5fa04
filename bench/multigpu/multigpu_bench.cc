// Multi-GPU benchmark (issue #8): a prefill process on one GPU and a decode process on another,
// the KV cache moving between them in its packed page form (GpuModel::PackSequence /
// AddPackedSequence), over NCCL send/recv and over UCX with CUDA transports (cuda_ipc), against a
// plain cudaMemcpyPeer of the same bytes in the same run.
//   --mode peer   cudaMemcpyPeer GPU a -> GPU b bandwidth by size (one process)
//   --mode run    fork()s: the parent is the prefill worker on GPU a, the child the decode worker
//                 on GPU b, talking over a socketpair (control: NCCL id, UCX addresses, remote
//                 descriptors, barriers, checksums). First a sweep of block batches per transport
//                 (GB/s vs peer memcpy); then per codec and prompt length: prefill (or, past
//                 --prefill-max, random KV of that length: transfer only), pack, transfer with
//                 each transport (median of --reps, each checked by an XXH3-64 of the received
//                 bytes against the sender's), unpack into the decode GPU's cache, greedy decode
//                 there, and the same decode continued on the prefill GPU: the tokens must match.
// Times are host wall clock (CLOCK_MONOTONIC, shared by both processes) around synchronised GPU
// work; a transfer counts from the sender's post to the later of both sides' completion.
// Set NCCL_NVLS_ENABLE=0 (no NVLink multicast) before running; the script does.
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/e2e/gpu_bench_setup.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/block.h"
#include "lib/model_gpu/cuda_status.h"
#include "lib/model_gpu/gpu_model.h"
#include "lib/transfer/nccl/nccl_backend.h"
#include "lib/transfer/ucx/ucx_backend.h"

namespace oscarkv::bench {
namespace {

using model_gpu::CudaStatus;
using model_gpu::DeviceBuffer;

struct Flags {
  std::string mode = "run";
  std::string config = "default";
  std::string codecs = "bf16,oscar";
  std::string contexts = "8192";
  int64_t prefill_max = 32768;
  std::string transports = "nccl,ucx";
  int reps = 5;
  int decode_steps = 64;
  int gpu_a = 0, gpu_b = 1;
  std::string text;  // default config: prompt text (else random token ids)
  std::string ucx_tls = "cuda_ipc,cuda_copy,tcp,sm,self";
  bool sweep = true;
  int timeout_s = 300;
};

// Phase lines on stderr (unbuffered), so a stuck run shows where it stopped.
void Phase(bool prefill, const std::string& what) {
  std::fprintf(stderr, "[%s] %s\n", prefill ? "prefill" : "decode", what.c_str());
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int64_t> ParseInts(const std::string& s) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (absl::SimpleAtoi(p, &v)) out.push_back(v);
  }
  return out;
}

std::vector<std::string> ParseList(const std::string& s) {
  return absl::StrSplit(s, ',', absl::SkipEmpty());
}

// ---- control channel: length-prefixed byte strings over a socketpair ----
absl::Status SendMsg(int fd, const std::string& msg) {
  const uint64_t n = msg.size();
  std::string buf(reinterpret_cast<const char*>(&n), 8);
  buf += msg;
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t w = write(fd, buf.data() + done, buf.size() - done);
    if (w <= 0) return absl::UnavailableError("control channel closed (peer process died?)");
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RecvMsg(int fd) {
  auto read_all = [fd](char* p, size_t n) {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = read(fd, p + done, n - done);
      if (r <= 0) return false;
      done += static_cast<size_t>(r);
    }
    return true;
  };
  uint64_t n = 0;
  if (!read_all(reinterpret_cast<char*>(&n), 8) || n > (uint64_t{1} << 30)) {
    return absl::UnavailableError("control channel closed (peer process died?)");
  }
  std::string msg(n, '\0');
  if (!read_all(msg.data(), n)) return absl::UnavailableError("control channel closed");
  return msg;
}

absl::StatusOr<std::vector<double>> RecvDoubles(int fd) {
  OSCARKV_ASSIGN_OR_RETURN(std::string m, RecvMsg(fd));
  std::vector<double> out;
  for (absl::string_view p : absl::StrSplit(m, ' ', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(p, &v)) return absl::InternalError("bad control message: " + m);
    out.push_back(v);
  }
  return out;
}

// XXH3-64 of device bytes (copied to the host: a check outside the timed path).
absl::StatusOr<uint64_t> DeviceChecksum(const std::byte* d, int64_t bytes) {
  std::vector<std::byte> host(static_cast<size_t>(bytes));
  OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(host.data(), d, bytes, cudaMemcpyDeviceToHost),
                                     "checksum copy"));
  return kvformat::PayloadChecksum(host);
}

// ---- the two data planes ----
struct Transports {
  std::unique_ptr<transfer::NcclBackend> nccl;
  std::unique_ptr<transfer::UcxBackend> ucx;
  std::string peer_ucx_address;
  std::string peer_nccl_address;
  int transfer_timeout_ms = 60000;
};

// Both sides: NCCL communicator (rank 0 = prefill) and UCX workers, addresses exchanged.
absl::Status ConnectTransports(const Flags& f, int fd, bool prefill, Transports& t) {
  const std::vector<std::string> names = ParseList(f.transports);
  const bool use_nccl = std::find(names.begin(), names.end(), "nccl") != names.end();
  const bool use_ucx = std::find(names.begin(), names.end(), "ucx") != names.end();
  if (use_nccl) {
    std::string id;
    if (prefill) {
      OSCARKV_ASSIGN_OR_RETURN(id, transfer::NcclBackend::NewUniqueId());
      OSCARKV_RETURN_IF_ERROR(SendMsg(fd, id));
    } else {
      OSCARKV_ASSIGN_OR_RETURN(id, RecvMsg(fd));
    }
    transfer::NcclOptions o;
    o.rank = prefill ? 0 : 1;
    o.world_size = 2;
    o.unique_id = id;
    o.cuda_device = prefill ? f.gpu_a : f.gpu_b;
    Phase(prefill, "joining the NCCL communicator");
    OSCARKV_ASSIGN_OR_RETURN(t.nccl, transfer::NcclBackend::Create(o));
    t.peer_nccl_address = prefill ? "nccl:1" : "nccl:0";
  }
  if (use_ucx) {
    transfer::UcxOptions o;
    o.transports = f.ucx_tls;
    o.peer_failure_detection = false;  // two co-located processes that trust each other
    Phase(prefill, "starting UCX with UCX_TLS=" + f.ucx_tls);
    OSCARKV_ASSIGN_OR_RETURN(t.ucx, transfer::UcxBackend::Create(o));
    if (!t.ucx->capabilities().gpu_memory) {
      return absl::FailedPreconditionError(
          "this UCX cannot move CUDA memory: run with PyPI libucx-cu13's libraries first on "
          "LD_LIBRARY_PATH (scripts/device/multigpu.sh does)");
    }
    OSCARKV_RETURN_IF_ERROR(SendMsg(fd, t.ucx->EndpointAddress()));
    OSCARKV_ASSIGN_OR_RETURN(t.peer_ucx_address, RecvMsg(fd));
  }
  Phase(prefill, "transports connected");
  return absl::OkStatus();
}

// A device buffer registered with every transport; the decode side sends the prefill side its
// UCX descriptor.
struct Registered {
  DeviceBuffer buffer;
  transfer::RegisteredMemory nccl, ucx;
  std::string peer_ucx_descriptor;  // sender side: the receiver's region
};

absl::Status RegisterBuffer(Transports& t, int fd, bool prefill, int64_t bytes, Registered& r) {
  OSCARKV_RETURN_IF_ERROR(r.buffer.Allocate(bytes, "transfer buffer"));
  const std::span<std::byte> region(r.buffer.as<std::byte>(), bytes);
  if (t.nccl) {
    OSCARKV_ASSIGN_OR_RETURN(r.nccl, t.nccl->RegisterMemory(region));
  }
  if (t.ucx) {
    OSCARKV_ASSIGN_OR_RETURN(r.ucx, t.ucx->RegisterMemory(region));
    if (prefill) {
      OSCARKV_ASSIGN_OR_RETURN(r.peer_ucx_descriptor, RecvMsg(fd));
    } else {
      OSCARKV_RETURN_IF_ERROR(SendMsg(fd, r.ucx.remote_descriptor));
    }
  }
  return absl::OkStatus();
}

void Unregister(Transports& t, Registered& r) {
  if (t.nccl && r.nccl.handle) (void)t.nccl->DeregisterMemory(r.nccl.handle);
  if (t.ucx && r.ucx.handle) (void)t.ucx->DeregisterMemory(r.ucx.handle);
  r.buffer.Reset();
}

// One transfer of `ops` (offset, bytes) pairs from the prefill side's buffer to the same offsets
// of the decode side's. Prefill side returns the seconds it took (post to both completions).
absl::StatusOr<double> TransferOnce(const std::string& transport, Transports& t, int fd,
                                    bool prefill, Registered& r,
                                    const std::vector<std::pair<int64_t, int64_t>>& ops) {
  const bool nccl = transport == "nccl";
  transfer::TransferBatch batch;
  for (const auto& [offset, bytes] : ops) {
    transfer::TransferOp op;
    op.local = nccl ? r.nccl.handle : r.ucx.handle;
    op.local_offset = offset;
    op.remote_offset = offset;
    op.bytes = bytes;
    op.direction = prefill ? transfer::Direction::kPut : transfer::Direction::kGet;
    if (!nccl) op.remote_descriptor = r.peer_ucx_descriptor;
    batch.ops.push_back(op);
  }
  transfer::TransferBackend& backend =
      nccl ? static_cast<transfer::TransferBackend&>(*t.nccl) : *t.ucx;
  batch.peer_address = nccl ? t.peer_nccl_address : t.peer_ucx_address;
  // Well inside the watchdog, so a stuck transfer reports itself.
  const std::chrono::milliseconds timeout(std::max(1000, t.transfer_timeout_ms));
  if (!prefill) {
    // Decode side: say ready, post the receives (NCCL), report when the bytes are here. Ready
    // goes first: an NCCL post can block until the peer posts too (NcclBackend::Post).
    OSCARKV_RETURN_IF_ERROR(SendMsg(fd, "ready"));
    transfer::TransferId id = 0;
    if (nccl) {
      OSCARKV_ASSIGN_OR_RETURN(id, backend.Post(batch));
    }
    if (nccl) {
      OSCARKV_RETURN_IF_ERROR(transfer::WaitForTransfer(backend, id, timeout));
    } else {
      OSCARKV_RETURN_IF_ERROR(RecvMsg(fd).status());  // the put was flushed to us
    }
    OSCARKV_RETURN_IF_ERROR(SendMsg(fd, absl::StrCat(Now())));
    return 0.0;
  }
  OSCARKV_RETURN_IF_ERROR(RecvMsg(fd).status());  // ready
  const double t0 = Now();
  OSCARKV_ASSIGN_OR_RETURN(transfer::TransferId id, backend.Post(batch));
  OSCARKV_RETURN_IF_ERROR(transfer::WaitForTransfer(backend, id, timeout));
  const double t1 = Now();
  if (!nccl) OSCARKV_RETURN_IF_ERROR(SendMsg(fd, "done"));
  OSCARKV_ASSIGN_OR_RETURN(std::vector<double> peer_done, RecvDoubles(fd));
  return std::max(t1, peer_done.empty() ? t1 : peer_done[0]) - t0;
}

// Same bytes by cudaMemcpyPeerAsync from the prefill side's buffer into `dst` on GPU b.
absl::StatusOr<double> PeerCopyOnce(const Flags& f, Registered& r, std::byte* dst,
                                    const std::vector<std::pair<int64_t, int64_t>>& ops,
                                    cudaStream_t stream) {
  const double t0 = Now();
  for (const auto& [offset, bytes] : ops) {
    OSCARKV_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyPeerAsync(dst + offset, f.gpu_b, r.buffer.as<std::byte>() + offset, f.gpu_a,
                            bytes, stream),
        "cudaMemcpyPeerAsync"));
  }
  OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "peer copy"));
  return Now() - t0;
}

// Times every transport and the peer copy on one set of ops; checks the received bytes. Prefill
// side returns {transport -> median seconds} in transports order, then the peer copy.
absl::StatusOr<std::vector<double>> TimeAllTransports(
    const Flags& f, Transports& t, int fd, bool prefill, Registered& r, std::byte* peer_dst,
    cudaStream_t stream, const std::vector<std::pair<int64_t, int64_t>>& ops, int64_t total) {
  std::vector<double> medians;
  for (const std::string& name : ParseList(f.transports)) {
    if (!prefill) {
      // Poison, so the checksum below proves this transport delivered the bytes.
      OSCARKV_RETURN_IF_ERROR(
          CudaStatus(cudaMemset(r.buffer.get(), 0xa5, total), "poison receive buffer"));
      // The transports write from their own (non-blocking) streams: finish the poison first.
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "poison receive buffer"));
    }
    Phase(prefill, absl::StrCat(name, ": ", ops.size(), " op(s), ", total, " bytes"));
    std::vector<double> times;
    for (int rep = 0; rep < f.reps; ++rep) {
      OSCARKV_ASSIGN_OR_RETURN(double s, TransferOnce(name, t, fd, prefill, r, ops));
      times.push_back(s);
    }
    // Arrival check over the bytes the ops covered (the first `total` bytes).
    OSCARKV_ASSIGN_OR_RETURN(uint64_t sum, DeviceChecksum(r.buffer.as<std::byte>(), total));
    if (prefill) {
      OSCARKV_RETURN_IF_ERROR(SendMsg(fd, absl::StrCat(sum)));
      OSCARKV_ASSIGN_OR_RETURN(std::string verdict, RecvMsg(fd));
      if (verdict != "ok") {
        return absl::DataLossError(absl::StrCat(name, " delivered corrupted bytes: ", verdict));
      }
      medians.push_back(Median(times));
    } else {
      OSCARKV_ASSIGN_OR_RETURN(std::string want, RecvMsg(fd));
      const std::string verdict =
          want == absl::StrCat(sum) ? "ok" : absl::StrCat("checksum ", sum, " != ", want);
      OSCARKV_RETURN_IF_ERROR(SendMsg(fd, verdict));
    }
  }
  if (prefill) {
    std::vector<double> times;
    for (int rep = 0; rep < f.reps; ++rep) {
      OSCARKV_ASSIGN_OR_RETURN(double s, PeerCopyOnce(f, r, peer_dst, ops, stream));
      times.push_back(s);
    }
    medians.push_back(Median(times));
  }
  return medians;
}

double GBps(int64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

// Batches of blocks of one size: how close each transport gets to the peer copy.
absl::Status Sweep(const Flags& f, Transports& t, int fd, bool prefill, std::byte* peer_dst,
                   cudaStream_t stream, Registered& r) {
  const std::vector<std::string> names = ParseList(f.transports);
  if (prefill) {
    std::printf("\n## Block batches GPU %d -> GPU %d (median of %d; GB/s = 1e9 B/s)\n\n", f.gpu_a,
                f.gpu_b, f.reps);
    std::printf("| block bytes | blocks | batch bytes |");
    for (const std::string& n : names) std::printf(" %s GB/s | %s / peer |", n.c_str(), n.c_str());
    std::printf(" cudaMemcpyPeer GB/s |\n|---:|---:|---:|");
    for (size_t i = 0; i < names.size(); ++i) std::printf("---:|---:|");
    std::printf("---:|\n");
  }
  for (int64_t block : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20,
                        int64_t{256} << 20, int64_t{1} << 30}) {
    const int64_t count = std::min<int64_t>(1024, (int64_t{1} << 30) / block);
    std::vector<std::pair<int64_t, int64_t>> ops;
    for (int64_t i = 0; i < count; ++i) ops.emplace_back(i * block, block);
    OSCARKV_ASSIGN_OR_RETURN(std::vector<double> med, TimeAllTransports(f, t, fd, prefill, r,
                                                                        peer_dst, stream, ops,
                                                                        block * count));
    if (!prefill) continue;
    const int64_t total = block * count;
    std::printf("| %lld | %lld | %lld |", static_cast<long long>(block),
                static_cast<long long>(count), static_cast<long long>(total));
    const double peer = GBps(total, med.back());
    for (size_t i = 0; i < names.size(); ++i) {
      std::printf(" %.1f | %.2f |", GBps(total, med[i]), GBps(total, med[i]) / peer);
    }
    std::printf(" %.1f |\n", peer);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// The tokens of --text for the default model (read once per codec); empty without --text or
// for random weights. @return kNotFound when the file cannot be read.
absl::StatusOr<std::vector<int32_t>> TextTokens(const GpuBenchSetup& s,
                                                const std::string& text_path) {
  if (!s.real || text_path.empty()) return std::vector<int32_t>{};
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read --text " + text_path);
  std::stringstream text;
  text << in.rdbuf();
  return s.real->tokenizer().Encode(text.str(), true);
}

// A prompt of `length` tokens: the text's tokens repeated, or random ids when there is no text.
std::vector<int32_t> PromptTokens(const std::vector<int32_t>& text, int vocab, int64_t length) {
  std::mt19937 rng(7);
  std::vector<int32_t> out(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) {
    out[i] = text.empty() ? static_cast<int32_t>(rng() % vocab)
                          : text[static_cast<size_t>(i) % text.size()];
  }
  return out;
}

// Greedy decode of `steps` tokens from `first`; returns tokens and the median step seconds.
absl::StatusOr<std::pair<std::vector<int32_t>, double>> Decode(model_gpu::GpuModel& m, int64_t id,
                                                               int32_t first, int steps) {
  std::vector<int32_t> tokens = {first}, next;
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const double t0 = Now();
    OSCARKV_RETURN_IF_ERROR(
        m.DecodeStep(std::vector<int64_t>{id}, std::vector<int32_t>{tokens.back()}, &next));
    times.push_back(Now() - t0);
    tokens.push_back(next[0]);
  }
  return std::make_pair(tokens, Median(times));
}

std::string JoinTokens(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) absl::StrAppend(&s, x, " ");
  return s;
}

struct CaseResult {
  std::string codec;
  int64_t length = 0;
  bool synthetic = false;
  int64_t bytes = 0;
  double forward = 0, cache_write = 0, pack = 0, unpack = 0;
  std::vector<double> transfer;  // per transport, then peer copy
  double decode_step = 0;
  bool tokens_match = false;
};

// One side's model for one codec, and the packed size of the longest case (both sides size
// their transfer buffers from it, so they agree).
struct SideModel {
  GpuBenchSetup setup;
  std::unique_ptr<model_gpu::GpuModel> model;
  std::vector<int64_t> contexts;
  int64_t max_bytes = 0;
};

absl::StatusOr<SideModel> MakeSideModel(const Flags& f, const std::string& codec, bool prefill) {
  SideModel s;
  OSCARKV_ASSIGN_OR_RETURN(s.setup, MakeGpuBenchSetup(f.config, codec));
  s.contexts = ParseInts(f.contexts);
  const int64_t max_ctx = *std::max_element(s.contexts.begin(), s.contexts.end());
  model_gpu::GpuModelOptions o;
  o.device = prefill ? f.gpu_a : f.gpu_b;
  o.max_batch = 4;
  // The decode side never prefills: no prefill scratch.
  o.max_prompt_tokens = prefill ? std::min(max_ctx, f.prefill_max) : 64;
  o.kv_budget_bytes = int64_t{48} << 30;
  OSCARKV_ASSIGN_OR_RETURN(s.model, MakeGpuBenchModel(s.setup, o));
  s.max_bytes = s.model->PackedLayout(max_ctx + f.decode_steps + 1).bytes();
  return s;
}

// The prefill side of one codec's cases; the decode side mirrors it in DecodeCases.
absl::Status PrefillCases(const Flags& f, Transports& t, int fd, const std::string& codec,
                          std::vector<CaseResult>& results) {
  OSCARKV_ASSIGN_OR_RETURN(SideModel side, MakeSideModel(f, codec, /*prefill=*/true));
  const GpuBenchSetup& setup = side.setup;
  model_gpu::GpuModel* model = side.model.get();
  const std::vector<int64_t>& contexts = side.contexts;
  const int64_t max_bytes = side.max_bytes;
  OSCARKV_ASSIGN_OR_RETURN(const std::vector<int32_t> text, TextTokens(setup, f.text));
  Registered r;
  OSCARKV_RETURN_IF_ERROR(RegisterBuffer(t, fd, true, max_bytes, r));
  DeviceBuffer peer_dst;
  OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(f.gpu_b), "cudaSetDevice(b)"));
  OSCARKV_RETURN_IF_ERROR(peer_dst.Allocate(max_bytes, "peer copy target"));
  OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(f.gpu_a), "cudaSetDevice(a)"));
  cudaStream_t stream;
  OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "stream"));
  for (int64_t ctx : contexts) {
    CaseResult c;
    c.codec = codec;
    c.length = ctx;
    c.synthetic = ctx > f.prefill_max;
    int32_t first = 0;
    if (c.synthetic) {
      OSCARKV_RETURN_IF_ERROR(model->AddSyntheticSequence(1, ctx, ctx + f.decode_steps + 1, 99));
      first = 100;
    } else {
      const std::vector<int32_t> prompt = PromptTokens(text, setup.config.vocab_size, ctx);
      OSCARKV_RETURN_IF_ERROR(model->AddSequence(1, prompt, ctx + f.decode_steps + 1, &first));
      c.forward = model->last_prefill().forward_seconds;
      c.cache_write = model->last_prefill().cache_write_seconds;
    }
    Phase(true, absl::StrCat(codec, " ", ctx, " tokens prefilled"));
    const model_gpu::PackedKvLayout layout = model->PackedLayout(ctx);
    c.bytes = layout.bytes();
    const double p0 = Now();
    OSCARKV_RETURN_IF_ERROR(
        model->PackSequence(1, std::span<std::byte>(r.buffer.as<std::byte>(), c.bytes)));
    c.pack = Now() - p0;
    OSCARKV_RETURN_IF_ERROR(SendMsg(fd, absl::StrCat(ctx, " ", c.bytes, " ", first)));
    OSCARKV_ASSIGN_OR_RETURN(c.transfer, TimeAllTransports(f, t, fd, true, r, peer_dst.as<std::byte>(),
                                                           stream, {{0, c.bytes}}, c.bytes));
    // The decode side unpacks, decodes and reports; continue the same decode here.
    OSCARKV_ASSIGN_OR_RETURN(std::vector<double> remote, RecvDoubles(fd));
    OSCARKV_ASSIGN_OR_RETURN(std::string remote_tokens, RecvMsg(fd));
    c.unpack = remote.at(0);
    c.decode_step = remote.at(1);
    OSCARKV_ASSIGN_OR_RETURN(auto local, Decode(*model, 1, first, f.decode_steps));
    c.tokens_match = JoinTokens(local.first) == remote_tokens;
    if (!c.tokens_match) {
      std::fprintf(stderr, "%s %lld: decode after the move differs\n  here:  %s\n  there: %s\n",
                   codec.c_str(), static_cast<long long>(ctx), JoinTokens(local.first).c_str(),
                   remote_tokens.c_str());
    }
    model->RemoveSequence(1);
    results.push_back(c);
    std::fprintf(stderr, "%s %lld tokens: %.1f MB moved, decode after the move %s\n",
                 codec.c_str(), static_cast<long long>(ctx), c.bytes / 1e6,
                 c.tokens_match ? "matches" : "DIFFERS");
  }
  cudaStreamDestroy(stream);
  Unregister(t, r);
  return absl::OkStatus();
}

absl::Status DecodeCases(const Flags& f, Transports& t, int fd, const std::string& codec) {
  OSCARKV_ASSIGN_OR_RETURN(SideModel side, MakeSideModel(f, codec, /*prefill=*/false));
  model_gpu::GpuModel* model = side.model.get();
  const std::vector<int64_t>& contexts = side.contexts;
  const int64_t max_bytes = side.max_bytes;
  Registered r;
  OSCARKV_RETURN_IF_ERROR(RegisterBuffer(t, fd, false, max_bytes, r));
  for (size_t i = 0; i < contexts.size(); ++i) {
    OSCARKV_ASSIGN_OR_RETURN(std::vector<double> head, RecvDoubles(fd));
    const int64_t ctx = static_cast<int64_t>(head.at(0));
    const int64_t bytes = static_cast<int64_t>(head.at(1));
    const int32_t first = static_cast<int32_t>(head.at(2));
    OSCARKV_RETURN_IF_ERROR(
        TimeAllTransports(f, t, fd, false, r, nullptr, nullptr, {{0, bytes}}, bytes).status());
    const double u0 = Now();
    OSCARKV_RETURN_IF_ERROR(model->AddPackedSequence(
        1, ctx, ctx + f.decode_steps + 1,
        std::span<const std::byte>(r.buffer.as<std::byte>(), bytes)));
    const double unpack = Now() - u0;
    OSCARKV_ASSIGN_OR_RETURN(auto decoded, Decode(*model, 1, first, f.decode_steps));
    model->RemoveSequence(1);
    OSCARKV_RETURN_IF_ERROR(SendMsg(fd, absl::StrCat(unpack, " ", decoded.second)));
    OSCARKV_RETURN_IF_ERROR(SendMsg(fd, JoinTokens(decoded.first)));
  }
  Unregister(t, r);
  return absl::OkStatus();
}

void PrintCases(const Flags& f, const std::vector<CaseResult>& results) {
  const std::vector<std::string> names = ParseList(f.transports);
  std::printf("\n## KV of one prompt, prefill GPU %d -> decode GPU %d (%s; median of %d)\n\n",
              f.gpu_a, f.gpu_b, f.config.c_str(), f.reps);
  std::printf("| codec | prompt | KV MB |");
  for (const std::string& n : names) std::printf(" %s ms | %s GB/s |", n.c_str(), n.c_str());
  std::printf(" peer ms | peer GB/s | prefill s | cache write s | pack ms | unpack ms | TTFT s |"
              " transfer / TTFT | decode ms/token | decode after move |\n|---|---:|---:|");
  for (size_t i = 0; i < names.size(); ++i) std::printf("---:|---:|");
  std::printf("---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const CaseResult& c : results) {
    std::printf("| %s | %lld%s | %.1f |", c.codec.c_str(), static_cast<long long>(c.length),
                c.synthetic ? " (random KV)" : "", c.bytes / 1e6);
    double best = 1e30;
    for (size_t i = 0; i < names.size(); ++i) {
      std::printf(" %.2f | %.1f |", c.transfer[i] * 1e3, GBps(c.bytes, c.transfer[i]));
      best = std::min(best, c.transfer[i]);
    }
    const double peer = c.transfer.back();
    const double ttft = c.forward + c.pack + best + c.unpack;
    std::printf(" %.2f | %.1f |", peer * 1e3, GBps(c.bytes, peer));
    if (c.synthetic) {
      std::printf(" - | - | %.2f | %.2f | - | - |", c.pack * 1e3, c.unpack * 1e3);
    } else {
      std::printf(" %.3f | %.3f | %.2f | %.2f | %.3f | %.2f%% |", c.forward, c.cache_write,
                  c.pack * 1e3, c.unpack * 1e3, ttft, 100 * best / ttft);
    }
    std::printf(" %.2f | %s |\n", c.decode_step * 1e3, c.tokens_match ? "same tokens" : "DIFFERS");
  }
  std::fflush(stdout);
}

int RunPeer(const Flags& f) {
  int can = 0;
  cudaDeviceCanAccessPeer(&can, f.gpu_a, f.gpu_b);
  std::printf("GPU %d can access GPU %d directly: %s\n", f.gpu_a, f.gpu_b, can ? "yes" : "no");
  cudaSetDevice(f.gpu_a);
  if (can) cudaDeviceEnablePeerAccess(f.gpu_b, 0);
  const int64_t max = int64_t{4} << 30;
  DeviceBuffer src, dst;
  if (!src.Allocate(max, "src").ok()) return 1;
  cudaSetDevice(f.gpu_b);
  if (!dst.Allocate(max, "dst").ok()) return 1;
  cudaSetDevice(f.gpu_a);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  std::printf("\n| bytes | a->b GB/s | b->a GB/s |\n|---:|---:|---:|\n");
  for (int64_t bytes = int64_t{1} << 20; bytes <= max; bytes *= 4) {
    double best[2] = {0, 0};
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<double> t;
      for (int rep = 0; rep < 2 + f.reps; ++rep) {
        const double t0 = Now();
        if (dir == 0) {
          cudaMemcpyPeerAsync(dst.get(), f.gpu_b, src.get(), f.gpu_a, bytes, stream);
        } else {
          cudaMemcpyPeerAsync(src.get(), f.gpu_a, dst.get(), f.gpu_b, bytes, stream);
        }
        cudaStreamSynchronize(stream);
        if (rep >= 2) t.push_back(Now() - t0);
      }
      best[dir] = GBps(bytes, Median(t));
    }
    std::printf("| %lld | %.1f | %.1f |\n", static_cast<long long>(bytes), best[0], best[1]);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

absl::Status RunSide(const Flags& f, int fd, bool prefill, Transports& t) {
  OSCARKV_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(prefill ? f.gpu_a : f.gpu_b), "cudaSetDevice"));
  if (prefill) {
    int can = 0;
    cudaDeviceCanAccessPeer(&can, f.gpu_a, f.gpu_b);
    if (can) cudaDeviceEnablePeerAccess(f.gpu_b, 0);  // for the cudaMemcpyPeer baseline
  }
  t.transfer_timeout_ms = f.timeout_s * 1000 / 3;
  OSCARKV_RETURN_IF_ERROR(ConnectTransports(f, fd, prefill, t));
  if (f.sweep) {
    Registered r;
    const int64_t bytes = int64_t{1} << 30;
    OSCARKV_RETURN_IF_ERROR(RegisterBuffer(t, fd, prefill, bytes, r));
    DeviceBuffer peer_dst;
    cudaStream_t stream = nullptr;
    if (prefill) {
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(f.gpu_b), "cudaSetDevice(b)"));
      OSCARKV_RETURN_IF_ERROR(peer_dst.Allocate(bytes, "peer copy target"));
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(f.gpu_a), "cudaSetDevice(a)"));
      OSCARKV_RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "stream"));
    }
    OSCARKV_RETURN_IF_ERROR(Sweep(f, t, fd, prefill, peer_dst.as<std::byte>(), stream, r));
    if (stream != nullptr) cudaStreamDestroy(stream);
    Unregister(t, r);
  }
  std::vector<CaseResult> results;
  for (const std::string& codec : ParseList(f.codecs)) {
    OSCARKV_RETURN_IF_ERROR(prefill ? PrefillCases(f, t, fd, codec, results)
                                    : DecodeCases(f, t, fd, codec));
  }
  if (prefill) PrintCases(f, results);
  return absl::OkStatus();
}

int RunTwoProcesses(const Flags& f) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    std::perror("socketpair");
    return 1;
  }
  std::fflush(stdout);
  // fork before any CUDA call: a child cannot use a CUDA context its parent created.
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return 1;
  }
  const bool prefill = pid != 0;
  close(fds[prefill ? 1 : 0]);
  const int fd = fds[prefill ? 0 : 1];
  // Watchdog: a transport that never completes must not hold the GPUs (SIGALRM ends us).
  alarm(static_cast<unsigned>(f.timeout_s));
  // Owned here and never destroyed: after a failure an NCCL communicator's destructor can wait
  // forever on a send its peer will never receive; the process exit frees everything.
  auto* transports = new Transports;
  const absl::Status st = RunSide(f, fd, prefill, *transports);
  if (!st.ok()) {
    std::fprintf(stderr, "%s side: %s\n", prefill ? "prefill" : "decode", st.ToString().c_str());
  }
  std::fflush(stdout);
  close(fd);  // unblocks the other side if it waits on us
  if (!prefill) _exit(st.ok() ? 0 : 1);
  int child_status = 0;
  waitpid(pid, &child_status, 0);
  const bool child_ok = WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0;
  if (!child_ok) std::fprintf(stderr, "decode process failed (status %d)\n", child_status);
  _exit(st.ok() && child_ok ? 0 : 1);
}

}  // namespace
}  // namespace oscarkv::bench

int main(int argc, char** argv) {
  oscarkv::bench::Flags f;
  CLI::App app{"oscarkv multi-GPU benchmark: prefill on one GPU, decode on another, the KV moved "
               "between them over NCCL and CUDA-aware UCX vs cudaMemcpyPeer (issue #8)"};
  app.add_option("--mode", f.mode, "peer | run")->capture_default_str();
  app.add_option("--config", f.config, "default | qwen3-8b-like (random weights, speed only)")
      ->capture_default_str();
  app.add_option("--codecs", f.codecs, "codecs, comma-separated")->capture_default_str();
  app.add_option("--contexts", f.contexts, "prompt lengths, comma-separated")
      ->capture_default_str();
  app.add_option("--prefill-max", f.prefill_max,
                 "longer prompts get random KV of their length instead of a prefill (transfer "
                 "and decode speed only)")
      ->capture_default_str();
  app.add_option("--transports", f.transports, "nccl,ucx (either or both)")->capture_default_str();
  app.add_option("--reps", f.reps, "repetitions per timing (median)")->capture_default_str();
  app.add_option("--decode-steps", f.decode_steps, "greedy tokens decoded after the move")
      ->capture_default_str();
  app.add_option("--gpu-a", f.gpu_a, "prefill GPU")->capture_default_str();
  app.add_option("--gpu-b", f.gpu_b, "decode GPU")->capture_default_str();
  app.add_option("--text", f.text, "prompt text for --config default (else random tokens)");
  app.add_option("--ucx-tls", f.ucx_tls, "UCX transports (UCX_TLS)")->capture_default_str();
  app.add_flag("!--no-sweep", f.sweep, "skip the block-batch sweep");
  app.add_option("--timeout-s", f.timeout_s, "watchdog: both processes end after this long")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // Never NVLink multicast on the shared GPU hosts (the device README); forced, not defaulted.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setvbuf(stdout, nullptr, _IOLBF, 0);  // tables reach a piped log as they are printed
  if (f.mode == "peer") return oscarkv::bench::RunPeer(f);
  if (f.mode != "run") {
    std::fprintf(stderr, "unknown --mode %s (peer | run)\n", f.mode.c_str());
    return 2;
  }
  if (oscarkv::bench::ParseInts(f.contexts).empty()) {
    std::fprintf(stderr, "--contexts is empty\n");
    return 2;
  }
  return oscarkv::bench::RunTwoProcesses(f);
}
