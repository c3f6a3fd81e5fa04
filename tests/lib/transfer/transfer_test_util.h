// Shared checks for every TransferBackend: put a block into a peer's region, get it back into a
// fresh local region, verify both with VerifyBlockOnArrival.
#ifndef OSCARKV_TESTS_LIB_TRANSFER_TRANSFER_TEST_UTIL_H_
#define OSCARKV_TESTS_LIB_TRANSFER_TRANSFER_TEST_UTIL_H_

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "lib/transfer/transfer_backend.h"
#include "tests/testing/test_blocks.h"

namespace oscarkv::transfer {

// `client` puts a block of about `bytes` into `server`'s region at offset 4096, then gets it back
// into another client region; both copies must pass the arrival check and equal the original.
inline void RoundTripBlock(TransferBackend& client, TransferBackend& server, size_t bytes,
                           uint64_t seed) {
  std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(seed, bytes);
  std::vector<std::byte> server_memory(block.size() + 8192);
  std::vector<std::byte> readback(block.size());
  auto server_reg = server.RegisterMemory(server_memory);
  ASSERT_TRUE(server_reg.ok()) << server_reg.status();
  auto source = client.RegisterMemory(block);
  ASSERT_TRUE(source.ok()) << source.status();
  auto sink = client.RegisterMemory(readback);
  ASSERT_TRUE(sink.ok()) << sink.status();

  const TransferCounters before = client.counters();
  TransferBatch put{.peer_address = server.EndpointAddress(),
                    .ops = {{source->handle, 0, server_reg->remote_descriptor, 4096, block.size(),
                             Direction::kPut}}};
  ASSERT_TRUE(TransferAndWait(client, put).ok());
  auto arrived = VerifyBlockOnArrival(std::span(server_memory).subspan(4096));
  ASSERT_TRUE(arrived.ok()) << arrived.status();
  EXPECT_EQ(kvformat::kBlockHeaderBytes + arrived->payload_bytes, block.size());

  TransferBatch get{.peer_address = server.EndpointAddress(),
                    .ops = {{sink->handle, 0, server_reg->remote_descriptor, 4096, block.size(),
                             Direction::kGet}}};
  ASSERT_TRUE(TransferAndWait(client, get).ok());
  EXPECT_TRUE(VerifyBlockOnArrival(readback).ok());
  EXPECT_EQ(std::memcmp(readback.data(), block.data(), block.size()), 0);

  const TransferCounters after = client.counters();
  EXPECT_EQ(after.bytes_put - before.bytes_put, block.size());
  EXPECT_EQ(after.bytes_got - before.bytes_got, block.size());
  EXPECT_EQ(after.batches_done - before.batches_done, 2u);

  EXPECT_TRUE(client.DeregisterMemory(source->handle).ok());
  EXPECT_TRUE(client.DeregisterMemory(sink->handle).ok());
  EXPECT_TRUE(server.DeregisterMemory(server_reg->handle).ok());
}

// A block whose payload changes after its checksum was computed (a corrupting sender or wire) is
// rejected on arrival with kDataLoss.
inline void CorruptedBlockIsDetected(TransferBackend& client, TransferBackend& server) {
  std::vector<std::byte> block = oscarkv::testing::MakeTestBlockOfSize(7, 64 << 10);
  block[block.size() / 2] ^= std::byte{0x01};
  std::vector<std::byte> server_memory(block.size());
  auto server_reg = server.RegisterMemory(server_memory);
  ASSERT_TRUE(server_reg.ok());
  auto source = client.RegisterMemory(block);
  ASSERT_TRUE(source.ok());
  TransferBatch put{.peer_address = server.EndpointAddress(),
                    .ops = {{source->handle, 0, server_reg->remote_descriptor, 0, block.size(),
                             Direction::kPut}}};
  ASSERT_TRUE(TransferAndWait(client, put).ok());
  EXPECT_EQ(VerifyBlockOnArrival(server_memory).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(client.DeregisterMemory(source->handle).ok());
  EXPECT_TRUE(server.DeregisterMemory(server_reg->handle).ok());
}

// Ops outside a registered region are refused before anything moves.
inline void OutOfBoundsIsRefused(TransferBackend& client, TransferBackend& server) {
  std::vector<std::byte> local(1024), remote(1024);
  auto l = client.RegisterMemory(local);
  auto r = server.RegisterMemory(remote);
  ASSERT_TRUE(l.ok() && r.ok());
  TransferBatch batch{.peer_address = server.EndpointAddress(),
                      .ops = {{l->handle, 0, r->remote_descriptor, 512, 1024, Direction::kPut}}};
  EXPECT_EQ(client.Post(batch).status().code(), absl::StatusCode::kInvalidArgument);
  batch.ops[0] = {l->handle + 1000, 0, r->remote_descriptor, 0, 16, Direction::kPut};
  EXPECT_EQ(client.Post(batch).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Poll(123456).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(client.DeregisterMemory(l->handle).ok());
  EXPECT_TRUE(server.DeregisterMemory(r->handle).ok());
}

}  // namespace oscarkv::transfer

#endif  // OSCARKV_TESTS_LIB_TRANSFER_TRANSFER_TEST_UTIL_H_
