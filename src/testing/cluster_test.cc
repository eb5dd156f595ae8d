// The service's guarantees on the in-process cluster (test_cluster.h): a real dispatcher logic,
// real producers and consumers, in one process. Every check compares content: the record ids each
// rank received against the plan, and content hashes against a fault-free run.
#include <algorithm>
#include <functional>
#include <latch>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "croupier/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/producer_testing.h"
#include "src/testing/test_cluster.h"

namespace croupier::testing {
namespace {

// Reads `epoch` on every rank at once, each on its own thread, waiting `per_batch` after each
// batch; `meanwhile` runs on this thread while they read (a fault to inject). The ids per rank.
std::vector<std::vector<std::vector<int64_t>>> ReadAllRanks(
    TestCluster& cluster, uint32_t world, uint64_t epoch, ConsumerOptions options = {},
    absl::Duration per_batch = absl::ZeroDuration(), const std::function<void()>& meanwhile = {}) {
  std::vector<std::vector<std::vector<int64_t>>> got(world);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto consumer = Must(cluster.Connect("train", r, world, options));
      if (!consumer) return;
      CROUPIER_ASSERT_OK(consumer->StartEpoch(epoch));
      while (true) {
        auto batch = Must(consumer->Next());
        if (!batch) break;
        absl::Span<const int64_t> ids = batch->view().Find("id")->ints();
        got[r].emplace_back(ids.begin(), ids.end());
        absl::SleepFor(per_batch);
      }
    });
  }
  if (meanwhile) meanwhile();
  for (auto& t : threads) t.join();
  return got;
}

// Epoch 0 of a 2-rank job on 2 producers with no fault: the ids per rank.
std::vector<std::vector<std::vector<int64_t>>> FaultFreeRun() {
  auto cluster = ClusterWithDataset({.producers = 2});
  EXPECT_TRUE(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)).ok());
  return ReadAllRanks(*cluster, 2, 0);
}

TEST(ClusterTest, EveryRankGetsThePlansBatchesExactlyOnceWithThreeProducers) {
  auto cluster = ClusterWithDataset({.producers = 3});
  const v1::JobInfo job = Must(cluster->CreateJob(DatasetSpec(cluster->dir(), 3)));
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    const auto got = ReadAllRanks(*cluster, 3, epoch);
    const auto planned = PlannedIds(job, epoch);
    std::multiset<int64_t> seen;
    for (uint32_t r = 0; r < 3; ++r) {
      EXPECT_EQ(got[r], planned[r]) << "rank " << r << " epoch " << epoch;
      EXPECT_EQ(got[r].size(), job.steps_per_epoch());  // equal steps
      for (const auto& batch : got[r]) seen.insert(batch.begin(), batch.end());
    }
    // Exactly once: 120 records in batches of 4 over 3 ranks deal all 120, none twice.
    EXPECT_EQ(seen.size(), static_cast<size_t>(kDatasetRecords));
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());
  }
}

TEST(ClusterTest, OneProducerOrThreeSlowOnesMakeTheSameBytes) {
  std::vector<std::vector<uint64_t>> hashes[2];
  for (int run = 0; run < 2; ++run) {
    TestClusterOptions options{.producers = run == 0 ? 1 : 3};
    if (run == 1) options.producer.test_max_delay = absl::Milliseconds(5);
    auto cluster = ClusterWithDataset(options);
    CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)).status());
    hashes[run].resize(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto consumer = Must(cluster->Connect("train", r, 2));
        for (uint64_t epoch = 0; epoch < 2; ++epoch) {
          auto epoch_hashes = Must(ReadEpoch(*consumer, epoch));
          hashes[run][r].insert(hashes[run][r].end(), epoch_hashes.begin(), epoch_hashes.end());
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_EQ(hashes[0][0].size(), 30u);  // 2 epochs of 15 steps
}

TEST(ClusterTest, FirstComeDealsEveryBatchOnceToConsumersOfDifferentSpeeds) {
  auto cluster = ClusterWithDataset({.producers = 2});
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 2, "first_come")).status());
  std::vector<std::vector<int64_t>> ids(2);
  std::vector<size_t> batches(2);
  std::vector<std::thread> threads;
  // Both start together, each prefetching one batch: the slow one holds at most two at a time,
  // so the fast one takes more. (With the default window, the slow one's prefetch could take
  // the whole epoch before the other had started: first_come allows it.)
  std::latch started(2);
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto consumer = Must(cluster->Connect("train", r, 2, {.prefetch_batches = 1}));
      started.arrive_and_wait();
      if (!consumer) return;
      CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
      while (true) {
        auto batch = Must(consumer->Next());
        if (!batch) break;
        ++batches[r];
        for (int64_t id : batch->view().Find("id")->ints()) ids[r].push_back(id);
        if (r == 1) absl::SleepFor(absl::Milliseconds(20));  // the slow one
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> all = ids[0];
  all.insert(all.end(), ids[1].begin(), ids[1].end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kDatasetRecords);
  for (int i = 0; i < kDatasetRecords; ++i) expected[i] = i;
  EXPECT_EQ(all, expected);
  EXPECT_GT(batches[0], batches[1]) << "the fast consumer takes more";
}

TEST(ClusterTest, AStoppedProducersBatchesAreMadeAgainIdentically) {
  const auto reference = FaultFreeRun();
  // Tasks of one round, so that the stopped producer holds work when it stops mid-epoch.
  auto cluster = ClusterWithDataset({.producers = 2, .rounds_per_task = 1});
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)).status());
  const auto got =
      ReadAllRanks(*cluster, 2, 0, {.prefetch_batches = 1}, absl::Milliseconds(30), [&] {
        absl::SleepFor(absl::Milliseconds(150));
        cluster->StopProducer(0);
      });
  EXPECT_EQ(got, reference);
  // The stopped producer expires (producer_timeout) and the other one alone is left.
  v1::StatusResponse status;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    status = Must(cluster->Status());
    if (status.producers_size() == 1 || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(status.producers_size(), 1);
  EXPECT_EQ(status.producers(0).data_address(), cluster->producer(1)->data_address());
}

TEST(ClusterTest, TheDispatcherCrashedMidEpochAndRestartedFromItsJournalLosesNothing) {
  const auto reference = FaultFreeRun();
  auto cluster = ClusterWithDataset({.producers = 2, .rounds_per_task = 1});
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)).status());
  const auto got =
      ReadAllRanks(*cluster, 2, 0, {.prefetch_batches = 1}, absl::Milliseconds(20), [&] {
        absl::SleepFor(absl::Milliseconds(150));
        cluster->dispatcher().Crash();
        absl::SleepFor(absl::Milliseconds(300));  // calls retry
        CROUPIER_ASSERT_OK(cluster->dispatcher().Restart());
      });
  EXPECT_EQ(got, reference);
}

TEST(ClusterTest, ResumingWithAnotherWorldSizeRepeatsAndSkipsNothing) {
  auto cluster = ClusterWithDataset({.producers = 2});
  const v1::JobInfo job = Must(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)));
  // Two ranks read 5 steps of epoch 0 (global batches 0..9), then the job goes on with 3.
  std::multiset<int64_t> seen;
  for (uint32_t r = 0; r < 2; ++r) {
    auto consumer = Must(cluster->Connect("train", r, 2));
    CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
    for (int i = 0; i < 5; ++i) {
      auto batch = Must(consumer->Next());
      for (int64_t id : batch->view().Find("id")->ints()) seen.insert(id);
    }
  }
  v1::JobSpec resumed = DatasetSpec(cluster->dir(), 3);
  resumed.set_name("resumed");
  resumed.set_start_epoch(0);
  resumed.set_start_batch(10);
  const v1::JobInfo next = Must(cluster->CreateJob(resumed));
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> ids(3);
  std::vector<size_t> steps(3);
  for (uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto consumer = Must(cluster->Connect("resumed", r, 3));
      CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
      while (true) {
        auto batch = Must(consumer->Next());
        if (!batch) break;
        ++steps[r];
        for (int64_t id : batch->view().Find("id")->ints()) ids[r].push_back(id);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(steps[r], steps[0]);  // equal steps
    seen.insert(ids[r].begin(), ids[r].end());
  }
  // 30 batches an epoch: 10 read by two ranks, then 20 in whole rounds of 3 (18): 28 batches.
  EXPECT_EQ(steps[0], 6u);
  EXPECT_EQ(seen.size(), 28u * 4);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a record twice";
}

TEST(ClusterTest, AJobItsConsumersLeftDoesNotStarveAnother) {
  // One producer holding at most 2 tasks: job "train" takes its slots, then its only consumer
  // reads two batches and closes. Its tasks go back to the dispatcher, so job "other" runs.
  TestClusterOptions options{.producers = 1};
  options.producer.runner.threads = 1;
  options.producer.runner.max_tasks = 2;
  auto cluster = ClusterWithDataset(std::move(options));
  v1::JobSpec left = DatasetSpec(cluster->dir(), 1);
  left.set_num_epochs(3);
  const v1::JobInfo left_job = Must(cluster->CreateJob(left));
  {
    auto consumer = Must(cluster->Connect("train", 0, 1));
    CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(Must(consumer->Next()).has_value());
  }
  v1::JobSpec other = DatasetSpec(cluster->dir(), 1);
  other.set_name("other");
  other.set_seed(12);
  const v1::JobInfo other_job = Must(cluster->CreateJob(other));
  {
    auto consumer = Must(cluster->Connect("other", 0, 1, {.timeout = absl::Seconds(20)}));
    EXPECT_EQ(Must(ReadEpochIds(*consumer, 0)), PlannedIds(other_job, 0)[0]);
  }
  // And "train" resumes where its consumer was when one comes back.
  auto consumer = Must(cluster->Connect("train", 0, 1, {.timeout = absl::Seconds(20)}));
  ASSERT_EQ(consumer->registered_position().step, 2u);
  CROUPIER_ASSERT_OK(consumer->StartEpoch(0, 2));
  std::vector<std::vector<int64_t>> rest;
  while (true) {
    auto batch = Must(consumer->Next());
    if (!batch) break;
    absl::Span<const int64_t> ids = batch->view().Find("id")->ints();
    rest.emplace_back(ids.begin(), ids.end());
  }
  const auto planned = PlannedIds(left_job, 0)[0];
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(planned.begin() + 2, planned.end()));
}

}  // namespace
}  // namespace croupier::testing
