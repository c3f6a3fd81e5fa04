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

TEST(KvStoreConfig, NegativeOrAbsurdCapacityIsRejectedWithTheFlagName) {
  // CLI11 reads "-1" into uint64_t as 2^64 - 1.
  const char* negative[] = {"oscarkv_kvstore", "--capacity_bytes", "-1"};
  auto config = KvStoreConfig::FromFlags(3, negative);
  if (config.ok()) {
    const absl::Status s = config->Validate();
    EXPECT_TRUE(absl::IsInvalidArgument(s));
    EXPECT_NE(s.message().find("--capacity_bytes"), std::string::npos) << s;
    EXPECT_NE(s.message().find("negative"), std::string::npos) << s;
  } else {
    EXPECT_TRUE(absl::IsInvalidArgument(config.status()));
  }
  KvStoreConfig c;
  c.capacity_bytes = kMaxCapacityBytes;
  EXPECT_TRUE(c.Validate().ok());
  c.capacity_bytes = kMaxCapacityBytes + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(c.Validate()));
  const absl::Status serve = ValidateCapacityBytes(10, "--kvstore_capacity_bytes");
  EXPECT_TRUE(absl::IsInvalidArgument(serve));
  EXPECT_NE(serve.message().find("--kvstore_capacity_bytes"), std::string::npos) << serve;
}

TEST(KvStoreConfig, UnknownConfigFileKeysAreErrors) {
  const std::string path = ::testing::TempDir() + "/kvstore_config_typo.toml";
  for (const char* text : {"capacity_byte = 2097152\n", "no_such_key = 3\n"}) {
    {
      std::ofstream f(path);
      f << text;
    }
    const char* argv[] = {"oscarkv_kvstore", "--config", path.c_str()};
    auto config = KvStoreConfig::FromFlags(3, argv);
    EXPECT_TRUE(absl::IsInvalidArgument(config.status())) << text << config.status();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace oscarkv::kvstore
