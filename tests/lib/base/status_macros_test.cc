#include "lib/base/status_macros.h"

#include "gtest/gtest.h"

namespace oscarkv {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  OSCARKV_ASSIGN_OR_RETURN(int half, Half(x));
  OSCARKV_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  OSCARKV_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesValueAndError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacros, ReturnIfErrorStopsAtFirstError) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(3).message(), "odd");
}

TEST(StatusMacros, AnnotateKeepsCodeAndPrependsContext) {
  const absl::Status s = Annotate(absl::NotFoundError("no block"), "lookup");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "lookup: no block");
}

}  // namespace
}  // namespace oscarkv
