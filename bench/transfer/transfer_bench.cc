// Data-plane throughput on this machine: UCX loopback put/get between two backends (two ucp
// workers) in one process, for block sizes 64 KiB .. 16 MiB, next to plain memcpy of the same
// bytes in the same run (the ceiling for a one-host copy), and the in-process local backend.
// Every transfer moves a real serialised block; the last one of each series is checked with
// VerifyBlockOnArrival. Prints a markdown table.
//
//   transfer_bench [--seconds_per_point S] [--transports "tcp,self,sm/nopeer;tcp,self,sm"]
//   transfer_bench --after_idle_ms MS [--transports ...]
// The second form measures the UCX progress thread's idle back-off instead: the CPU a process
// with two idle backends uses, and the latency of one 64 KiB get from a target that has been
// idle MS milliseconds, unannounced and announced (TransferBackend::ExpectPeerTraffic just
// before), against back-to-back gets (medians of 20).
// A transports entry ending in "/nopeer" turns UcxOptions::peer_failure_detection off. --help
// lists the flags; an unknown flag or a bad value is an error (CLI11's non-zero exit; exit 2 for a
// bad --transports entry), not a silent default.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "lib/base/log.h"
#include "lib/transfer/local/local_backend.h"
#include "lib/transfer/ucx/ucx_backend.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::transfer {
namespace {

using Clock = std::chrono::steady_clock;

// Runs `op` (moving `bytes` each call) for about `seconds`; returns GB/s (1e9 bytes/s).
double Measure(double seconds, uint64_t bytes, const std::function<void()>& op) {
  op();  // warm-up (connection set-up, page faults, rkey unpack)
  int iterations = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    op();
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return static_cast<double>(bytes) * iterations / elapsed / 1e9;
}

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Two UcxBackends for one --transports entry ("tls", or "tls/nopeer": peer failure detection
// off, which lets UCX use sm). False, with the reason on stderr, when UCX refuses them (e.g. a
// transport name it does not know).
bool MakeUcxPair(const std::string& spec, std::unique_ptr<TransferBackend>* client,
                 std::unique_ptr<TransferBackend>* server) {
  UcxOptions options;
  options.transports = spec.substr(0, spec.find('/'));
  options.peer_failure_detection = spec.find("/nopeer") == std::string::npos;
  auto c = UcxBackend::Create(options);
  auto s = UcxBackend::Create(options);
  if (!c.ok() || !s.ok()) {
    std::fprintf(stderr, "transfer_bench: --transports '%s': %s\n", spec.c_str(),
                 (c.ok() ? s.status() : c.status()).ToString().c_str());
    return false;
  }
  *client = *std::move(c);
  *server = *std::move(s);
  return true;
}

// See the file comment (--after_idle_ms).
int RunAfterIdle(double idle_ms, const std::vector<std::string>& transports) {
  std::printf(
      "| transports | idle CPU (%% of a core) | hot get us | after %.0f ms idle, "
      "unannounced us | announced us |\n|---|---:|---:|---:|---:|\n",
      idle_ms);
  for (const std::string& spec : transports) {
    std::unique_ptr<TransferBackend> client, server;
    if (!MakeUcxPair(spec, &client, &server)) return 2;
    std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(64 << 10, 7);
    std::vector<std::byte> readback(block.size());
    auto dst = client->RegisterMemory(readback);
    auto remote = server->RegisterMemory(block);
    CHECK(dst.ok() && remote.ok());
    const TransferBatch batch{
        server->EndpointAddress(),
        {{dst->handle, 0, remote->remote_descriptor, 0, block.size(), Direction::kGet}}};
    auto get_us = [&] {
      const auto t0 = Clock::now();
      CHECK_OK(TransferAndWait(*client, batch));
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    };
    get_us();  // connection set-up
    std::vector<double> hot, cold, announced;
    for (int i = 0; i < 20; ++i) hot.push_back(get_us());
    const double cpu0 = CpuSeconds();
    const auto wall0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double idle_cpu =
        (CpuSeconds() - cpu0) / std::chrono::duration<double>(Clock::now() - wall0).count() * 100;
    const auto idle = std::chrono::duration<double, std::milli>(idle_ms);
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(idle);
      cold.push_back(get_us());
      std::this_thread::sleep_for(idle);
      server->ExpectPeerTraffic();
      announced.push_back(get_us());
    }
    CHECK_OK(VerifyBlockOnArrival(readback).status());
    std::printf("| %s | %.2f | %.1f | %.1f | %.1f |\n", spec.c_str(), idle_cpu, Median(hot),
                Median(cold), Median(announced));
  }
  return 0;
}

struct Row {
  size_t bytes;
  double memcpy_gbps;
  std::vector<double> gbps;  // per backend column
};

int Run(int argc, char** argv) {
  double seconds = 0.5;
  std::string transports_flag = "tcp,self,sm/nopeer;tcp,self,sm";
  CLI::App app{"Data-plane throughput: UCX loopback put/get vs memcpy vs the local backend"};
  app.add_option("--seconds_per_point", seconds, "seconds timed per (size, backend) point")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  app.add_option("--transports", transports_flag,
                 "UCX transport lists, one column each, separated by ';' (an entry ending in "
                 "\"/nopeer\" turns peer failure detection off)")
      ->capture_default_str();
  double after_idle_ms = 0;
  app.add_option("--after_idle_ms", after_idle_ms,
                 "instead of throughput: idle CPU and get latency after this long idle (ms)")
      ->check(CLI::Range(1.0, 10000.0));
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::string> transports = absl::StrSplit(transports_flag, ';');
  // Bad transport lists are usage errors (exit 2), checked before any measurement.
  for (const std::string& spec : transports) {
    const size_t slash = spec.find('/');
    if (slash == 0 || spec.empty() ||
        (slash != std::string::npos && spec.substr(slash) != "/nopeer")) {
      std::fprintf(stderr,
                   "transfer_bench: --transports: bad entry '%s' (want a UCX transport list, "
                   "optionally ending in /nopeer, entries separated by ';')\n",
                   spec.c_str());
      return 2;
    }
  }
  if (after_idle_ms > 0) return RunAfterIdle(after_idle_ms, transports);
  const std::vector<size_t> sizes = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};

  struct Column {
    std::string name;
    std::unique_ptr<TransferBackend> client, server;
  };
  std::vector<Column> columns;
  {
    auto c = LocalBackend::Create();
    auto s = LocalBackend::Create();
    CHECK(c.ok() && s.ok());
    columns.push_back({"local put", *std::move(c), *std::move(s)});
  }
  for (const std::string& spec : transports) {
    std::unique_ptr<TransferBackend> c, s;
    if (!MakeUcxPair(spec, &c, &s)) return 2;
    columns.push_back({"ucx put [" + spec + "]", std::move(c), std::move(s)});
    columns.push_back({"ucx get [" + spec + "]", nullptr, nullptr});
  }

  std::vector<Row> rows;
  for (size_t size : sizes) {
    std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(size, size);
    std::vector<std::byte> target(block.size()), readback(block.size());
    Row row{block.size(), 0, {}};
    row.memcpy_gbps = Measure(seconds, block.size(), [&] {
      std::memcpy(target.data(), block.data(), block.size());
      asm volatile("" : : "r"(target.data()) : "memory");
    });
    TransferBackend* client = nullptr;
    TransferBackend* server = nullptr;
    for (Column& col : columns) {
      const bool is_get = col.client == nullptr;
      if (!is_get) {
        client = col.client.get();
        server = col.server.get();
      }
      auto src = client->RegisterMemory(block);
      auto dst = client->RegisterMemory(readback);
      auto remote = server->RegisterMemory(target);
      CHECK(src.ok() && dst.ok() && remote.ok());
      std::memset(target.data(), 0, target.size());
      if (is_get) std::memcpy(target.data(), block.data(), block.size());
      const TransferBatch batch{
          server->EndpointAddress(),
          {{is_get ? dst->handle : src->handle, 0, remote->remote_descriptor, 0, block.size(),
            is_get ? Direction::kGet : Direction::kPut}}};
      row.gbps.push_back(Measure(seconds, block.size(), [&] {
        CHECK_OK(TransferAndWait(*client, batch));
      }));
      CHECK_OK(VerifyBlockOnArrival(is_get ? readback : target).status());
      CHECK_OK(client->DeregisterMemory(src->handle));
      CHECK_OK(client->DeregisterMemory(dst->handle));
      CHECK_OK(server->DeregisterMemory(remote->handle));
    }
    rows.push_back(std::move(row));
    std::fprintf(stderr, "done %zu bytes\n", block.size());
  }

  std::printf("| block bytes | memcpy GB/s |");
  for (const Column& col : columns) std::printf(" %s GB/s |", col.name.c_str());
  std::printf("\n|---:|---:|");
  for (size_t i = 0; i < columns.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const Row& row : rows) {
    std::printf("| %zu | %.2f |", row.bytes, row.memcpy_gbps);
    for (double g : row.gbps) std::printf(" %.2f |", g);
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace oscarkv::transfer

int main(int argc, char** argv) { return oscarkv::transfer::Run(argc, argv); }
