// The consumer (consumer.cc, batch_fetcher.cc, position_reporter.cc) on the in-process cluster
// (src/testing/test_cluster.h): connecting, its errors, closing, resuming and rewinding.
#include <thread>
#include <vector>

#include "croupier/consumer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/testing/cluster_testing.h"

namespace croupier::testing {
namespace {

using ::testing::HasSubstr;

TEST(ConsumerTest, ARestartedConsumerResumesItsRankWhereItLeftOff) {
  auto cluster = ClusterWithDataset({.producers = 1});
  const v1::JobInfo job = Must(cluster->CreateJob(DatasetSpec(cluster->dir(), 1)));
  const auto planned = PlannedIds(job, 0)[0];
  std::vector<std::vector<int64_t>> got;
  {
    auto consumer = Must(cluster->Connect("train", 0, 1));
    CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
    for (int i = 0; i < 10; ++i) {
      auto batch = Must(consumer->Next());
      ASSERT_TRUE(batch.has_value());
      absl::Span<const int64_t> ids = batch->view().Find("id")->ints();
      got.emplace_back(ids.begin(), ids.end());
    }
    consumer->Close();  // the last heartbeat acknowledges step 10
  }
  auto consumer = Must(cluster->Connect("train", 0, 1));
  EXPECT_EQ(consumer->registered_position().epoch, 0u);
  EXPECT_EQ(consumer->registered_position().step, 10u);
  CROUPIER_ASSERT_OK(consumer->StartEpoch(0, consumer->registered_position().step));
  while (true) {
    auto batch = Must(consumer->Next());
    if (!batch) break;
    absl::Span<const int64_t> ids = batch->view().Find("id")->ints();
    got.emplace_back(ids.begin(), ids.end());
  }
  EXPECT_EQ(got, planned);
}

TEST(ConsumerTest, ARewindToACheckpointGetsTheSameBatchesAgain) {
  auto cluster = ClusterWithDataset({.producers = 2});
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 1)).status());
  auto consumer = Must(cluster->Connect("train", 0, 1));
  const std::vector<uint64_t> first = Must(ReadEpoch(*consumer, 0));
  const std::vector<uint64_t> second = Must(ReadEpoch(*consumer, 0, 7));  // back to step 7
  ASSERT_EQ(first.size(), 30u);
  EXPECT_EQ(second, std::vector<uint64_t>(first.begin() + 7, first.end()));
}

TEST(ConsumerTest, AConsumerOfADoneJobIsToldSo) {
  auto cluster = ClusterWithDataset({.producers = 1});
  v1::JobSpec spec = DatasetSpec(cluster->dir(), 1);
  spec.set_num_epochs(1);
  CROUPIER_ASSERT_OK(cluster->CreateJob(spec).status());
  {
    auto consumer = Must(cluster->Connect("train", 0, 1));
    EXPECT_FALSE(consumer->job().done_at_registration);
    ASSERT_EQ(Must(ReadEpoch(*consumer, 0)).size(), 30u);
    consumer->Close();  // its last heartbeat acknowledges the end: the job is done
  }
  // A trainer resuming the done job (a saved state) hears so at registration (and logs it).
  auto consumer = Must(cluster->Connect("train", 0, 1));
  EXPECT_TRUE(consumer->job().done_at_registration);
  EXPECT_EQ(consumer->registered_position().step, 30u);
}

TEST(ConsumerTest, ConnectingNamesWhatIsWrong) {
  auto cluster = ClusterWithDataset({.producers = 1});
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 2)).status());
  const absl::Time start = absl::Now();
  const auto unknown = cluster->Connect("nope", 0, 2, {.timeout = absl::Seconds(1)});
  EXPECT_TRUE(absl::IsNotFound(unknown.status()));
  EXPECT_THAT(unknown.status().message(), HasSubstr("'nope'"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(700)) << "it waits for the job to exist";
  auto wrong_world = cluster->Connect("train", 0, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_world.status())) << wrong_world.status();
  EXPECT_TRUE(absl::IsInvalidArgument(cluster->Connect("train", 2, 2).status()));
  auto consumer = Must(cluster->Connect("train", 0, 2));
  auto again = cluster->Connect("train", 0, 2, {.timeout = absl::Milliseconds(300)});
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(consumer->Next().status()));
  EXPECT_TRUE(absl::IsOutOfRange(consumer->StartEpoch(2)));      // a 2-epoch job
  EXPECT_TRUE(absl::IsOutOfRange(consumer->StartEpoch(0, 16)));  // 15 steps
}

TEST(ConsumerTest, CloseWakesABlockedNextAndFreesTheRank) {
  auto cluster = ClusterWithDataset({.producers = 0});  // nothing will ever be made
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 1)).status());
  auto consumer = Must(cluster->Connect("train", 0, 1));
  CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    consumer->Close();
  });
  const absl::Time start = absl::Now();
  EXPECT_TRUE(absl::IsCancelled(consumer->Next().status()));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  closer.join();
  auto next = cluster->Connect("train", 0, 1, {.timeout = absl::Seconds(2)});
  EXPECT_TRUE(next.ok()) << next.status();
}

TEST(ConsumerTest, NoProducerIsADeadlineNamingTheBatch) {
  auto cluster = ClusterWithDataset({.producers = 0});
  CROUPIER_ASSERT_OK(cluster->CreateJob(DatasetSpec(cluster->dir(), 1)).status());
  auto consumer = Must(cluster->Connect("train", 0, 1, {.timeout = absl::Milliseconds(500)}));
  CROUPIER_ASSERT_OK(consumer->StartEpoch(0));
  const absl::Status s = consumer->Next().status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("job 'train' epoch 0 step 0"));
}

}  // namespace
}  // namespace croupier::testing
