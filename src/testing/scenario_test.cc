// One scenario suite for the three supplies a producer takes: TFRecord files, a records function
// (an addressable Python source; here a fake function stands in for the Python workers) and a
// stream (croupier.serve(); here a fake feed function supplies the batches in the order its
// SequentialSource asks for). The producers of a records function or a stream live as
// croupier.produce() and croupier.serve() run them: in ProducerNode::Serve, on a thread each. Every scenario runs for each supply, crossed with both
// control planes (the dispatcher called in process, or through its gRPC server and the gRPC
// clients) and both transports (TCP, shared memory), on the test cluster (test_cluster.h), and
// compares what each rank receives, record ids and content hashes, against a reference: the
// plan's deal, and a fault-free run.
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/producer/function_maker.h"
#include "src/producer/producer_testing.h"
#include "src/testing/cluster_testing.h"

namespace croupier::testing {
namespace {

enum class Supply { kTfrecord, kRecordsFunction, kStream };

// One cell of the suite: a supply, a control plane and a transport.
struct Setup {
  Supply supply;
  ControlPlaneKind control;
  bool shm;  // shared memory between producers and consumers; false: TCP
};

std::string SetupName(const ::testing::TestParamInfo<Setup>& info) {
  std::string name;
  switch (info.param.supply) {
    case Supply::kTfrecord:
      name = "Tfrecord";
      break;
    case Supply::kRecordsFunction:
      name = "RecordsFunction";
      break;
    case Supply::kStream:
      name = "Stream";
      break;
  }
  name += info.param.control == ControlPlaneKind::kGrpc ? "_Grpc" : "_InProcess";
  name += info.param.shm ? "_Shm" : "_Tcp";
  return name;
}

std::vector<Setup> AllSetups() {
  std::vector<Setup> out;
  for (Supply supply : {Supply::kTfrecord, Supply::kRecordsFunction, Supply::kStream}) {
    for (ControlPlaneKind control : {ControlPlaneKind::kInProcess, ControlPlaneKind::kGrpc}) {
      for (bool shm : {false, true}) out.push_back({supply, control, shm});
    }
  }
  return out;
}

constexpr uint64_t kBatchSize = 4;
constexpr uint64_t kBatchesPerEpoch = kDatasetRecords / kBatchSize;  // 30

// The records of batch g of `epoch` of the fake stream: ids distinct across epochs.
std::vector<int64_t> StreamIds(uint64_t epoch, uint64_t g) {
  std::vector<int64_t> ids;
  for (uint64_t i = 0; i < kBatchSize; ++i) {
    ids.push_back(static_cast<int64_t>(epoch * 100000 + g * kBatchSize + i));
  }
  return ids;
}

// Job "train" of a Python source (records function or stream): ids only, batches of kBatchSize,
// 2 epochs, `world` ranks.
v1::JobSpec SourceJobSpec(v1::SourceKind source, uint32_t world) {
  v1::JobSpec spec;
  spec.set_name("train");
  spec.set_source(source);
  spec.set_features("id:int64");
  spec.set_batch_size(kBatchSize);
  spec.set_num_consumers(world);
  spec.set_num_epochs(2);
  return spec;
}

// A cluster serving job "train" (batches of 4, 2 epochs, `world` ranks) from one supply, with its
// producers and, for a stream, one feeder thread per producer.
class SupplyCluster {
 public:
  SupplyCluster(Setup setup, int producers, uint32_t world, TestClusterOptions options = {})
      : supply_(setup.supply), shm_(setup.shm), producers_(producers) {
    options.producers = 0;
    options.control_plane = setup.control;
    options.consumer_shm = setup.shm ? "on" : "off";
    cluster_ = Must(TestCluster::Start(std::move(options)));
    if (!cluster_) return;
    v1::JobSpec spec;
    switch (supply_) {
      case Supply::kTfrecord:
        WriteDataset(cluster_->dir(), {50, 40, 30});
        spec = DatasetSpec(cluster_->dir(), world);
        break;
      case Supply::kRecordsFunction:
        spec = SourceJobSpec(v1::SOURCE_KIND_MAP, world);
        spec.set_seed(11);
        spec.set_num_records(kDatasetRecords);
        break;
      case Supply::kStream:
        spec = SourceJobSpec(v1::SOURCE_KIND_PYTHON, world);
        spec.set_source_batches_per_epoch(kBatchesPerEpoch);
        spec.set_source_count(static_cast<uint32_t>(producers));
        break;
    }
    job_ = Must(cluster_->CreateJob(spec));
    for (int k = 0; k < producers; ++k) AddProducer(k);
  }

  ~SupplyCluster() {
    if (!cluster_) return;
    for (size_t i = 0; i < cluster_->num_producers(); ++i) cluster_->StopProducer(i);
    for (auto& life : lives_) {
      if (life->thread.joinable()) life->thread.join();  // Serve returns once its node stops
    }
  }

  // What producer i's Serve returned (a records function's or a stream's), once it returns.
  absl::StatusOr<Served> WaitServed(size_t i) {
    Life& life = *lives_.at(i);
    if (life.thread.joinable()) life.thread.join();
    return life.served;
  }

  TestCluster& cluster() { return *cluster_; }

  // Producer i stops at once, as a killed one. A stream's batches can be made only by the source
  // that holds their tasks, so, as a new serving process does, a new producer then takes source
  // i's place (its feeder goes back to the first batch it is asked for); the other supplies'
  // batches are made again by the producers left.
  void KillProducer(size_t i) {
    cluster_->StopProducer(i);
    if (supply_ == Supply::kStream) AddProducer(static_cast<int>(i));
  }

  // Another job resuming this one's checkpoint: created, with a producer of its own where its
  // supply serves one job per producer.
  v1::JobInfo CreateResumedJob(const v1::JobSpec& spec) {
    v1::JobInfo info = Must(cluster_->CreateJob(spec));
    if (supply_ == Supply::kRecordsFunction) AddProducer(0, spec.name());
    return info;
  }
  const v1::JobInfo& job() const { return job_; }

  // The record ids of every batch of `epoch` as the job deals them to its `world` ranks:
  // [rank][step] -> ids.
  std::vector<std::vector<std::vector<int64_t>>> ExpectedIds(uint32_t world, uint64_t epoch) const {
    if (supply_ != Supply::kStream) return PlannedIds(job_, epoch);
    std::vector<std::vector<std::vector<int64_t>>> out(world);
    const uint64_t dealt = kBatchesPerEpoch / world * world;
    for (uint64_t g = 0; g < dealt; ++g) out[g % world].push_back(StreamIds(epoch, g));
    return out;
  }

 private:
  // A producer of job `job` (a records function's serves one job only) as source k.
  void AddProducer(int k, const std::string& job = "train") {
    ProducerNodeOptions options;
    options.runner.max_tasks = 2;
    options.shm = shm_;
    if (supply_ == Supply::kRecordsFunction) {
      options.supply = RecordsSupply{
          .job = job, .make = [](uint64_t, uint64_t, absl::Span<const uint64_t> ids) {
            return IdsBatch(std::vector<int64_t>(ids.begin(), ids.end()));
          }};
    }
    if (supply_ == Supply::kStream) {
      options.supply = StreamSupply{.job = job,
                                    .source_index = static_cast<uint32_t>(k),
                                    .feed = [](uint64_t epoch, uint64_t batch) {
                                      return IdsBatch(StreamIds(epoch, batch));
                                    }};
    }
    const size_t index = Must(cluster_->AddProducer(std::move(options)));
    if (supply_ == Supply::kTfrecord) return;
    ProducerNode* node = cluster_->producer(index);
    ASSERT_EQ(lives_.size(), index);
    auto life = std::make_unique<Life>();
    life->thread = std::thread([node, served = &life->served] { *served = node->Serve({}); });
    lives_.push_back(std::move(life));
  }

  struct Life {
    absl::StatusOr<Served> served = absl::UnknownError("serving");
    std::thread thread;
  };

  const Supply supply_;
  const bool shm_;
  const int producers_;
  std::unique_ptr<TestCluster> cluster_;
  v1::JobInfo job_;
  std::vector<std::unique_ptr<Life>> lives_;  // one per producer of a records function or stream
};

struct RankRead {
  std::vector<std::vector<int64_t>> ids;
  std::vector<uint64_t> hashes;
};

// Reads `epoch` from step `step` on every rank at once, each on its own thread, waiting
// `per_batch` after each batch; `meanwhile` runs on this thread while they read.
std::vector<RankRead> ReadAllRanks(TestCluster& cluster, uint32_t world, uint64_t epoch,
                                   ConsumerOptions options = {}, uint64_t step = 0,
                                   absl::Duration per_batch = absl::ZeroDuration(),
                                   const std::function<void()>& meanwhile = {}) {
  std::vector<RankRead> got(world);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto consumer = Must(cluster.Connect("train", r, world, options));
      if (!consumer) return;
      CROUPIER_ASSERT_OK(consumer->StartEpoch(epoch, step));
      while (true) {
        auto batch = Must(consumer->Next());
        if (!batch) break;
        absl::Span<const int64_t> ids = batch->view().Find("id")->ints();
        got[r].ids.emplace_back(ids.begin(), ids.end());
        got[r].hashes.push_back(batch->ContentHash());
        absl::SleepFor(per_batch);
      }
    });
  }
  if (meanwhile) meanwhile();
  for (auto& t : threads) t.join();
  return got;
}

std::vector<std::vector<uint64_t>> Hashes(const std::vector<RankRead>& got) {
  std::vector<std::vector<uint64_t>> out;
  for (const RankRead& r : got) out.push_back(r.hashes);
  return out;
}

ConsumerOptions PrefetchOne() {
  ConsumerOptions options;
  options.prefetch_batches = 1;
  return options;
}

class ScenarioTest : public ::testing::TestWithParam<Setup> {};

TEST_P(ScenarioTest, EveryRankGetsItsBatchesExactlyOnceInEqualSteps) {
  SupplyCluster s(GetParam(), /*producers=*/3, /*world=*/3);
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<RankRead> got = ReadAllRanks(s.cluster(), 3, epoch);
    const auto expected = s.ExpectedIds(3, epoch);
    std::multiset<int64_t> seen;
    for (uint32_t r = 0; r < 3; ++r) {
      EXPECT_EQ(got[r].ids, expected[r]) << "rank " << r << " epoch " << epoch;
      EXPECT_EQ(got[r].ids.size(), s.job().steps_per_epoch()) << "rank " << r;  // equal steps
      for (const auto& batch : got[r].ids) seen.insert(batch.begin(), batch.end());
    }
    // 120 records in batches of 4 over 3 ranks: every one dealt, none twice.
    EXPECT_EQ(seen.size(), static_cast<size_t>(kDatasetRecords));
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());
  }
}

TEST_P(ScenarioTest, OneProducerOrThreeSlowOnesDealTheSameBytes) {
  std::vector<std::vector<uint64_t>> hashes[2];
  for (int run = 0; run < 2; ++run) {
    TestClusterOptions options;
    if (run == 1) options.producer.test_max_delay = absl::Milliseconds(5);
    SupplyCluster s(GetParam(), run == 0 ? 1 : 3, /*world=*/2, options);
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      const auto got = Hashes(ReadAllRanks(s.cluster(), 2, epoch));
      hashes[run].insert(hashes[run].end(), got.begin(), got.end());
    }
  }
  EXPECT_EQ(hashes[0], hashes[1]);
  ASSERT_EQ(hashes[0].size(), 4u);
  EXPECT_EQ(hashes[0][0].size(), 15u);  // 30 batches an epoch over 2 ranks
}

TEST_P(ScenarioTest, AResumedEpochDealsTheRestOfTheFaultFreeRun) {
  std::vector<std::vector<uint64_t>> reference;
  {
    SupplyCluster s(GetParam(), 2, 2);
    reference = Hashes(ReadAllRanks(s.cluster(), 2, 0));
  }
  SupplyCluster s(GetParam(), 2, 2);
  // Every rank checkpointed after 5 steps; the job goes on from step 5.
  const auto got = Hashes(ReadAllRanks(s.cluster(), 2, 0, {}, /*step=*/5));
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_EQ(reference[r].size(), 15u);
    EXPECT_EQ(got[r], std::vector<uint64_t>(reference[r].begin() + 5, reference[r].end()))
        << "rank " << r;
  }
}

TEST_P(ScenarioTest, AStoppedProducersBatchesAreDealtAgainIdentically) {
  std::vector<RankRead> reference;
  {
    SupplyCluster s(GetParam(), 2, 2);
    reference = ReadAllRanks(s.cluster(), 2, 0);
  }
  // Tasks of one round, so that the stopped producer holds work when it stops mid-epoch.
  TestClusterOptions options;
  options.rounds_per_task = 1;
  SupplyCluster s(GetParam(), 2, 2, options);
  const auto got = ReadAllRanks(s.cluster(), 2, 0, PrefetchOne(), 0, absl::Milliseconds(30), [&] {
    absl::SleepFor(absl::Milliseconds(150));
    s.KillProducer(0);
  });
  EXPECT_EQ(Hashes(got), Hashes(reference));
  // Where they differ, what each step held: its record ids and content hash.
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].ids.size(), reference[r].ids.size()) << "rank " << r;
    for (size_t step = 0; step < got[r].ids.size(); ++step) {
      EXPECT_EQ(got[r].ids[step], reference[r].ids[step]) << "rank " << r << " step " << step;
      EXPECT_EQ(got[r].hashes[step], reference[r].hashes[step])
          << "rank " << r << " step " << step << ": ids "
          << ::testing::PrintToString(got[r].ids[step]);
    }
  }
}

TEST_P(ScenarioTest, ResumingWithAnotherWorldSizeRepeatsAndSkipsNothing) {
  if (GetParam().supply == Supply::kStream) {
    GTEST_SKIP() << "a stream job takes no start_batch: a stream resumes through its consumers' "
                    "positions (AResumedEpochDealsTheRestOfTheFaultFreeRun)";
  }
  SupplyCluster s(GetParam(), 2, 2);
  // Two ranks read 5 steps of epoch 0 (global batches 0..9), then the job goes on with 3 ranks.
  std::multiset<int64_t> seen;
  std::vector<uint64_t> first_hashes;
  for (uint32_t r = 0; r < 2; ++r) {
    auto consumer = Must(s.cluster().Connect("train", r, 2));
    ASSERT_NE(consumer, nullptr);
    CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
    for (int i = 0; i < 5; ++i) {
      auto batch = Must(consumer->Next());
      ASSERT_TRUE(batch.has_value());
      for (int64_t id : batch->view().Find("id")->ints()) seen.insert(id);
    }
  }
  v1::JobSpec resumed = s.job().spec();
  resumed.set_name("resumed");
  resumed.set_num_consumers(3);
  resumed.set_start_epoch(0);
  resumed.set_start_batch(10);
  s.CreateResumedJob(resumed);
  std::vector<size_t> steps(3);
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> ids(3);
  for (uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ConsumerOptions options;
      options.timeout = absl::Seconds(20);
      auto consumer = Must(s.cluster().Connect("resumed", r, 3, options));
      if (!consumer) return;
      const auto got = Must(ReadEpochIds(*consumer, 0));
      steps[r] = got.size();
      for (const auto& batch : got) ids[r].insert(ids[r].end(), batch.begin(), batch.end());
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(steps[r], steps[0]);  // equal steps
    seen.insert(ids[r].begin(), ids[r].end());
  }
  // 30 batches an epoch: 10 read by two ranks, then 20 in whole rounds of 3 (18): 28 batches,
  // no record twice.
  EXPECT_EQ(steps[0], 6u);
  EXPECT_EQ(seen.size(), 28u * kBatchSize);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a record twice";
}

TEST_P(ScenarioTest, AJobsProducersLearnItHasEndedOnceEveryRankReadItsLastEpoch) {
  if (GetParam().supply == Supply::kTfrecord) {
    GTEST_SKIP() << "a TFRecord producer serves every job: no job's end is its own";
  }
  SupplyCluster s(GetParam(), 2, 2);
  ReadAllRanks(s.cluster(), 2, 0);
  absl::SleepFor(absl::Milliseconds(300));  // a few heartbeats: one epoch left, not ended
  for (size_t i = 0; i < 2; ++i) EXPECT_FALSE(s.cluster().producer(i)->job_ended()) << i;
  ReadAllRanks(s.cluster(), 2, 1);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(s.cluster().producer(i)->WaitForJobEnd(absl::Seconds(10))) << "producer " << i;
    // Its Serve returns: the job has ended, and it has left it.
    absl::StatusOr<Served> served = s.WaitServed(i);
    ASSERT_TRUE(served.ok()) << served.status();
    EXPECT_TRUE(served->job_ended) << "producer " << i;
  }
  absl::StatusOr<v1::StatusResponse> status = s.cluster().Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->producers_size(), 0) << "the producers left the job";
}

TEST_P(ScenarioTest, AJobsProducersLearnItHasEndedOnceItIsDeleted) {
  if (GetParam().supply == Supply::kTfrecord) {
    GTEST_SKIP() << "a TFRecord producer serves every job: no job's end is its own";
  }
  // Heartbeats a minute apart: the producer's heartbeat waits at the dispatcher for work for
  // that long, and must be answered when the job is deleted, not when the wait ends.
  TestClusterOptions options;
  options.heartbeat_interval = absl::Seconds(60);
  options.producer_timeout = absl::Seconds(180);
  SupplyCluster s(GetParam(), 1, 2, options);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(s.cluster().producer(0)->job_ended());
  v1::DeleteJobRequest del;
  del.set_name("train");
  del.set_force(true);
  ASSERT_TRUE(s.cluster().NewClient()->DeleteJob(del).ok());
  EXPECT_TRUE(s.cluster().producer(0)->WaitForJobEnd(absl::Seconds(10)));
}

INSTANTIATE_TEST_SUITE_P(Supplies, ScenarioTest, ::testing::ValuesIn(AllSetups()), SetupName);

}  // namespace
}  // namespace croupier::testing
