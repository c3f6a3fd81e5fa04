// PrefillConfig: defaults validate; each bad field is named; flags and --help parse.
#include "services/prefill/prefill_config.h"

#include "gtest/gtest.h"

namespace oscarkv::prefill {
namespace {

TEST(PrefillConfig, DefaultsAreValid) { EXPECT_TRUE(PrefillConfig{}.Validate().ok()); }

TEST(PrefillConfig, BadFieldsAreNamed) {
  auto bad = [](auto mutate, const char* flag) {
    PrefillConfig c;
    mutate(c);
    absl::Status s = c.Validate();
    EXPECT_FALSE(s.ok()) << flag;
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.message();
  };
  bad([](PrefillConfig& c) { c.grpc_address = "nope"; }, "--grpc_address");
  bad([](PrefillConfig& c) { c.metrics_port = 70000; }, "--metrics_port");
  bad([](PrefillConfig& c) { c.chunk_tokens = 100; }, "--chunk_tokens");
  bad([](PrefillConfig& c) { c.transfer_backend = "carrier-pigeon"; }, "--transfer_backend");
  bad([](PrefillConfig& c) { c.max_concurrent = 0; }, "--max_concurrent");
  bad([](PrefillConfig& c) { c.kvstore_address = "nohost"; }, "--kvstore_address");
  bad([](PrefillConfig& c) { c.outbox_capacity_bytes = 1000; }, "--outbox_capacity_bytes");
  bad([](PrefillConfig& c) { c.worker_id = ""; }, "--worker_id");
}

TEST(PrefillConfig, FlagsParse) {
  const char* argv[] = {"oscarkv_prefill", "--grpc_address", "127.0.0.1:0", "--max_concurrent", "7",
                        "--codec", "bf16", "--transfer_backend", "local"};
  absl::StatusOr<PrefillConfig> c = PrefillConfig::FromFlags(9, argv);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_concurrent, 7);
  EXPECT_EQ(c->codec, "bf16");
  EXPECT_EQ(c->transfer_backend, "local");
  const char* unknown[] = {"oscarkv_prefill", "--no_such_flag", "1"};
  EXPECT_TRUE(absl::IsInvalidArgument(PrefillConfig::FromFlags(3, unknown).status()));
}

}  // namespace
}  // namespace oscarkv::prefill
