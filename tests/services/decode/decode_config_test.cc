// DecodeConfig: defaults validate; each bad field is named; flags and --help parse.
#include "services/decode/decode_config.h"

#include "gtest/gtest.h"

namespace oscarkv::decode {
namespace {

TEST(DecodeConfig, DefaultsAreValid) { EXPECT_TRUE(DecodeConfig{}.Validate().ok()); }

TEST(DecodeConfig, BadFieldsAreNamed) {
  auto bad = [](auto mutate, const char* flag) {
    DecodeConfig c;
    mutate(c);
    absl::Status s = c.Validate();
    EXPECT_FALSE(s.ok()) << flag;
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.message();
  };
  bad([](DecodeConfig& c) { c.grpc_address = "nope"; }, "--grpc_address");
  bad([](DecodeConfig& c) { c.metrics_port = 70000; }, "--metrics_port");
  bad([](DecodeConfig& c) { c.chunk_tokens = 100; }, "--chunk_tokens");
  bad([](DecodeConfig& c) { c.transfer_backend = "carrier-pigeon"; }, "--transfer_backend");
  bad([](DecodeConfig& c) { c.max_batch = 0; }, "--max_batch");
  bad([](DecodeConfig& c) { c.kv_capacity_bytes = 1000; }, "--kv_capacity_bytes");
  bad([](DecodeConfig& c) { c.worker_id = ""; }, "--worker_id");
  bad([](DecodeConfig& c) { c.receive_ttl_seconds = 0; }, "--receive_ttl_seconds");
}

TEST(DecodeConfig, FlagsParse) {
  const char* argv[] = {"oscarkv_decode", "--grpc_address", "127.0.0.1:0", "--max_batch", "7",
                        "--codec", "bf16", "--transfer_backend", "local"};
  absl::StatusOr<DecodeConfig> c = DecodeConfig::FromFlags(9, argv);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_batch, 7);
  EXPECT_EQ(c->codec, "bf16");
  EXPECT_EQ(c->transfer_backend, "local");
  const char* unknown[] = {"oscarkv_decode", "--no_such_flag", "1"};
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeConfig::FromFlags(3, unknown).status()));
}

}  // namespace
}  // namespace oscarkv::decode
