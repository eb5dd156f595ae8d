#include "tools/cli_args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ArgsTest, ValuesBooleansAndPositionals) {
  auto args = Args::Parse({"a.tfrecord", "--limit", "3", "--json", "--seed=7", "b"},
                          {"limit", "seed"}, {"json"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->positional(), ElementsAre("a.tfrecord", "b"));
  EXPECT_TRUE(args->Has("json"));
  EXPECT_EQ(*args->GetInt("limit", 0, 0, 10), 3);
  EXPECT_EQ(*args->GetUint("seed", 0), 7u);
  EXPECT_EQ(*args->GetUint("absent", 42), 42u);
}

TEST(ArgsTest, ErrorsNameTheFlag) {
  auto unknown = Args::Parse({"--bogus"}, {}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status()));
  EXPECT_THAT(unknown.status().message(), HasSubstr("--bogus"));
  auto missing = Args::Parse({"--limit"}, {"limit"}, {});
  EXPECT_THAT(missing.status().message(), HasSubstr("--limit needs a value"));
  auto args = Args::Parse({"--limit", "x"}, {"limit"}, {});
  ASSERT_TRUE(args.ok());
  auto bad = args->GetInt("limit", 0, 0, 10);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("--limit must be an integer from 0 to 10"));
  auto out_of_range = Args::Parse({"--limit=11"}, {"limit"}, {})->GetInt("limit", 0, 0, 10);
  EXPECT_TRUE(absl::IsInvalidArgument(out_of_range.status()));
}

}  // namespace
}  // namespace croupier::cli
