// The service's guarantees on the in-process cluster (test_cluster.h): a real dispatcher logic,
// real producers and consumers, in one process. Every check compares content: the record ids each
// rank received against the plan, and content hashes against a fault-free run. What every supply
// shares (exactly once, the same bytes from any producers, resumes, failover) is the scenario
// suite's (scenario_test.cc), run for TFRecord files, a records function and a stream; these are
// the rest: first-come deals, the dispatcher's crash, jobs beside jobs, a rank's trouble.
#include <algorithm>
#include <atomic>
#include <functional>
#include <latch>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <unistd.h>

#include "croupier/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_macros.h"
#include "src/producer/producer_testing.h"
#include "src/testing/cluster_testing.h"

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
      if (consumer) got[r] = Must(ReadEpochIds(*consumer, epoch, per_batch));
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

// The job of FaultFreeRun in tasks of one round, so that both producers hold work when a fault
// comes mid-epoch.
std::unique_ptr<TestCluster> ClusterForAFault() {
  auto cluster = ClusterWithDataset({.producers = 2, .rounds_per_task = 1});
  EXPECT_TRUE(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)).ok());
  return cluster;
}

// Epoch 0 read on both ranks a batch at a time, `per_batch` apart, while `fault` runs 150 ms in:
// the ids per rank.
std::vector<std::vector<std::vector<int64_t>>> ReadThroughAFault(
    TestCluster& cluster, absl::Duration per_batch, const std::function<void()>& fault) {
  return ReadAllRanks(cluster, 2, 0, {.prefetch_batches = 1}, per_batch, [&] {
    absl::SleepFor(absl::Milliseconds(150));
    fault();
  });
}

TEST(ClusterTest, OnlyTheGrpcControlPlaneServesMetrics) {
  TestClusterOptions in_process_options;
  in_process_options.producers = 0;
  in_process_options.metrics_port = 0;
  auto in_process = TestCluster::Start(in_process_options);
  ASSERT_FALSE(in_process.ok());
  EXPECT_EQ(in_process.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(in_process.status().message(), ::testing::HasSubstr("ControlPlaneKind::kGrpc"));

  TestClusterOptions grpc;
  grpc.producers = 0;
  grpc.control_plane = ControlPlaneKind::kGrpc;
  auto plain = TestCluster::Start(grpc);
  CROUPIER_ASSERT_OK(plain.status());
  EXPECT_EQ((*plain)->metrics_port(), 0);
  grpc.job_retention = absl::Seconds(30);
  grpc.metrics_port = 0;
  auto served = TestCluster::Start(grpc);
  CROUPIER_ASSERT_OK(served.status());
  EXPECT_GT((*served)->metrics_port(), 0);
  auto status = (*served)->Status();
  CROUPIER_ASSERT_OK(status.status());
  EXPECT_EQ(status->job_retention_seconds(), 30);
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
      const absl::Duration per_batch = r == 1 ? absl::Milliseconds(20) : absl::ZeroDuration();
      const auto got = Must(ReadEpochIds(*consumer, 0, per_batch));  // rank 1 is the slow one
      batches[r] = got.size();
      for (const auto& batch : got) ids[r].insert(ids[r].end(), batch.begin(), batch.end());
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
  auto cluster = ClusterForAFault();
  EXPECT_EQ(ReadThroughAFault(*cluster, absl::Milliseconds(30), [&] { cluster->StopProducer(0); }),
            reference);
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
  auto cluster = ClusterForAFault();
  const auto got = ReadThroughAFault(*cluster, absl::Milliseconds(20), [&] {
    cluster->dispatcher().Crash();
    absl::SleepFor(absl::Milliseconds(300));  // calls retry
    CROUPIER_ASSERT_OK(cluster->dispatcher().Restart());
  });
  EXPECT_EQ(got, reference);
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


// Reads every step of `epoch` of `job` as rank `rank` of `world`: the ids per step, or the error
// of the first step that fails.
absl::StatusOr<std::vector<std::vector<int64_t>>> ReadRank(TestCluster& cluster,
                                                           const std::string& job, uint32_t rank,
                                                           uint32_t world, uint64_t epoch) {
  ASSIGN_OR_RETURN(std::unique_ptr<Consumer> consumer,
                   cluster.Connect(job, rank, world, {.timeout = absl::Seconds(8)}));
  return ReadEpochIds(*consumer, epoch);
}

// One producer with 2 task slots; job "train" has 3 ranks, of which rank 2 registers and reads
// nothing. Before a slot was making capacity, ranks 0 and 1 stalled after the two tasks the
// producer held (their batches were made, rank 2's were never taken) until their timeout, and job
// "other" on the same producer got nothing. Now both jobs' readers finish their epochs, and rank 2,
// reading at last, gets the plan's batches: each record exactly once.
TEST(ClusterTest, AStuckRankCostsOnlyItself) {
  TestClusterOptions options{.producers = 1, .rounds_per_task = 1};
  options.producer.runner.threads = 2;
  options.producer.runner.max_tasks = 2;
  auto cluster = ClusterWithDataset(std::move(options));
  const v1::JobInfo job = Must(cluster->CreateJob(DatasetSpec(cluster->dir(), 3)));
  v1::JobSpec other_spec = DatasetSpec(cluster->dir(), 1);
  other_spec.set_name("other");
  const v1::JobInfo other = Must(cluster->CreateJob(other_spec));
  auto stuck = Must(cluster->Connect("train", 2, 3));  // registered, never reads
  ASSERT_NE(stuck, nullptr);
  const auto planned = PlannedIds(job, 0);
  std::vector<absl::StatusOr<std::vector<std::vector<int64_t>>>> got(3);
  std::thread other_reader([&] {
    EXPECT_EQ(Must(ReadRank(*cluster, "other", 0, 1, 0)), PlannedIds(other, 0)[0]);
  });
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] { got[r] = ReadRank(*cluster, "train", r, 3, 0); });
  }
  for (auto& t : readers) t.join();
  other_reader.join();
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
    EXPECT_EQ(*got[r], planned[r]) << "rank " << r;
  }
  // Rank 2 reads at last.
  EXPECT_EQ(Must(ReadEpochIds(*stuck, 0)), planned[2]);
}

// Record 17 cannot be made into a batch (a feature is missing): without shuffling it is in batch 4,
// rank 1's step 1, in the epoch's second task. Rank 1 gets that error, naming the record, and
// reads no further; the other ranks read their whole epoch. Before, the failed task kept its
// producer slot, and so did every later task (rank 1's batches were never taken): ranks 0 and 2
// stalled after two tasks until their deadline.
TEST(ClusterTest, AFailedBatchFailsOnlyTheRankThatNeedsIt) {
  TestClusterOptions options{.producers = 1, .rounds_per_task = 1};
  options.producer.runner.max_tasks = 2;
  auto cluster = Must(TestCluster::Start(std::move(options)));
  ASSERT_NE(cluster, nullptr);
  WriteDataset(cluster->dir(), {50, 40, 30}, [](int64_t id) {
    Example e = RecordOf(id);
    if (id == 17) e.pop_back();  // no "name"
    return EncodeExample(e);
  });
  v1::JobSpec spec = DatasetSpec(cluster->dir(), 3);
  spec.set_shuffle(v1::SHUFFLE_NONE);
  const v1::JobInfo job = Must(cluster->CreateJob(spec));
  const auto planned = PlannedIds(job, 0);
  uint32_t bad_rank = 3;
  size_t bad_step = 0;
  for (uint32_t r = 0; r < 3; ++r) {
    for (size_t s = 0; s < planned[r].size(); ++s) {
      if (std::count(planned[r][s].begin(), planned[r][s].end(), 17) > 0) {
        bad_rank = r;
        bad_step = s;
      }
    }
  }
  ASSERT_EQ(bad_rank, 1u);
  ASSERT_EQ(bad_step, 1u);
  std::vector<std::vector<std::vector<int64_t>>> got(3);
  std::vector<absl::Status> ended(3);
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      auto consumer = Must(cluster->Connect("train", r, 3, {.timeout = absl::Seconds(8)}));
      if (!consumer) return;
      ended[r] = consumer->StartEpoch(0);
      while (ended[r].ok()) {
        absl::StatusOr<std::optional<Batch>> batch = consumer->Next();
        if (!batch.ok()) {
          ended[r] = batch.status();
          break;
        }
        if (!batch->has_value()) break;
        absl::Span<const int64_t> ids = (*batch)->view().Find("id")->ints();
        got[r].emplace_back(ids.begin(), ids.end());
      }
    });
  }
  for (auto& t : readers) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    if (r == bad_rank) {
      EXPECT_THAT(ended[r].message(), ::testing::HasSubstr("record 17 of"));
      EXPECT_THAT(ended[r].message(), ::testing::HasSubstr("feature 'name'"));
      EXPECT_EQ(got[r], std::vector<std::vector<int64_t>>(planned[r].begin(),
                                                          planned[r].begin() + bad_step));
    } else {
      EXPECT_TRUE(ended[r].ok()) << "rank " << r << ": " << ended[r];
      EXPECT_EQ(got[r], planned[r]) << "rank " << r;
    }
  }
}

// 2,000 consumers of one job, all registered at once, each reading its epoch: every rank gets the
// plan's batches in order (equal steps), and across ranks every planned record comes once. The
// consumers read one after another on this thread (a dealt rank needs no other rank to read), so
// the test holds 2,000 heartbeat threads, not 2,000 readers with their prefetch workers.
TEST(ClusterTest, TwoThousandConsumersOfOneJobReadAnEpochExactlyOnce) {
  constexpr uint32_t kWorld = 2000;
  TestClusterOptions options{.producers = 2,
                             .heartbeat_interval = absl::Seconds(1),
                             .producer_timeout = absl::Seconds(30),
                             .consumer_timeout = absl::Seconds(60),
                             .journal = false};
  auto cluster = Must(TestCluster::Start(std::move(options)));
  ASSERT_NE(cluster, nullptr);
  WriteDataset(cluster->dir(), {2 * kWorld, 2 * kWorld});
  v1::JobSpec spec = DatasetSpec(cluster->dir(), kWorld);
  spec.set_batch_size(2);
  spec.set_num_epochs(1);
  const v1::JobInfo job = Must(cluster->CreateJob(spec));
  ASSERT_EQ(job.steps_per_epoch(), 2u);
  std::vector<std::unique_ptr<Consumer>> consumers(kWorld);
  for (uint32_t r = 0; r < kWorld; ++r) {
    consumers[r] = Must(cluster->Connect("train", r, kWorld, {.timeout = absl::Seconds(60)}));
    ASSERT_NE(consumers[r], nullptr) << "rank " << r;
  }
  const auto planned = PlannedIds(job, 0);
  std::set<int64_t> seen;
  for (uint32_t r = 0; r < kWorld; ++r) {
    const auto got = Must(ReadEpochIds(*consumers[r], 0));
    ASSERT_EQ(got, planned[r]) << "rank " << r;
    for (const auto& batch : got) {
      for (int64_t id : batch) ASSERT_TRUE(seen.insert(id).second) << "record " << id << " twice";
    }
    consumers[r]->Close();
  }
  EXPECT_EQ(seen.size(), size_t{4} * kWorld);
}

// An input file deleted mid-job, and its producer replaced: the rank that needs a batch of the
// file gets DATA_LOSS naming it, long before its deadline. (A probe of the service saw the ranks
// give up after 20 s with "producer does not hold batch 72", the file named only in the new
// producer's log: the new producer could not make the job's maker and refused its tasks.)
TEST(ClusterTest, AFileDeletedMidJobIsNamedToTheRankThatNeedsIt) {
  auto cluster = ClusterWithDataset({.producers = 1});
  ASSERT_NE(cluster, nullptr);
  const std::string gone = cluster->dir() + "/part-1.tfrecord";
  ASSERT_TRUE(cluster->CreateJob(DatasetSpec(cluster->dir(), 1)).ok());
  auto consumer = Must(cluster->Connect("train", 0, 1, {.timeout = absl::Seconds(30)}));
  ASSERT_NE(consumer, nullptr);
  CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
  auto first = consumer->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  ASSERT_EQ(::unlink(gone.c_str()), 0);
  cluster->StopProducer(0);
  ASSERT_TRUE(cluster->AddProducer().ok());
  const absl::Time start = absl::Now();
  absl::Status ended = absl::OkStatus();
  while (ended.ok()) {
    auto batch = consumer->Next();
    if (!batch.ok()) ended = batch.status();
    if (batch.ok() && !batch->has_value()) break;
  }
  EXPECT_TRUE(absl::IsDataLoss(ended)) << ended;
  EXPECT_THAT(ended.message(), ::testing::HasSubstr(gone));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << ended;
}

// A producer that leaves (SIGTERM, or a pool that can make nothing) hands its tasks back at once:
// with a producer timeout far beyond the consumers' deadline, the ranks still read the plan's
// batches, exactly once, from the producer that stays.
TEST(ClusterTest, ALeavingProducersTasksAreMadeByAnotherAtOnce) {
  TestClusterOptions options{.producers = 2, .producer_timeout = absl::Seconds(60),
                             .rounds_per_task = 1};
  auto cluster = ClusterWithDataset(std::move(options));
  const v1::JobInfo job = Must(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)));
  const absl::Time start = absl::Now();
  const auto got = ReadAllRanks(*cluster, 2, 0, {.prefetch_batches = 1, .timeout = absl::Seconds(8)},
                                absl::Milliseconds(20), [&] {
                                  absl::SleepFor(absl::Milliseconds(100));
                                  cluster->producer(0)->Leave();
                                });
  const auto planned = PlannedIds(job, 0);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(got[r], planned[r]) << "rank " << r;
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
}

// A producer that drains while the ranks read slowly: it keeps the tasks it had made and serves
// them (not made again elsewhere), its other tasks go to the other producer at once, and it
// leaves once it has served what it kept, well within its bound. Every rank gets the plan.
TEST(ClusterTest, ADrainingProducerServesTheBatchesItMadeAndLeaves) {
  TestClusterOptions options{.producers = 2, .producer_timeout = absl::Seconds(60),
                             .rounds_per_task = 1};
  auto cluster = ClusterWithDataset(std::move(options));
  const v1::JobInfo job = Must(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)));
  ProducerNode::Drained drained;
  absl::Duration took;
  const auto got = ReadAllRanks(*cluster, 2, 0, {.prefetch_batches = 1, .timeout = absl::Seconds(20)},
                                absl::Milliseconds(60), [&] {
                                  absl::SleepFor(absl::Milliseconds(150));
                                  const absl::Time start = absl::Now();
                                  drained = cluster->producer(0)->Drain(absl::Seconds(20));
                                  took = absl::Now() - start;
                                });
  const auto planned = PlannedIds(job, 0);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(got[r], planned[r]) << "rank " << r;
  EXPECT_GT(drained.kept, 0u) << "it had made no task whole";
  EXPECT_EQ(drained.served, drained.kept);
  EXPECT_LT(took, absl::Seconds(10));
  // The dispatcher removed it (it left), and nothing of its is waiting to be made again.
  const v1::StatusResponse status = Must(cluster->Status());
  ASSERT_EQ(status.producers_size(), 1);
  EXPECT_FALSE(status.producers(0).draining());
}

// Producers come and go: through a 3-epoch job, a producer joins or one leaves every 100 ms (at
// least one stays). Each rank gets exactly the bytes of a run with 2 fixed producers: a batch's
// content does not depend on which producer made it, so an engine may scale producers freely.
TEST(ClusterTest, ProducersThatComeAndGoChangeNoByte) {
  constexpr uint32_t kWorld = 3;
  constexpr uint64_t kEpochs = 3;
  auto run = [&](bool churn) {
    TestClusterOptions options{.producers = churn ? 1 : 2, .producer_timeout = absl::Seconds(60),
                               .rounds_per_task = 1};
    auto cluster = ClusterWithDataset(std::move(options));
    v1::JobSpec spec = DatasetSpec(cluster->dir(), kWorld);
    spec.set_num_epochs(kEpochs);
    EXPECT_TRUE(cluster->CreateJob(spec).ok());
    std::atomic<bool> done{false};
    int joined = 0, left = 0;
    std::thread churner([&] {
      if (!churn) return;
      size_t oldest = 0;  // producers [oldest, num_producers()) are live
      for (int i = 0; !done.load(); ++i) {
        absl::SleepFor(absl::Milliseconds(100));
        const size_t live = cluster->num_producers() - oldest;
        if (i % 2 == 0 || live == 1) {
          EXPECT_TRUE(cluster->AddProducer().ok());
          ++joined;
        } else {
          cluster->producer(oldest++)->Leave();
          ++left;
        }
      }
    });
    std::vector<std::vector<uint64_t>> hashes(kWorld);
    std::vector<std::thread> readers;
    for (uint32_t r = 0; r < kWorld; ++r) {
      readers.emplace_back([&, r] {
        auto consumer = Must(cluster->Connect("train", r, kWorld,
                                              {.prefetch_batches = 1, .timeout = absl::Seconds(20)}));
        if (!consumer) return;
        for (uint64_t e = 0; e < kEpochs; ++e) {
          CROUPIER_ASSERT_OK(consumer->StartEpoch(e));
          while (true) {
            auto batch = Must(consumer->Next());
            if (!batch) break;
            hashes[r].push_back(batch->ContentHash());
            absl::SleepFor(absl::Milliseconds(25));
          }
        }
      });
    }
    for (auto& t : readers) t.join();
    done = true;
    churner.join();
    if (churn) {
      EXPECT_GE(joined, 3) << "the run was too short to churn";
      EXPECT_GE(left, 2) << "the run was too short to churn";
    }
    return hashes;
  };
  const auto fixed = run(false);
  const auto churned = run(true);
  for (uint32_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(fixed[r].size(), 10u * kEpochs);  // 30 batches an epoch over 3 ranks
    EXPECT_EQ(churned[r], fixed[r]) << "rank " << r;
  }
}

}  // namespace
}  // namespace croupier::testing
