#include <cstdint>
#include <thread>
#include <vector>

#include "croupier/plan.h"
#include "gtest/gtest.h"
#include "src/plan/plan_test_util.h"

namespace croupier {
namespace {

using plan_test::AllBatches;
using plan_test::MakeSpec;
using plan_test::MustCreate;

constexpr ShuffleMode kModes[] = {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlocks};

// Calls fn(spec) for every valid combination of sizes, consumers, modes, remainders and seeds.
template <typename Fn>
void ForEachSpec(Fn fn) {
  struct Blocks {
    uint32_t size, window;
  };
  for (uint64_t n : {1, 2, 5, 17, 100, 1023, 1024, 1025, 4099}) {
    for (uint32_t b : {1, 3, 32}) {
      for (uint32_t c : {1, 2, 5}) {
        for (ShuffleMode mode : kModes) {
          for (Remainder rem : {Remainder::kDrop, Remainder::kPad}) {
            for (Blocks blocks : {Blocks{1024, 16}, Blocks{7, 3}, Blocks{1, 1}}) {
              if (mode != ShuffleMode::kBlocks && blocks.size != 1024) continue;
              for (uint64_t seed : {0, 7}) {
                PlanSpec spec = MakeSpec(n, seed, b, c, mode, rem, blocks.size, blocks.window);
                if (!ValidatePlanSpec(spec).ok()) continue;  // drop with n < B*N
                SCOPED_TRACE(::testing::Message()
                             << "n=" << n << " B=" << b << " N=" << c << " shuffle="
                             << ShuffleModeName(mode) << " remainder=" << RemainderName(rem)
                             << " S=" << blocks.size << " W=" << blocks.window << " seed=" << seed);
                fn(spec);
              }
            }
          }
        }
      }
    }
  }
}

TEST(PlanEpochTest, BatchCountsAndRecordMultiplicity) {
  ForEachSpec([](const PlanSpec& spec) {
    const uint64_t n = spec.num_records, round = uint64_t{spec.batch_size} * spec.num_consumers;
    for (uint64_t epoch : {0, 1}) {
      EpochPlan plan = MustCreate(spec, epoch);
      const bool drop = spec.remainder == Remainder::kDrop;
      ASSERT_EQ(plan.num_batches(),
                (drop ? n / round : (n + round - 1) / round) * spec.num_consumers);
      ASSERT_EQ(plan.num_batches() % spec.num_consumers, 0u);
      ASSERT_EQ(plan.steps_per_consumer() * spec.num_consumers, plan.num_batches());
      ASSERT_EQ(plan.num_positions(), plan.num_batches() * spec.batch_size);
      std::vector<uint64_t> all = AllBatches(plan);
      std::vector<int> count(n, 0);
      for (uint64_t p = 0; p < all.size(); ++p) {
        ASSERT_LT(all[p], n);
        ASSERT_EQ(all[p], plan.RecordAt(p)) << "p=" << p;
        ++count[all[p]];
      }
      if (drop) {
        // No record twice, and fewer than one round of records left over.
        for (uint64_t r = 0; r < n; ++r) ASSERT_LE(count[r], 1) << "record " << r;
        ASSERT_LT(n - all.size(), round);
      } else {
        for (uint64_t r = 0; r < n; ++r) ASSERT_GE(count[r], 1) << "record " << r;
        // The padding repeats the epoch's order from its start.
        for (uint64_t p = n; p < all.size(); ++p) ASSERT_EQ(all[p], all[p % n]) << "p=" << p;
        ASSERT_LT(all.size() - n, round);
      }
    }
  });
}

TEST(PlanEpochTest, DealGivesEveryConsumerTheSameSteps) {
  ForEachSpec([](const PlanSpec& spec) {
    EpochPlan plan = MustCreate(spec, 0);
    std::vector<uint64_t> steps(spec.num_consumers, 0);
    for (uint64_t g = 0; g < plan.num_batches(); ++g) {
      const uint32_t consumer = plan.ConsumerOf(g);
      ASSERT_LT(consumer, spec.num_consumers);
      ASSERT_EQ(consumer, g % spec.num_consumers);
      // Each consumer's steps come in order 0, 1, 2, ... as g grows.
      ASSERT_EQ(plan.StepOf(g), steps[consumer]);
      ASSERT_EQ(plan.GlobalBatch(consumer, plan.StepOf(g)), g);
      ++steps[consumer];
    }
    for (uint64_t s : steps) ASSERT_EQ(s, plan.steps_per_consumer());
  });
}

TEST(PlanEpochTest, SameInputsSamePlanOtherEpochOrSeedOtherPlan) {
  for (ShuffleMode mode : {ShuffleMode::kGlobal, ShuffleMode::kBlocks}) {
    const PlanSpec spec = MakeSpec(10000, 3, 16, 4, mode, Remainder::kDrop, 64, 4);
    const std::vector<uint64_t> base = AllBatches(MustCreate(spec, 5));
    EXPECT_EQ(AllBatches(MustCreate(spec, 5)), base);
    EXPECT_NE(AllBatches(MustCreate(spec, 6)), base);
    PlanSpec other_seed = spec;
    other_seed.seed = 4;
    EXPECT_NE(AllBatches(MustCreate(other_seed, 5)), base);
  }
}

// What makes elastic resume exact: the order is the same whatever B, N and the remainder policy.
TEST(PlanEpochTest, OrderDoesNotDependOnBatchSizeConsumersOrRemainder) {
  for (ShuffleMode mode : kModes) {
    const EpochPlan a = MustCreate(MakeSpec(5000, 8, 16, 4, mode, Remainder::kDrop, 50, 3), 1);
    const EpochPlan b = MustCreate(MakeSpec(5000, 8, 7, 3, mode, Remainder::kPad, 50, 3), 1);
    for (uint64_t p = 0; p < 5000; ++p) ASSERT_EQ(a.RecordAt(p), b.RecordAt(p)) << "p=" << p;
  }
}

TEST(PlanEpochTest, ShuffleNoneIsTheIdentity) {
  EpochPlan plan = MustCreate(MakeSpec(1000, 9, 7, 3, ShuffleMode::kNone, Remainder::kPad), 4);
  const std::vector<uint64_t> all = AllBatches(plan);
  for (uint64_t p = 0; p < all.size(); ++p) ASSERT_EQ(all[p], p % 1000);
}

TEST(PlanEpochTest, PadWithFewerRecordsThanABatchWrapsRepeatedly) {
  EpochPlan plan = MustCreate(MakeSpec(3, 1, 8, 2, ShuffleMode::kGlobal, Remainder::kPad), 0);
  ASSERT_EQ(plan.num_batches(), 2u);
  const std::vector<uint64_t> all = AllBatches(plan);
  for (uint64_t p = 3; p < 16; ++p) ASSERT_EQ(all[p], all[p - 3]);
  EpochPlan one = MustCreate(MakeSpec(1, 1, 4, 3, ShuffleMode::kBlocks, Remainder::kPad), 2);
  EXPECT_EQ(AllBatches(one), std::vector<uint64_t>(12, 0));
}

// The plan is a pure function: computed from scratch in another thread it is the same, and a
// copy shared across threads answers the same.
TEST(PlanEpochTest, IndependentComputationsAgree) {
  for (ShuffleMode mode : kModes) {
    const PlanSpec spec = MakeSpec(50000, 11, 32, 3, mode, Remainder::kPad, 100, 5);
    const EpochPlan here = MustCreate(spec, 2);
    std::vector<uint64_t> there, shared;
    std::thread thread([&] {
      there = AllBatches(MustCreate(spec, 2));
      shared = AllBatches(here);
    });
    const std::vector<uint64_t> mine = AllBatches(here);
    thread.join();
    EXPECT_EQ(there, mine);
    EXPECT_EQ(shared, mine);
  }
}

TEST(PlanEpochTest, BillionRecordsSampled) {
  for (ShuffleMode mode : kModes) {
    const PlanSpec spec = MakeSpec(1000000007, 1, 256, 8, mode, Remainder::kPad);
    const EpochPlan plan = MustCreate(spec, 0);
    ASSERT_EQ(plan.num_batches(), (1000000007 / 2048 + 1) * 8);
    std::vector<uint64_t> batch(256);
    for (uint64_t g : {uint64_t{0}, uint64_t{1}, uint64_t{123457}, plan.num_batches() - 1}) {
      plan.BatchRecords(g, absl::MakeSpan(batch));
      for (uint64_t i = 0; i < 256; ++i) {
        ASSERT_LT(batch[i], spec.num_records);
        ASSERT_EQ(batch[i], plan.RecordAt(g * 256 + i)) << "g=" << g << " i=" << i;
      }
    }
  }
}

// Pins the algorithm end to end: a change to any of these values reshuffles every existing job
// and so needs a format version change, not a test update.
TEST(PlanEpochTest, GoldenValues) {
  ASSERT_EQ(kPlanVersion, 1) << "update the golden values with the version, never alone";
  const std::vector<uint64_t> expected[3][2] = {
      {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {{63949, 4409, 69413, 65681, 98695, 13703, 55412, 97915},
       {5085, 88765, 86466, 70967, 90560, 84062, 55091, 56430}},
      {{1933, 96815, 96896, 75215, 1990, 82710, 82788, 82750},
       {23710, 26512, 50206, 23798, 29395, 23702, 50230, 26503}},
  };
  for (int m = 0; m < 3; ++m) {
    for (uint64_t epoch : {0, 1}) {
      const EpochPlan plan =
          MustCreate(MakeSpec(100000, 42, 8, 2, kModes[m], Remainder::kDrop, 100, 4), epoch);
      EXPECT_EQ(plan.BatchRecords(0), expected[m][epoch])
          << ShuffleModeName(kModes[m]) << " epoch " << epoch;
    }
  }
}

}  // namespace
}  // namespace croupier
