#include "src/producer/opening_maker.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/producer_testing.h"
#include "src/producer/task_runner.h"

namespace croupier {
namespace {

using ::croupier::testing::Soon;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A job of 40 records in batches of 4 for 2 consumers, shuffled globally: 10 batches an epoch.
v1::JobInfo Job() {
  v1::JobInfo info;
  v1::JobSpec* spec = info.mutable_spec();
  spec->set_name("opened");
  spec->set_batch_size(4);
  spec->set_seed(7);
  spec->set_num_consumers(2);
  spec->set_num_epochs(1);
  info.set_num_records(40);
  return info;
}

// A maker whose batches hold their record ids, and which writes down what it was told.
class RecordingMaker final : public BatchMaker {
 public:
  static std::shared_ptr<const BatchMaker> Create(const v1::JobInfo& job,
                                                  std::vector<std::string>* told) {
    return std::shared_ptr<const BatchMaker>(new RecordingMaker(job, *CheckedConfig(job), told));
  }
  void WillMake(const v1::Task& task) const override {
    told_->push_back(absl::StrCat("will ", task.task_id()));
  }
  void WontMake(const v1::Task& task) const override {
    told_->push_back(absl::StrCat("wont ", task.task_id()));
  }

 protected:
  absl::StatusOr<Batch> MakeRecords(uint64_t, uint64_t,
                                    absl::Span<const uint64_t> ids) const override {
    return testing::IdsBatch(std::vector<int64_t>(ids.begin(), ids.end()));
  }

 private:
  RecordingMaker(v1::JobInfo job, JobConfig config, std::vector<std::string>* told)
      : BatchMaker(std::move(job), std::move(config)), told_(told) {}
  std::vector<std::string>* const told_;
};

BatchKey OpenedKey(uint64_t batch) { return BatchKey{"opened", 0, batch}; }
// What a producer's heartbeat thread does with a files job's first tasks: it holds them at once,
// while the job's maker is opened on another thread (here held back until the test lets it go,
// as a store that answers slowly would). What it said of the tasks meanwhile reaches the opened
// maker in order; the batches are the plan's.
TEST(ProducerOpeningMakerTest, AJobsFirstTasksAreHeldAtOnceWhileItsMakerOpens) {
  absl::Notification open;
  std::atomic<int> opened{0};
  std::vector<std::string> told;
  TaskRunner::Options options;
  options.threads = 2;
  options.makers = [&](const v1::JobInfo& job)
      -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    return OpeningMaker::Start(job, [&](const v1::JobInfo& info)
                                        -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
      open.WaitForNotificationWithTimeout(absl::Seconds(20));
      ++opened;
      return RecordingMaker::Create(info, &told);
    });
  };
  TaskRunner runner(options);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(runner.AddTask(testing::MakeTask(1, "opened", 0, 0, 4), Job()).ok());
  ASSERT_TRUE(runner.AddTask(testing::MakeTask(2, "opened", 0, 4, 4), Job()).ok());
  ASSERT_TRUE(runner.RevokeTask(2));
  ASSERT_TRUE(runner.AddTask(testing::MakeTask(3, "opened", 0, 8, 2), Job()).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "AddTask waited for the opening";
  EXPECT_THAT(runner.HeldTasks(), ElementsAre(1, 3));
  EXPECT_EQ(opened.load(), 0);
  EXPECT_FALSE(runner.Ready(OpenedKey(0)));

  open.Notify();
  const EpochPlan plan = *EpochPlan::Create(
      PlanSpec{.num_records = 40, .seed = 7, .batch_size = 4, .num_consumers = 2}, 0);
  for (uint64_t g : {0, 1, 2, 3, 8, 9}) {
    auto batch = runner.GetBatch(OpenedKey(g), Soon());
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(testing::IdsOf(*batch), plan.BatchRecords(g)) << g;
  }
  EXPECT_EQ(opened.load(), 1) << "one opening per job";
  EXPECT_THAT(told, ElementsAre("will 1", "will 2", "wont 2", "will 3"));
}

// An opening that fails (an object gone, say): the task is held all the same, its batches fail
// with the opening's error, which names the object (NOT_FOUND as DATA_LOSS, so that the rank
// hears it instead of asking elsewhere until its deadline); the job's next task opens it again.
TEST(ProducerOpeningMakerTest, AFailedOpeningFailsItsBatchesAndTheNextTaskOpensAgain) {
  std::atomic<int> opened{0};
  std::vector<std::string> told;
  TaskRunner::Options options;
  options.threads = 1;
  options.makers = [&](const v1::JobInfo& job)
      -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    return OpeningMaker::Start(job, [&](const v1::JobInfo& info)
                                        -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
      if (++opened == 1) return absl::NotFoundError("s3://bucket/part-1.tfrecord: no such key");
      return RecordingMaker::Create(info, &told);
    });
  };
  TaskRunner runner(options);
  ASSERT_TRUE(runner.AddTask(testing::MakeTask(1, "opened", 0, 0, 4), Job()).ok());
  auto failed = runner.GetBatch(OpenedKey(2), Soon());
  EXPECT_TRUE(absl::IsDataLoss(failed.status())) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr("s3://bucket/part-1.tfrecord: no such key"));
  EXPECT_THAT(failed.status().message(), HasSubstr("job 'opened' epoch 0 batch 2"));

  ASSERT_TRUE(runner.AddTask(testing::MakeTask(2, "opened", 0, 4, 4), Job()).ok());
  auto made = runner.GetBatch(OpenedKey(5), Soon());
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(opened.load(), 2);
  EXPECT_THAT(told, ElementsAre("will 2"));
}

// The maker itself: what the plan decides is there at once; WaitOpened says how the opening
// went; a maker opened for another job is an error of the opening, not a wrong batch.
TEST(ProducerOpeningMakerTest, WaitOpenedTellsHowTheOpeningWent) {
  absl::Notification open;
  auto slow = OpeningMaker::Start(Job(), [&](const v1::JobInfo& info)
                                             -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    open.WaitForNotificationWithTimeout(absl::Seconds(20));
    return RecordingMaker::Create(info, nullptr);
  });
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ((*slow)->batches_per_epoch(), 10u);
  EXPECT_TRUE((*slow)->Reusable());
  EXPECT_TRUE(absl::IsUnavailable((*slow)->WaitOpened(absl::Now() + absl::Milliseconds(50))));
  open.Notify();
  EXPECT_TRUE((*slow)->WaitOpened(Soon()).ok());
  EXPECT_TRUE((*slow)->Reusable());

  auto wrong = OpeningMaker::Start(Job(), [](const v1::JobInfo& info)
                                              -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    v1::JobInfo other = info;
    other.mutable_spec()->set_name("other");
    return RecordingMaker::Create(other, nullptr);
  });
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  const absl::Status opened = (*wrong)->WaitOpened(Soon());
  EXPECT_TRUE(absl::IsInternal(opened)) << opened;
  EXPECT_FALSE((*wrong)->Reusable());
  EXPECT_TRUE(absl::IsInternal((*wrong)->Make(0, 0).status()));

  v1::JobInfo unplanned = Job();
  unplanned.mutable_spec()->set_batch_size(0);
  EXPECT_FALSE(OpeningMaker::Start(unplanned, nullptr).ok());
}

}  // namespace
}  // namespace croupier
