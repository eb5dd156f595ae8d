#include "src/job/job.h"

#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

v1::JobInfo Info(uint32_t consumers, uint64_t batches_per_epoch, uint64_t batches_per_task,
                 uint64_t epochs) {
  v1::JobInfo info;
  info.mutable_spec()->set_name("j");
  info.mutable_spec()->set_num_consumers(consumers);
  info.mutable_spec()->set_num_epochs(epochs);
  info.mutable_spec()->set_batch_size(4);
  info.set_num_records(batches_per_epoch * 4);
  info.set_batches_per_epoch(batches_per_epoch);
  info.set_steps_per_epoch(batches_per_epoch / consumers);
  info.set_batches_per_task(batches_per_task);
  return info;
}

TEST(JobConfigTest, NamesRoundTripAndUnknownNamesListTheAccepted) {
  for (SourceKind s : {SourceKind::kTfrecord, SourceKind::kPython}) {
    EXPECT_EQ(*ParseSourceKind(SourceKindName(s)), s);
  }
  for (DealMode m : {DealMode::kDealt, DealMode::kFirstCome}) {
    EXPECT_EQ(*ParseDealMode(DealModeName(m)), m);
  }
  EXPECT_THAT(ParseDealMode("dealed").status().message(),
              HasSubstr("unknown mode 'dealed'; expected one of dealt, first_come"));
  EXPECT_THAT(ParseSourceKind("csv").status().message(),
              HasSubstr("unknown source 'csv'; expected one of tfrecord, python"));
  EXPECT_EQ(*ParseCodec(""), Codec::kNone);
  EXPECT_EQ(CodecName(Codec::kLz4), "lz4");
  EXPECT_EQ(CodecName(static_cast<Codec>(9)), "codec 9");
}

TEST(JobConfigTest, ParsesEveryTypedSettingAndDefaultsTheEmptyOnes) {
  v1::JobInfo info = Info(2, 8, 4, 3);
  absl::StatusOr<JobConfig> job = ParseJobConfig(info);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->source, SourceKind::kTfrecord);
  EXPECT_EQ(job->mode, DealMode::kDealt);
  EXPECT_EQ(job->compression, Codec::kNone);
  EXPECT_EQ(job->plan.shuffle, ShuffleMode::kGlobal);
  EXPECT_EQ(job->plan.remainder, Remainder::kDrop);
  info.mutable_spec()->set_source(v1::SOURCE_KIND_PYTHON);
  info.mutable_spec()->set_mode(v1::DEAL_MODE_FIRST_COME);
  info.mutable_spec()->set_shuffle(v1::SHUFFLE_NONE);
  info.mutable_spec()->set_compression(v1::COMPRESSION_ZSTD);
  job = ParseJobConfig(info);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->python());
  EXPECT_TRUE(job->made_by_sources());
  EXPECT_FALSE(job->map());
  EXPECT_FALSE(job->dealt());
  EXPECT_EQ(job->compression, Codec::kZstd);
  EXPECT_EQ(job->plan.shuffle, ShuffleMode::kNone);
  info.mutable_spec()->set_source(v1::SOURCE_KIND_MAP);
  job = ParseJobConfig(info);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->map());
  EXPECT_TRUE(job->made_by_sources());
  EXPECT_FALSE(job->python());
  // A tokens job is made by any producer, unless a source is text: then by its own producers,
  // which tokenize.
  info.mutable_spec()->set_source(v1::SOURCE_KIND_TOKENS);
  info.mutable_spec()->set_shuffle(v1::SHUFFLE_NONE);
  info.mutable_spec()->mutable_tokens()->add_sources("/data/web");
  job = ParseJobConfig(info);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->made_by_sources());
  info.mutable_spec()->mutable_tokens()->add_text()->set_source(0);
  job = ParseJobConfig(info);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->text_tokens);
  EXPECT_TRUE(job->made_by_sources());
  info.mutable_spec()->set_remainder(static_cast<v1::Remainder>(3));
  EXPECT_THAT(ParseJobConfig(info).status().message(),
              HasSubstr("job 'j': remainder policy 3 is not a value this croupier knows"));
}

TEST(JobConfigTest, DealsWholeRoundsFromTheResumedBatch) {
  v1::JobInfo info = Info(3, 12, 6, 3);
  info.mutable_spec()->set_start_epoch(1);
  info.mutable_spec()->set_start_batch(5);
  const JobConfig job = *ParseJobConfig(info);
  EXPECT_EQ(job.StepsInEpoch(0), 0u);  // before the resumed epoch: nothing
  EXPECT_EQ(job.FirstBatch(1), 5u);
  EXPECT_EQ(job.StepsInEpoch(1), 2u);  // batches 5..10: two whole rounds of 3
  EXPECT_EQ(job.EndBatch(1), 11u);
  EXPECT_EQ(job.GlobalBatch(1, 1, 2), 10u);
  EXPECT_EQ(job.StepsInEpoch(2), 4u);
  EXPECT_EQ(job.GlobalBatch(2, 3, 0), 9u);
  // Tasks are cut from the epoch's first batch.
  EXPECT_EQ(job.TaskStart(1, 10), 5u);
  EXPECT_EQ(job.TaskEnd(1, 5), 11u);
  EXPECT_EQ(job.TaskStart(2, 7), 6u);
  EXPECT_EQ(job.TaskEnd(2, 6), 12u);
}

// TaskOrdinal numbers the tasks in order, as the definition above cuts them: epoch by epoch from
// start_epoch, from each epoch's first dealt batch, every batches_per_task batches.
TEST(JobConfigTest, TaskOrdinalNumbersEveryTaskInOrder) {
  for (const auto& [consumers, batches, per_task, start_epoch, start_batch] :
       std::vector<std::tuple<uint32_t, uint64_t, uint64_t, uint64_t, uint64_t>>{
           {3, 12, 6, 1, 5}, {2, 10, 4, 0, 0}, {1, 7, 3, 2, 7}, {4, 9, 1, 1, 2}, {3, 30, 7, 3, 29}}) {
    v1::JobInfo info = Info(consumers, batches, per_task, 0);
    info.mutable_spec()->set_start_epoch(start_epoch);
    info.mutable_spec()->set_start_batch(start_batch);
    const JobConfig job = *ParseJobConfig(info);
    SCOPED_TRACE(absl::StrCat(consumers, " consumers, ", batches, " batches, tasks of ", per_task,
                              ", from epoch ", start_epoch, " batch ", start_batch));
    uint64_t ordinal = 0;
    for (uint64_t epoch = 0; epoch < start_epoch + 4; ++epoch) {
      for (uint64_t b = job.FirstBatch(epoch); b < job.EndBatch(epoch); b += per_task) {
        EXPECT_EQ(job.TaskOrdinal(epoch, b), ordinal) << "epoch " << epoch << " batch " << b;
        ++ordinal;
      }
      EXPECT_EQ(job.TaskOrdinal(epoch, job.EndBatch(epoch)), ordinal) << "end of epoch " << epoch;
    }
  }
}

// Every dealt batch of a Python job comes from exactly one source, and each source yields its
// batches in order, with no gap: ordinals 0, 1, 2, ... in batch order.
TEST(JobConfigTest, SourcesSplitTheTasksAndNumberTheirBatchesWithoutGaps) {
  v1::JobInfo info = Info(2, 14, 4, 2);
  info.mutable_spec()->set_source(v1::SOURCE_KIND_PYTHON);
  info.mutable_spec()->set_source_count(3);
  const JobConfig job = *ParseJobConfig(info);
  std::vector<std::vector<uint64_t>> ordinals(3);
  for (uint64_t g = 0; g < job.EndBatch(0); ++g) {
    ordinals[job.SourceOf(0, g)].push_back(job.SourceOrdinal(0, g));
  }
  EXPECT_EQ(ordinals[0], (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));  // tasks 0 and 3
  EXPECT_EQ(ordinals[1], (std::vector<uint64_t>{0, 1, 2, 3}));        // task 1
  EXPECT_EQ(ordinals[2], (std::vector<uint64_t>{0, 1, 2, 3}));        // task 2
  EXPECT_EQ(job.LastTaskEnd(0), std::make_pair(uint64_t{1}, uint64_t{14}));
  EXPECT_EQ(job.LastTaskEnd(1), std::make_pair(uint64_t{1}, uint64_t{8}));
  EXPECT_EQ(job.LastTaskEnd(3), std::nullopt);  // no such source
  info.mutable_spec()->set_source_count(5);     // 4 tasks an epoch: source 4 makes none
  EXPECT_EQ(ParseJobConfig(info)->LastTaskEnd(4), std::nullopt);
  info.mutable_spec()->set_num_epochs(0);
  EXPECT_EQ(ParseJobConfig(info)->LastTaskEnd(0), std::nullopt);  // unbounded
}

}  // namespace
}  // namespace croupier
