#include "src/producer/function_maker.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/producer_testing.h"
#include "src/producer/task_runner.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// A "map" job of `records` records in batches of 4 over 2 consumers, shuffled globally.
v1::JobInfo MapJob(uint64_t records, uint64_t epochs = 2) {
  v1::JobInfo info;
  v1::JobSpec* spec = info.mutable_spec();
  spec->set_name("mapped");
  spec->set_batch_size(4);
  spec->set_seed(7);
  spec->set_num_consumers(2);
  spec->set_num_epochs(epochs);
  info.set_num_records(records);
  return info;
}

// A batch of one int64 column "id": the record indexes it was given.
absl::StatusOr<Batch> IdsBatch(absl::Span<const uint64_t> ids) {
  return croupier::testing::IdsBatch(std::vector<int64_t>(ids.begin(), ids.end()));
}

std::vector<int64_t> Ids(const Batch& batch) {
  absl::Span<const int64_t> ids = batch.view().Find("id")->ints();
  return {ids.begin(), ids.end()};
}

TEST(ProducerFunctionMakerTest, HandsThePlansRecordsOfEachBatchToTheFunction) {
  const v1::JobInfo job = MapJob(40);
  auto maker = FunctionBatchMaker::Create(
      job, [](uint64_t, uint64_t, absl::Span<const uint64_t> ids) { return IdsBatch(ids); });
  ASSERT_TRUE(maker.ok()) << maker.status();
  EXPECT_EQ((*maker)->batches_per_epoch(), 10u);
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    const EpochPlan plan = *EpochPlan::Create((*maker)->plan_spec(), epoch);
    for (uint64_t g = 0; g < 10; ++g) {
      auto batch = (*maker)->Make(epoch, g);
      ASSERT_TRUE(batch.ok()) << batch.status();
      const std::vector<uint64_t> planned = plan.BatchRecords(g);
      EXPECT_EQ(Ids(*batch), std::vector<int64_t>(planned.begin(), planned.end()));
    }
  }
}

TEST(ProducerFunctionMakerTest, ErrorsNameTheBatchAndRangesAreChecked) {
  auto maker = FunctionBatchMaker::Create(
      MapJob(40),
      [](uint64_t epoch, uint64_t batch, absl::Span<const uint64_t> ids) -> absl::StatusOr<Batch> {
        if (batch == 3) return absl::InvalidArgumentError("record 5: ValueError: bad pixel");
        if (batch == 4) return IdsBatch(ids.subspan(1));  // a record short
        return IdsBatch(ids);
      });
  ASSERT_TRUE(maker.ok()) << maker.status();
  auto failed = (*maker)->Make(1, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(failed.status()));
  EXPECT_THAT(failed.status().message(),
              HasSubstr("job 'mapped' epoch 1 batch 3: record 5: ValueError: bad pixel"));
  auto short_batch = (*maker)->Make(0, 4);
  EXPECT_THAT(short_batch.status().message(), HasSubstr("holds 3 records; the plan names 4"));
  EXPECT_TRUE(absl::IsOutOfRange((*maker)->Make(0, 10).status()));
  EXPECT_TRUE(absl::IsOutOfRange((*maker)->Make(2, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(FunctionBatchMaker::Create(MapJob(40), nullptr).status()));
}

TEST(ProducerFunctionMakerTest, ARunnerMakesAJobsTasksWithTheMakerOfItsFactory) {
  std::atomic<int> created{0};
  TaskRunner::Options options;
  options.threads = 2;
  options.makers =
      [&](const v1::JobInfo& job) -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    if (job.spec().name() != "mapped") {
      return absl::FailedPreconditionError("job '" + job.spec().name() + "': not this one's");
    }
    ++created;
    auto maker = FunctionBatchMaker::Create(
        job, [](uint64_t, uint64_t, absl::Span<const uint64_t> ids) { return IdsBatch(ids); });
    if (!maker.ok()) return maker.status();
    return std::shared_ptr<const BatchMaker>(*std::move(maker));
  };
  TaskRunner runner(options);
  const v1::JobInfo job = MapJob(40);
  v1::Task task;
  task.set_task_id(1);
  task.set_job("mapped");
  task.set_epoch(0);
  task.set_first_batch(0);
  task.set_num_batches(4);
  ASSERT_TRUE(runner.AddTask(task, job).ok());
  task.set_task_id(2);
  task.set_first_batch(4);
  ASSERT_TRUE(runner.AddTask(task, job).ok());
  EXPECT_EQ(created.load(), 1) << "one maker per job";
  const EpochPlan plan = *EpochPlan::Create(
      PlanSpec{.num_records = 40, .seed = 7, .batch_size = 4, .num_consumers = 2}, 0);
  for (uint64_t g = 0; g < 8; ++g) {
    auto batch = runner.GetBatch({"mapped", 0, g}, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(batch.ok()) << batch.status();
    const std::vector<uint64_t> planned = plan.BatchRecords(g);
    EXPECT_EQ(Ids(*batch), std::vector<int64_t>(planned.begin(), planned.end()));
  }
  v1::JobInfo other = MapJob(40);
  other.mutable_spec()->set_name("other");
  task.set_job("other");
  task.set_task_id(3);
  const absl::Status refused = runner.AddTask(task, other);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused));
  EXPECT_THAT(refused.message(), HasSubstr("job 'other'"));
}

TEST(ProducerFunctionMakerTest, AJobThatSkipsFailingRecordsTakesShorterBatchesAndCountsThem) {
  v1::JobInfo job = MapJob(40);
  job.mutable_spec()->set_skip_failing_records(true);
  // The function leaves out the records whose index is a multiple of 3; batch 9 loses them all.
  auto skipping = [](uint64_t, uint64_t batch,
                     absl::Span<const uint64_t> ids) -> absl::StatusOr<Batch> {
    if (batch == 9) return IdsBatch({});
    std::vector<uint64_t> kept;
    for (uint64_t id : ids) {
      if (id % 3 != 0) kept.push_back(id);
    }
    return IdsBatch(kept);
  };
  auto maker = FunctionBatchMaker::Create(job, skipping);
  ASSERT_TRUE(maker.ok()) << maker.status();
  const EpochPlan plan = *EpochPlan::Create((*maker)->plan_spec(), 0);
  uint64_t left_out = 0;
  uint64_t a_short_batch = 0;
  for (uint64_t g = 0; g < 9; ++g) {
    for (uint64_t id : plan.BatchRecords(g)) {
      if (id % 3 == 0) {
        ++left_out;
        a_short_batch = g;
      }
    }
  }
  ASSERT_GT(left_out, 0u);
  EXPECT_THAT((*maker)->Make(0, 9).status().message(), HasSubstr("holds 0 records"));

  TaskRunner::Options options;
  options.threads = 2;
  options.makers =
      [&](const v1::JobInfo& info) -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    auto made = FunctionBatchMaker::Create(info, skipping);
    if (!made.ok()) return made.status();
    return std::shared_ptr<const BatchMaker>(*std::move(made));
  };
  TaskRunner runner(options);
  v1::Task task;
  task.set_task_id(1);
  task.set_job("mapped");
  task.set_epoch(0);
  task.set_first_batch(0);
  task.set_num_batches(9);
  ASSERT_TRUE(runner.AddTask(task, job).ok());
  for (uint64_t g = 0; g < 9; ++g) {
    auto batch = runner.GetBatch({"mapped", 0, g}, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (int64_t id : Ids(*batch)) EXPECT_NE(id % 3, 0);
  }
  EXPECT_EQ(runner.stats().records_skipped, left_out);
  EXPECT_EQ(runner.Report().records_skipped(), left_out);

  // Without the setting, a short batch is an error.
  auto strict = FunctionBatchMaker::Create(MapJob(40), skipping);
  ASSERT_TRUE(strict.ok());
  EXPECT_THAT((*strict)->Make(0, a_short_batch).status().message(),
              HasSubstr("the plan names 4"));
}

}  // namespace
}  // namespace croupier
