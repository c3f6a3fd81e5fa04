#include "services/kvstore/kvstore_config.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace oscarkv::kvstore {
namespace {

TEST(KvStoreConfig, DefaultsAreValid) { EXPECT_TRUE(KvStoreConfig{}.Validate().ok()); }

TEST(KvStoreConfig, FlagsOverrideConfigFile) {
  const std::string path = ::testing::TempDir() + "/kvstore_config_test.toml";
  {
    std::ofstream f(path);
    f << "capacity_bytes = 4194304\nworker_id = \"from-file\"\nucx_transports = \"tcp,self\"\n";
  }
  const char* argv[] = {"oscarkv_kvstore", "--config", path.c_str(), "--worker_id", "from-flag",
                        "--metrics_port", "-1"};
  auto config = KvStoreConfig::FromFlags(7, argv);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->capacity_bytes, 4194304u);
  EXPECT_EQ(config->worker_id, "from-flag");
  EXPECT_EQ(config->ucx_transports, "tcp,self");
  EXPECT_EQ(config->metrics_port, -1);
  EXPECT_EQ(config->read_lease_seconds, 10);  // absent → default
  EXPECT_TRUE(config->Validate().ok());
  std::remove(path.c_str());
}

TEST(KvStoreConfig, BadValuesStopStartup) {
  const char* bad_flag[] = {"oscarkv_kvstore", "--capacity_bytes", "lots"};
  EXPECT_EQ(KvStoreConfig::FromFlags(3, bad_flag).status().code(),
            absl::StatusCode::kInvalidArgument);
  KvStoreConfig c;
  c.transfer_backend = "carrier-pigeon";
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c = {};
  c.capacity_bytes = 10;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c = {};
  c.read_lease_seconds = 0;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c = {};
  c.grpc_address = "nohost";
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace oscarkv::kvstore
