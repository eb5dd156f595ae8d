// Helpers shared by the plan tests.
#ifndef CROUPIER_SRC_PLAN_PLAN_TEST_UTIL_H_
#define CROUPIER_SRC_PLAN_PLAN_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "croupier/plan.h"
#include "gtest/gtest.h"

namespace croupier::plan_test {

inline PlanSpec MakeSpec(uint64_t n, uint64_t seed, uint32_t batch_size, uint32_t num_consumers,
                         ShuffleMode shuffle = ShuffleMode::kGlobal,
                         Remainder remainder = Remainder::kDrop, uint32_t block_size = 1024,
                         uint32_t window_blocks = 16) {
  PlanSpec spec;
  spec.num_records = n;
  spec.seed = seed;
  spec.batch_size = batch_size;
  spec.num_consumers = num_consumers;
  spec.shuffle = shuffle;
  spec.remainder = remainder;
  spec.block_size = block_size;
  spec.window_blocks = window_blocks;
  return spec;
}

// Create that fails the test on error (the specs in tests are meant to be valid).
inline EpochPlan MustCreate(const PlanSpec& spec, uint64_t epoch) {
  auto plan = EpochPlan::Create(spec, epoch);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// The records of every batch of the epoch, batch after batch: position p of the result is the
// record at position p.
inline std::vector<uint64_t> AllBatches(const EpochPlan& plan) {
  std::vector<uint64_t> records(plan.num_positions());
  for (uint64_t g = 0; g < plan.num_batches(); ++g) {
    plan.BatchRecords(g, absl::MakeSpan(records).subspan(g * plan.batch_size(), plan.batch_size()));
  }
  return records;
}

}  // namespace croupier::plan_test

#endif  // CROUPIER_SRC_PLAN_PLAN_TEST_UTIL_H_
