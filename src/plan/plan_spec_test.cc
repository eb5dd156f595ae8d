#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "croupier/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

PlanSpec GoodSpec() {
  PlanSpec spec;
  spec.num_records = 1000;
  spec.seed = 1;
  spec.batch_size = 10;
  spec.num_consumers = 4;
  return spec;
}

void ExpectInvalid(const PlanSpec& spec, const ::testing::Matcher<std::string>& message) {
  absl::Status status = ValidatePlanSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), message);
  // Create reports exactly the same error.
  EXPECT_EQ(EpochPlan::Create(spec, 0).status(), status);
}

TEST(PlanSpecTest, GoodSpecIsOk) {
  EXPECT_TRUE(ValidatePlanSpec(GoodSpec()).ok());
  PlanSpec spec = GoodSpec();
  spec.shuffle = ShuffleMode::kBlocks;
  spec.remainder = Remainder::kPad;
  spec.num_records = PlanSpec::kMaxRecords;
  EXPECT_TRUE(ValidatePlanSpec(spec).ok());
}

TEST(PlanSpecTest, EachZeroSettingIsNamed) {
  // A good spec but for one setting set to 0: the error names the setting and its range.
  auto expect_zero_named = []<typename T>(T PlanSpec::*setting, const std::string& name,
                                          const std::string& range) {
    SCOPED_TRACE(name);
    PlanSpec spec = GoodSpec();
    spec.*setting = 0;
    ExpectInvalid(spec, AllOf(HasSubstr(name + " is 0"), HasSubstr(range)));
  };
  expect_zero_named(&PlanSpec::num_records, "num_records", "[1, 2^62]");
  expect_zero_named(&PlanSpec::batch_size, "batch_size", "at least 1");
  expect_zero_named(&PlanSpec::num_consumers, "num_consumers", "at least 1");
  expect_zero_named(&PlanSpec::block_size, "block_size", "at least 1");
  expect_zero_named(&PlanSpec::window_blocks, "window_blocks", "at least 1");
}

TEST(PlanSpecTest, TooManyRecords) {
  PlanSpec spec = GoodSpec();
  spec.num_records = PlanSpec::kMaxRecords + 1;
  ExpectInvalid(spec, AllOf(HasSubstr("num_records is 4611686018427387905"), HasSubstr("2^62")));
}

TEST(PlanSpecTest, EnumsOutOfRange) {
  PlanSpec spec = GoodSpec();
  spec.shuffle = static_cast<ShuffleMode>(7);
  ExpectInvalid(spec, AllOf(HasSubstr("shuffle is 7"), HasSubstr("none, global, blocks")));
  spec = GoodSpec();
  spec.remainder = static_cast<Remainder>(-1);
  ExpectInvalid(spec, AllOf(HasSubstr("remainder is -1"), HasSubstr("drop, pad")));
}

TEST(PlanSpecTest, DropWithFewerRecordsThanOneRoundIsEmpty) {
  PlanSpec spec = GoodSpec();
  spec.num_records = 39;  // B*N = 40
  ExpectInvalid(spec, AllOf(HasSubstr("num_records is 39"),
                            HasSubstr("fewer than batch_size*num_consumers = 10*4 = 40"),
                            HasSubstr("every epoch would be empty"),
                            HasSubstr("use remainder=pad or a smaller batch_size")));
  spec.num_records = 40;
  EXPECT_TRUE(ValidatePlanSpec(spec).ok());
  spec.num_records = 1;
  spec.remainder = Remainder::kPad;
  EXPECT_TRUE(ValidatePlanSpec(spec).ok());
}

TEST(PlanSpecTest, HugeBatchTimesConsumersDoesNotOverflow) {
  PlanSpec spec = GoodSpec();
  spec.batch_size = 0xffffffffu;
  spec.num_consumers = 0xffffffffu;
  ExpectInvalid(spec, HasSubstr("every epoch would be empty"));
  spec.remainder = Remainder::kPad;
  auto plan = EpochPlan::Create(spec, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_batches(), 0xffffffffu);
  EXPECT_EQ(plan->steps_per_consumer(), 1u);
}

TEST(PlanSpecTest, NamesRoundTrip) {
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlocks}) {
    auto parsed = ParseShuffleMode(ShuffleModeName(mode));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, mode);
  }
  for (Remainder remainder : {Remainder::kDrop, Remainder::kPad}) {
    auto parsed = ParseRemainder(RemainderName(remainder));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, remainder);
  }
  EXPECT_EQ(ShuffleModeName(ShuffleMode::kBlocks), "blocks");
  EXPECT_EQ(RemainderName(Remainder::kPad), "pad");
}

TEST(PlanSpecTest, UnknownNamesListTheChoices) {
  auto mode = ParseShuffleMode("Global");
  EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mode.status().message()),
              AllOf(HasSubstr("'Global'"), HasSubstr("none, global, blocks")));
  auto remainder = ParseRemainder("");
  EXPECT_EQ(remainder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(remainder.status().message()), HasSubstr("drop, pad"));
}

}  // namespace
}  // namespace croupier
