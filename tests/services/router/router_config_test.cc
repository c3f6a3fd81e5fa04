#include "services/router/router_config.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace oscarkv::router {
namespace {

absl::StatusOr<RouterConfig> Parse(std::vector<const char*> args, std::string* help = nullptr) {
  args.insert(args.begin(), "oscarkv_router");
  std::ostringstream out;
  auto r = RouterConfig::FromFlags(static_cast<int>(args.size()), args.data(), out);
  if (help) *help = out.str();
  return r;
}

TEST(RouterConfig, DefaultsAreValid) {
  RouterConfig c;
  EXPECT_TRUE(c.Validate().ok());
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->http_port, 8000);
  EXPECT_EQ(p->default_codec, "oscar");
  EXPECT_FALSE(p->testing_echo_backend);
}

TEST(RouterConfig, FlagsOverrideDefaults) {
  auto p = Parse({"--port", "0", "--codec", "bf16", "--allowed_codecs", "bf16,oscar",
                  "--overlap_weight", "2.5", "--testing_echo_backend"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->http_port, 0);
  EXPECT_EQ(p->default_codec, "bf16");
  EXPECT_EQ(p->allowed_codecs, (std::vector<std::string>{"bf16", "oscar"}));
  EXPECT_EQ(p->overlap_weight, 2.5);
  EXPECT_TRUE(p->testing_echo_backend);
}

TEST(RouterConfig, ConfigFileThenFlags) {
  const std::string path = ::testing::TempDir() + "/router_config_test.toml";
  {
    std::ofstream f(path);
    f << "port = 8123\ndefault_max_tokens = 17\n";
  }
  auto p = Parse({"--config", path.c_str(), "--default_max_tokens", "9"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->http_port, 8123);
  EXPECT_EQ(p->default_max_tokens, 9);
  std::remove(path.c_str());
}

TEST(RouterConfig, BadValuesStopStartupWithTheFieldName) {
  auto p = Parse({"--port", "70000"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("port"), std::string::npos) << p.status();
  p = Parse({"--codec", "int3"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("codec"), std::string::npos);
  p = Parse({"--shared_credit", "1.5"});
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
  p = Parse({"--no_such_flag"});
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
}

TEST(RouterConfig, UnknownConfigFileKeysAreErrors) {
  const std::string path = ::testing::TempDir() + "/router_config_extras.toml";
  for (const char* text : {"prot = 8123\n", "no_such_key = 3\n", "garbage text\n"}) {
    {
      std::ofstream f(path);
      f << text;
    }
    auto p = Parse({"--config", path.c_str()});
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << text << p.status();
  }
  std::remove(path.c_str());
}

TEST(RouterConfig, DefaultMaxTokensMustNotExceedTheLimit) {
  auto p = Parse({"--default_max_tokens", "5000"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("default_max_tokens"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("max_tokens_limit"), std::string::npos) << p.status();
  EXPECT_TRUE(Parse({"--default_max_tokens", "5000", "--max_tokens_limit", "5000"}).ok());
}

TEST(RouterConfig, UnknownCodecNamesAreRejectedWhereTheyAppear) {
  auto p = Parse({"--allowed_codecs", "oscar,nosuch"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--allowed_codecs=nosuch"), std::string::npos)
      << p.status();
  EXPECT_NE(p.status().message().find("oscar-gram"), std::string::npos) << p.status();  // lists
  p = Parse({"--codec", "int3", "--allowed_codecs", "bf16"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--codec=int3: unknown codec"), std::string::npos)
      << p.status();
}

// The defaults are what the workers can serve; a codec only `oscarkv eval` runs is refused.
TEST(RouterConfig, AllowedCodecsAreTheServableOnes) {
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->allowed_codecs, (std::vector<std::string>{"bf16", "oscar-hadamard", "oscar-norot",
                                                         "oscar-gram", "oscar"}));
  for (const char* codec : {"kivi2", "int2-naive", "int2-hadamard", "oscar-tns"}) {
    p = Parse({"--allowed_codecs", absl::StrCat("oscar,", codec).c_str()});
    ASSERT_FALSE(p.ok()) << codec;
    EXPECT_NE(p.status().message().find(absl::StrCat("--allowed_codecs=", codec,
                                                     ": evaluation-only codec")),
              std::string::npos)
        << p.status();
  }
}

TEST(RouterConfig, HelpListsFlagsButHidesTheTestingBackend) {
  std::string help;
  auto p = Parse({"--help"}, &help);
  EXPECT_TRUE(absl::IsCancelled(p.status()));
  EXPECT_NE(help.find("--request_timeout_s"), std::string::npos);
  EXPECT_EQ(help.find("testing_echo_backend"), std::string::npos);
}

}  // namespace
}  // namespace oscarkv::router
