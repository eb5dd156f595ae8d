// ProducerNode's own logic on the in-process cluster: registration, its data address, start-up
// against an unreachable dispatcher, a prompt shutdown while its heartbeat waits for work, and
// rejoining a dispatcher that forgot it.
#include "src/node/producer_node.h"

#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/producer_testing.h"
#include "src/testing/cluster_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using testing::IdsBatch;
using testing::IdsOf;
using testing::TestCluster;

std::unique_ptr<TestCluster> Cluster(int producers, bool journal = true) {
  auto cluster = TestCluster::Start({.producers = producers, .journal = journal});
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *std::move(cluster);
}

// The data addresses of the producers the dispatcher knows.
std::vector<std::string> KnownAddresses(TestCluster& cluster) {
  std::vector<std::string> out;
  auto status = cluster.Status();
  EXPECT_TRUE(status.ok()) << status.status();
  if (status.ok()) {
    for (const auto& p : status->producers()) out.push_back(p.data_address());
  }
  return out;
}

TEST(ProducerNodeTest, RegistersWithItsDataAddress) {
  auto cluster = Cluster(2);
  EXPECT_NE(cluster->producer(0)->producer_id(), 0u);
  EXPECT_NE(cluster->producer(0)->producer_id(), cluster->producer(1)->producer_id());
  EXPECT_THAT(cluster->producer(0)->data_address(), HasSubstr("127.0.0.1:"));
  EXPECT_THAT(KnownAddresses(*cluster),
              ::testing::UnorderedElementsAre(cluster->producer(0)->data_address(),
                                              cluster->producer(1)->data_address()));
}

TEST(ProducerNodeTest, AnUnreachableDispatcherAtStartIsADeadline) {
  auto cluster = Cluster(0);
  cluster->dispatcher().Crash();
  ProducerNodeOptions options;
  options.dispatcher = "in-process";
  options.connect_timeout = absl::Milliseconds(300);
  InProcessDispatcher* dispatcher = &cluster->dispatcher();
  options.control_plane = [dispatcher] { return dispatcher->NewClient(absl::Milliseconds(300)); };
  const absl::Time start = absl::Now();
  auto node = ProducerNode::Start(options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(node.status())) << node.status();
  EXPECT_THAT(node.status().message(), HasSubstr("in-process"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ProducerNodeTest, ShutdownIsPromptWhileItsHeartbeatWaitsForWork) {
  // Heartbeats every 5 s: an idle producer's heartbeat is held at the dispatcher up to 5 s, so
  // only a shutdown that cancels it returns within a second.
  auto cluster = TestCluster::Start({.producers = 1, .heartbeat_interval = absl::Seconds(5)});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::SleepFor(absl::Milliseconds(500));  // idle: its heartbeat now waits at the dispatcher
  const absl::Time start = absl::Now();
  (*cluster)->StopProducer(0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(ProducerNodeTest, ADispatcherThatForgotItIsJoinedAgain) {
  auto cluster = Cluster(1, /*journal=*/false);
  const std::string address = cluster->producer(0)->data_address();
  ASSERT_TRUE(cluster->dispatcher().Restart().ok());  // no journal: everything forgotten
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (KnownAddresses(*cluster).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(KnownAddresses(*cluster), ::testing::ElementsAre(address));
}

TEST(ProducerNodeTest, MakesTheBatchesOfItsTasksAndReportsThemFinished) {
  auto cluster = Cluster(1);
  testing::WriteDataset(cluster->dir(), {16});
  v1::JobSpec spec;
  spec.set_name("train");
  spec.add_files(cluster->dir() + "/part-*.tfrecord");
  spec.set_features(testing::kFeatures);
  spec.set_batch_size(4);
  spec.set_num_consumers(1);
  spec.set_num_epochs(1);
  ASSERT_TRUE(cluster->CreateJob(spec).ok());
  auto consumer = cluster->Connect("train", 0, 1);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  auto hashes = testing::ReadEpoch(**consumer, 0);
  ASSERT_TRUE(hashes.ok()) << hashes.status();
  EXPECT_EQ(hashes->size(), 4u);
  // Every batch served: the producer reports its task finished, and holds nothing more.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    auto status = cluster->Status();
    ASSERT_TRUE(status.ok());
    if (status->producers_size() == 1 && status->producers(0).tasks_size() == 0 &&
        status->producers(0).stats().batches_served() == 4) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto status = cluster->Status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->producers(0).tasks_size(), 0);
  EXPECT_EQ(status->producers(0).stats().batches_made(), 4u);
  EXPECT_EQ(status->producers(0).stats().batches_served(), 4u);
}

// A job of 2 ranks, 2 epochs of 5 steps, with the given ranks' acknowledged positions.
v1::GetJobResponse JobAt(uint64_t epochs, std::vector<std::pair<uint64_t, uint64_t>> positions) {
  v1::GetJobResponse answer;
  answer.mutable_job()->mutable_spec()->set_name("j");
  answer.mutable_job()->mutable_spec()->set_num_consumers(2);
  answer.mutable_job()->mutable_spec()->set_num_epochs(epochs);
  answer.mutable_job()->set_steps_per_epoch(5);
  for (size_t r = 0; r < positions.size(); ++r) {
    v1::RankPosition* p = answer.add_rank_positions();
    p->set_job("j");
    p->set_rank(static_cast<uint32_t>(r));
    p->set_epoch(positions[r].first);
    p->set_step(positions[r].second);
  }
  return answer;
}

TEST(ProducerNodeTest, AJobHasEndedOnceEveryRankAcknowledgedItsLastEpochOrItWasDeleted) {
  EXPECT_TRUE(JobHasEnded(JobAt(2, {{1, 5}, {1, 5}})));
  EXPECT_TRUE(JobHasEnded(JobAt(2, {{1, 5}, {2, 0}})));
  EXPECT_FALSE(JobHasEnded(JobAt(2, {{1, 5}, {1, 4}}))) << "a rank short of the last step";
  EXPECT_FALSE(JobHasEnded(JobAt(2, {{1, 5}}))) << "a rank that never acknowledged";
  EXPECT_FALSE(JobHasEnded(JobAt(2, {{0, 5}, {0, 5}}))) << "an epoch left";
  EXPECT_FALSE(JobHasEnded(JobAt(0, {{9, 5}, {9, 5}}))) << "an unbounded job never ends";
  EXPECT_TRUE(JobHasEnded(absl::NotFoundError("job 'j' deleted")));
  EXPECT_FALSE(JobHasEnded(absl::UnavailableError("restarting")));
  EXPECT_FALSE(JobHasEnded(absl::DeadlineExceededError("unreachable")));
}

TEST(ProducerNodeTest, ASupplyWithoutItsJobOrFunctionIsRefusedBeforeAnythingStarts) {
  ProducerNodeOptions options;
  options.dispatcher = "127.0.0.1:1";
  options.connect_timeout = absl::Milliseconds(100);
  options.supply = StreamSupply{};
  auto node = ProducerNode::Start(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument) << node.status();
  EXPECT_THAT(node.status().message(), ::testing::HasSubstr("stream supply needs its job"));
  options.supply = RecordsSupply{.job = "m"};
  node = ProducerNode::Start(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument) << node.status();
  EXPECT_THAT(node.status().message(), ::testing::HasSubstr("job 'm' has no function"));
}

TEST(ProducerNodeTest, AMalformedPrefetchBoundIsRefusedNamingItsVariable) {
  ProducerNodeOptions options;
  options.dispatcher = "127.0.0.1:1";
  options.connect_timeout = absl::Milliseconds(100);
  ASSERT_EQ(::setenv("CROUPIER_S3_PREFETCH_BYTES", "64MiB", 1), 0);
  auto node = ProducerNode::Start(options);
  ::unsetenv("CROUPIER_S3_PREFETCH_BYTES");
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument) << node.status();
  EXPECT_THAT(node.status().message(),
              HasSubstr("CROUPIER_S3_PREFETCH_BYTES='64MiB' is not a whole number of bytes"));
}


// Job "m" of `records` records in batches of 4, `epochs` epochs, one rank, from a records or a
// stream supply (its source_batches_per_epoch then records / 4).
v1::JobSpec OneJob(v1::SourceKind source, uint64_t records, uint64_t epochs) {
  v1::JobSpec spec;
  spec.set_name("m");
  spec.set_source(source);
  spec.set_features("id:int64");
  spec.set_batch_size(4);
  spec.set_num_consumers(1);
  spec.set_num_epochs(epochs);
  if (source == v1::SOURCE_KIND_MAP) spec.set_num_records(records);
  if (source == v1::SOURCE_KIND_PYTHON) spec.set_source_batches_per_epoch(records / 4);
  return spec;
}

RecordsSupply IdsSupply() {
  return RecordsSupply{.job = "m", .make = [](uint64_t, uint64_t, absl::Span<const uint64_t> ids) {
                         return IdsBatch(std::vector<int64_t>(ids.begin(), ids.end()));
                       }};
}

// Runs producer i's Serve on a thread; the result once it returns.
class Serving {
 public:
  Serving(ProducerNode* node, ServeOptions options)
      : thread_([this, node, options] { result_ = node->Serve(options); }) {}
  ~Serving() {
    if (thread_.joinable()) thread_.join();
  }
  absl::StatusOr<Served> Result() {
    thread_.join();
    return result_;
  }

 private:
  absl::StatusOr<Served> result_ = absl::UnknownError("not run");
  std::thread thread_;
};

TEST(ProducerServeTest, ServesUntilEveryRankHasReadTheLastEpochThenLeaves) {
  auto cluster = Cluster(0);
  ASSERT_TRUE(cluster->CreateJob(OneJob(v1::SOURCE_KIND_MAP, 16, 2)).ok());
  const size_t i = testing::Must(cluster->AddProducer({.supply = IdsSupply()}));
  Serving serving(cluster->producer(i), {});
  auto consumer = cluster->Connect("m", 0, 1);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    auto hashes = testing::ReadEpoch(**consumer, epoch);
    ASSERT_TRUE(hashes.ok()) << hashes.status();
    EXPECT_EQ(hashes->size(), 4u);
  }
  (*consumer)->Close();  // acknowledges the last step
  auto served = serving.Result();
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_TRUE(served->job_ended);
  EXPECT_FALSE(served->drained);
  EXPECT_EQ(served->batches_served, 8u);
  EXPECT_THAT(KnownAddresses(*cluster), ::testing::IsEmpty()) << "it left the job";
}

TEST(ProducerServeTest, TheOwnerStopsItByDrainingOrLeaving) {
  for (OwnerSays says : {OwnerSays::kDrain, OwnerSays::kLeave}) {
    auto cluster = Cluster(0);
    ASSERT_TRUE(cluster->CreateJob(OneJob(v1::SOURCE_KIND_MAP, 16, 0)).ok());
    const size_t i = testing::Must(cluster->AddProducer({.supply = IdsSupply()}));
    std::atomic<bool> stop{false};
    Serving serving(cluster->producer(i),
                    {.owner = [&] { return stop.load() ? says : OwnerSays::kServe; },
                     .drain_timeout = absl::Seconds(2)});
    auto consumer = cluster->Connect("m", 0, 1);
    ASSERT_TRUE(consumer.ok()) << consumer.status();
    ASSERT_TRUE(testing::ReadEpoch(**consumer, 0).ok());
    stop.store(true);
    auto served = serving.Result();
    ASSERT_TRUE(served.ok()) << served.status();
    EXPECT_FALSE(served->job_ended) << "an unbounded job never ends";
    EXPECT_EQ(served->drained, says == OwnerSays::kDrain);
    EXPECT_EQ(served->batches_served, 4u);
    EXPECT_THAT(KnownAddresses(*cluster), ::testing::IsEmpty()) << "it left the job";
  }
}

TEST(ProducerServeTest, ASilentDispatcherEndsItNamingTheDispatcher) {
  auto cluster = Cluster(0);
  ASSERT_TRUE(cluster->CreateJob(OneJob(v1::SOURCE_KIND_MAP, 16, 0)).ok());
  const size_t i = testing::Must(cluster->AddProducer({.supply = IdsSupply()}));
  cluster->dispatcher().Crash();
  const absl::Time start = absl::Now();
  auto silent = cluster->producer(i)->Serve({.dispatcher_timeout = absl::Milliseconds(500)});
  EXPECT_EQ(silent.status().code(), absl::StatusCode::kUnavailable) << silent.status();
  EXPECT_THAT(silent.status().message(),
              HasSubstr("has not answered the producer of job 'm'"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ProducerServeTest, FeedsAStreamAndReturnsTheErrorOfASourceThatRanOutEarly) {
  auto cluster = Cluster(0);
  // 5 batches an epoch are planned; the source has 3.
  ASSERT_TRUE(cluster->CreateJob(OneJob(v1::SOURCE_KIND_PYTHON, 20, 1)).ok());
  const size_t i = testing::Must(cluster->AddProducer(
      {.supply = StreamSupply{
           .job = "m", .feed = [](uint64_t epoch, uint64_t batch) -> absl::StatusOr<Batch> {
             if (batch >= 3) return absl::OutOfRangeError("the source ended after 3 batches");
             return IdsBatch({static_cast<int64_t>(epoch * 100 + batch)});
           }}}));
  Serving serving(cluster->producer(i), {.early_end_grace = absl::Seconds(1)});
  auto consumer = cluster->Connect("m", 0, 1);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  ASSERT_TRUE((*consumer)->StartEpoch(0).ok());
  for (int step = 0; step < 3; ++step) {
    auto batch = (*consumer)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_TRUE(batch->has_value());
    EXPECT_EQ(IdsOf(**batch), std::vector<uint64_t>{static_cast<uint64_t>(step)});
  }
  auto missing = (*consumer)->Next();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kOutOfRange) << missing.status();
  auto served = serving.Result();
  EXPECT_EQ(served.status().code(), absl::StatusCode::kOutOfRange) << served.status();
  EXPECT_THAT(served.status().message(), HasSubstr("the source ended after 3 batches"));
}

TEST(ProducerServeTest, AProducerOfEveryJobHasNoJobToServeUntil) {
  auto cluster = Cluster(1);
  auto served = cluster->producer(0)->Serve({});
  EXPECT_EQ(served.status().code(), absl::StatusCode::kFailedPrecondition) << served.status();
}

}  // namespace
}  // namespace croupier
