// Statistical sanity checks of shuffle quality. The seeds are fixed, so these tests are
// deterministic; the bounds are several standard deviations wide so that a legitimate change of
// algorithm would not trip them, while a broken shuffle (identity, a rotation, a biased round
// function) would.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "croupier/plan.h"
#include "gtest/gtest.h"
#include "src/plan/keys.h"
#include "src/plan/permutation.h"
#include "src/plan/plan_test_util.h"

namespace croupier {
namespace {

using plan_test::MakeSpec;
using plan_test::MustCreate;

// Where record `record` lands in the epoch order of `plan`.
uint64_t PositionOf(const EpochPlan& plan, uint64_t record) {
  for (uint64_t p = 0; p < plan.spec().num_records; ++p) {
    if (plan.RecordAt(p) == record) return p;
  }
  return plan.spec().num_records;
}

TEST(PlanQualityTest, GlobalPositionOfARecordIsUniform) {
  const int kSeeds = 5000;
  std::vector<int> hits(10, 0);
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    ++hits[PositionOf(MustCreate(MakeSpec(10, seed, 1, 1), 0), 0)];
  }
  // Expected 500 each, standard deviation about 21.
  for (int h : hits) EXPECT_TRUE(h > 400 && h < 600) << h;
}

TEST(PlanQualityTest, BlocksPositionOfARecordIsUniformAcrossTheEpoch) {
  // Block 0 lands anywhere among 100 blocks, then record 0 anywhere in its 40-record window.
  const int kSeeds = 5000;
  std::vector<int> hits(10, 0);
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const PlanSpec spec = MakeSpec(1000, seed, 1, 1, ShuffleMode::kBlocks, Remainder::kDrop, 10, 4);
    ++hits[PositionOf(MustCreate(spec, 0), 0) / 100];
  }
  for (int h : hits) EXPECT_TRUE(h > 400 && h < 600) << h;
}

TEST(PlanQualityTest, AdjacentRecordsRarelyStayAdjacent) {
  const uint64_t n = 100000;
  for (uint64_t seed : {1, 2, 3}) {
    const EpochPlan plan = MustCreate(MakeSpec(n, seed, 1, 1), 0);
    int adjacent = 0;
    for (uint64_t p = 0; p + 1 < n; ++p) {
      const uint64_t a = plan.RecordAt(p), b = plan.RecordAt(p + 1);
      adjacent += (a + 1 == b || b + 1 == a);
    }
    // A uniform shuffle keeps about 2 adjacent pairs adjacent.
    EXPECT_LT(adjacent, 15) << "seed " << seed;
  }
}

TEST(PlanQualityTest, EpochsAreUnrelated) {
  const PlanSpec spec = MakeSpec(100000, 5, 1, 1);
  const EpochPlan e0 = MustCreate(spec, 0), e1 = MustCreate(spec, 1);
  int same = 0;
  for (uint64_t p = 0; p < spec.num_records; ++p) same += e0.RecordAt(p) == e1.RecordAt(p);
  EXPECT_LT(same, 15);  // about 1 expected
}

// Tiny domains are where a Feistel network is weakest (each half is a bit or two), hence their
// extra rounds. Over many keys every order of 3 to 6 elements should turn up about equally often.
TEST(PlanQualityTest, TinyPermutationsAreAllReachedEvenly) {
  for (uint64_t n : {3, 4, 5, 6}) {
    int orders = 1;
    for (uint64_t i = 2; i <= n; ++i) orders *= static_cast<int>(i);
    const int kPerOrder = 200;
    std::map<std::vector<uint64_t>, int> seen;
    for (uint64_t key = 0; key < static_cast<uint64_t>(orders * kPerOrder); ++key) {
      plan::Permutation p(n, plan::Mix64(key));
      std::vector<uint64_t> order;
      for (uint64_t i = 0; i < n; ++i) order.push_back(p(i));
      ++seen[order];
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(orders)) << "n=" << n;
    for (const auto& [order, count] : seen) {
      // Binomial with mean 200, standard deviation 14.
      EXPECT_TRUE(count > kPerOrder / 2 && count < kPerOrder * 2) << "n=" << n << ": " << count;
    }
  }
}

}  // namespace
}  // namespace croupier
