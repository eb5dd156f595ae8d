// The helpers of the C++ tests that run on the in-process cluster (test_cluster.h): Must and
// CROUPIER_ASSERT_OK, which fail a googletest test, and the dataset, job and reads the cluster
// tests share.
#ifndef CROUPIER_SRC_TESTING_CLUSTER_TESTING_H_
#define CROUPIER_SRC_TESTING_CLUSTER_TESTING_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "croupier/consumer.h"
#include "gtest/gtest.h"
#include "proto/croupier.pb.h"
#include "src/testing/test_cluster.h"

namespace croupier::testing {

// The value of `value`. An error fails the test (EXPECT) and gives T's default value (an empty
// optional, a null pointer), so that the caller's loop ends instead of reading an error as a
// value; a T with no default value aborts the test binary, naming the error.
template <typename T>
T Must(absl::StatusOr<T> value) {
  if (value.ok()) return *std::move(value);
  ADD_FAILURE() << value.status();
  if constexpr (std::is_default_constructible_v<T>) {
    return T{};
  } else {
    std::fprintf(stderr, "Must: %s\n", value.status().ToString().c_str());
    std::abort();
  }
}

#define CROUPIER_ASSERT_OK(expr)                            \
  do {                                                      \
    const absl::Status _s = (expr);                         \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

// The records of the dataset the cluster tests deal: kDatasetRecords records of
// src/producer/producer_testing.h's RecordOf (feature "id" is the global record id), in 3 files.
inline constexpr int kDatasetRecords = 120;
// A cluster (TestCluster::Start(options)) with that dataset written in its dir().
std::unique_ptr<TestCluster> ClusterWithDataset(TestClusterOptions options = {});
// Job "train" over that dataset: batches of 4, seed 11, 2 epochs, `consumers` ranks.
v1::JobSpec DatasetSpec(const std::string& dir, uint32_t consumers,
                        const std::string& mode = "dealt");
// The record ids of every batch of `epoch` as the plan deals them: [rank][step] -> ids.
std::vector<std::vector<std::vector<int64_t>>> PlannedIds(const v1::JobInfo& job, uint64_t epoch);

// Every batch of `epoch` that `consumer` gets from step `step` on, as content hashes in step
// order; the error of the first Next() that fails.
absl::StatusOr<std::vector<uint64_t>> ReadEpoch(Consumer& consumer, uint64_t epoch,
                                                uint64_t step = 0);

// The global record ids (feature "id", an int64 scalar) of every batch `consumer` gets in
// `epoch`, batch by batch, waiting `per_batch` after each (a slow trainer).
absl::StatusOr<std::vector<std::vector<int64_t>>> ReadEpochIds(
    Consumer& consumer, uint64_t epoch, absl::Duration per_batch = absl::ZeroDuration());

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TESTING_CLUSTER_TESTING_H_
