// A gtest fixture base for tests on the installed default model: each test suite loads it once
// (ResolveModelPath("default")) and every test skips, saying how to install it, when it is absent.
// Derive and use model_. Header-only.
#ifndef OSCARKV_TESTS_TESTING_DEFAULT_MODEL_TEST_H_
#define OSCARKV_TESTS_TESTING_DEFAULT_MODEL_TEST_H_

#include "gtest/gtest.h"
#include "lib/model/model.h"

namespace oscarkv::testing {

class DefaultModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!model::DefaultModelAvailable()) return;
    auto path = model::ResolveModelPath("default");
    ASSERT_TRUE(path.ok()) << path.status();
    auto m = model::Model::Load(*path);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "default model not installed (run scripts/setup.sh)";
  }
  inline static model::Model* model_ = nullptr;
};

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_TESTING_DEFAULT_MODEL_TEST_H_
