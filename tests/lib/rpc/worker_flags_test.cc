// The flags the worker binaries share: names and defaults bound to the caller's fields, a config
// file that flags override, --help, and the checks naming the bad flag.
#include "lib/rpc/worker_flags.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "gtest/gtest.h"

namespace oscarkv::rpc {
namespace {

struct Fields {
  std::string grpc_address = "0.0.0.0:1";
  std::string metrics_host = "0.0.0.0";
  int metrics_port = 9;
  std::string model = "default";
  std::string codec = "oscar";
  std::string calibration;
  std::string transfer_backend = "ucx";
  std::string ucx_transports = "tcp,self,sm";
  bool ucx_peer_failure_detection = true;
};

absl::Status Parse(std::vector<const char*> argv, Fields& f, std::string* help = nullptr) {
  argv.insert(argv.begin(), "oscarkv_test");
  return ParseWorkerFlags(
      static_cast<int>(argv.size()), argv.data(), "oscarkv_test: a worker", "oscarkv_test",
      [&](CLI::App& app) {
        AddWorkerEndpointFlags(app, f.grpc_address, f.metrics_host, f.metrics_port);
        AddWorkerModelFlags(app, f.model, f.codec, f.calibration, {"bf16", "oscar"});
        AddTransferFlags(app, f.transfer_backend, f.ucx_transports, f.ucx_peer_failure_detection);
        if (help != nullptr) *help = app.help();
      });
}

TEST(WorkerFlags, UnsetFlagsKeepTheFieldDefaults) {
  Fields f;
  ASSERT_TRUE(Parse({"--metrics_port", "0", "--transfer_backend", "local"}, f).ok());
  EXPECT_EQ(f.metrics_port, 0);
  EXPECT_EQ(f.transfer_backend, "local");
  EXPECT_EQ(f.grpc_address, "0.0.0.0:1");
  EXPECT_EQ(f.codec, "oscar");
  EXPECT_TRUE(f.ucx_peer_failure_detection);
}

TEST(WorkerFlags, FlagsOverrideTheConfigFile) {
  const std::string path = ::testing::TempDir() + "/worker_flags_test.toml";
  {
    std::ofstream out(path);
    out << "codec = \"bf16\"\nmetrics_port = 1234\nucx_peer_failure_detection = false\n";
  }
  Fields f;
  ASSERT_TRUE(Parse({"--config", path.c_str(), "--metrics_port", "4321"}, f).ok());
  EXPECT_EQ(f.codec, "bf16");
  EXPECT_EQ(f.metrics_port, 4321);
  EXPECT_FALSE(f.ucx_peer_failure_detection);
  std::remove(path.c_str());
}

TEST(WorkerFlags, UnknownConfigFileKeysAreErrors) {
  const std::string path = ::testing::TempDir() + "/worker_flags_extras.toml";
  // A misspelt key, an unknown one, and text that is no key = value at all.
  for (const char* text : {"metrics_prot = 1234\n", "no_such_key = 3\n", "garbage text\n"}) {
    {
      std::ofstream out(path);
      out << text;
    }
    Fields f;
    const absl::Status s = Parse({"--config", path.c_str()}, f);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << text << s;
    EXPECT_NE(s.message().find("--config: unknown key"), std::string::npos) << s;
    EXPECT_EQ(f.metrics_port, 9) << text;
  }
  std::remove(path.c_str());
}

TEST(WorkerFlags, UnknownFlagMessageDoesNotRepeatTheBinaryName) {
  Fields f;
  const absl::Status s = Parse({"--no_such_flag"}, f);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message().find("oscarkv_test"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--no_such_flag"), std::string::npos) << s;
}

TEST(WorkerFlags, HelpListsEveryFlagWithItsDefaultAndBadFlagsAreInvalid) {
  Fields f;
  std::string help;
  EXPECT_TRUE(absl::IsCancelled(Parse({"--help"}, f, &help)));
  for (const char* flag : {"--config", "--grpc_address", "--metrics_host", "--metrics_port",
                           "--model", "--codec", "--calibration", "--transfer_backend",
                           "--ucx_transports", "--ucx_peer_failure_detection"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(help.find("tcp,self,sm"), std::string::npos) << help;
  EXPECT_TRUE(absl::IsInvalidArgument(Parse({"--no_such_flag", "1"}, f)));
  EXPECT_TRUE(absl::IsInvalidArgument(Parse({"--metrics_port", "many"}, f)));
}

TEST(WorkerFlags, CodecMustBeOneOfTheListedAndTheHelpListsThem) {
  Fields f;
  std::string help;
  EXPECT_TRUE(absl::IsCancelled(Parse({"--help"}, f, &help)));
  EXPECT_NE(help.find("{bf16,oscar}"), std::string::npos) << help;
  const absl::Status s = Parse({"--codec", "kivi2"}, f);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("--codec"), std::string::npos) << s;
  EXPECT_NE(s.message().find("kivi2"), std::string::npos) << s;
  ASSERT_TRUE(Parse({"--codec", "bf16"}, f).ok());
  EXPECT_EQ(f.codec, "bf16");
}

TEST(WorkerFlags, ChecksNameTheFirstBadFlag) {
  auto names = [](const absl::Status& s, const char* flag) {
    return absl::IsInvalidArgument(s) && s.message().find(flag) != std::string::npos;
  };
  EXPECT_TRUE(ValidateTransferFlags("ucx", "tcp").ok());
  EXPECT_TRUE(ValidateTransferFlags("local", "").ok());  // transports matter only for ucx
  EXPECT_TRUE(names(ValidateTransferFlags("rdma", "tcp"), "--transfer_backend"));
  EXPECT_TRUE(names(ValidateTransferFlags("ucx", ""), "--ucx_transports"));

  EXPECT_TRUE(ValidateWorkerModelFlags("default", "oscar", 256, 0).ok());
  EXPECT_TRUE(names(ValidateWorkerModelFlags("", "", 100, -1), "--model"));
  EXPECT_TRUE(names(ValidateWorkerModelFlags("m", "", 256, 0), "--codec"));
  EXPECT_TRUE(names(ValidateWorkerModelFlags("m", "c", 0, 0), "--chunk_tokens"));
  EXPECT_TRUE(names(ValidateWorkerModelFlags("m", "c", 96, 0), "--chunk_tokens"));
  EXPECT_TRUE(names(ValidateWorkerModelFlags("m", "c", 128, -1), "--threads"));
}

}  // namespace
}  // namespace oscarkv::rpc
