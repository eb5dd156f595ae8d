// TfrecordBatchMaker reading from a store ahead of use: the tasks its producer was given are
// fetched before their batches are asked for (WillMake, TaskRunner::AddTask), a task taken away
// frees what was fetched for it (WontMake, TaskRunner::RevokeTask), and the bytes fetched ahead
// stay within the producer's budget. The files are local ones that say they are remote
// (GatedEnv(true)), so every read goes through the maker's RecordFetcher.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"
#include "src/io/tfrecord_format.h"
#include "src/producer/producer_testing.h"
#include "src/producer/task_runner.h"
#include "src/producer/tfrecord_maker.h"
#include "src/testing/forwarding_env.h"

namespace croupier {
namespace {

using ::croupier::testing::GatedEnv;
using ::croupier::testing::JobOptions;
using ::croupier::testing::MakeJob;
using ::croupier::testing::MakeTask;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::WaitFor;
using ::croupier::testing::WriteDataset;

// 160 records in 2 files, batches of 4, 2 consumers, no shuffle: 40 batches an epoch, batch g
// holding records 4g to 4g + 3.
class ProducerPrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_ = WriteDataset(tmp_.path(), counts_);
    local_ = Maker("train", nullptr, nullptr);
  }
  // A job of tasks of `batches_per_task` batches.
  std::shared_ptr<const TfrecordBatchMaker> Maker(const std::string& name, Env* env,
                                                  std::shared_ptr<FetchBudget> budget,
                                                  uint64_t batches_per_task = 8) {
    JobOptions options;
    options.name = name;
    options.shuffle = "none";
    v1::JobInfo job = MakeJob(paths_, counts_, options);
    job.set_batches_per_task(batches_per_task);
    auto maker = TfrecordBatchMaker::Create(job, index_, nullptr, env, std::move(budget));
    EXPECT_TRUE(maker.ok()) << maker.status();
    if (!maker.ok()) return nullptr;
    EXPECT_EQ((*maker)->batches_per_epoch(), 40u);
    return *std::move(maker);
  }
  // The framed bytes of batch g's records.
  uint64_t BatchBytes(uint64_t g) {
    uint64_t bytes = 0;
    for (uint64_t id = 4 * g; id < 4 * g + 4; ++id) {
      const Dataset::Location loc = local_->dataset().Locate(id);
      bytes += local_->dataset().index(loc.file).data_length(loc.record) + kRecordOverheadBytes;
    }
    return bytes;
  }
  // Whether every record of batches [first, end) was asked of `env`'s ReadRanges.
  bool Requested(GatedEnv& env, uint64_t first, uint64_t end) {
    const std::vector<GatedEnv::Range> ranges = env.ranges();
    for (uint64_t id = 4 * first; id < 4 * end; ++id) {
      const Dataset::Location loc = local_->dataset().Locate(id);
      const RecordIndex& index = local_->dataset().index(loc.file);
      const uint64_t offset = index.offsets[loc.record];
      const bool found = std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) {
        return r.path == index.path && r.offset <= offset && offset < r.offset + r.length;
      });
      if (!found) return false;
    }
    return true;
  }
  void ExpectSameBatch(const BatchMaker& maker, uint64_t g) {
    auto got = maker.Make(0, g);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ContentHash(), local_->Make(0, g)->ContentHash()) << "batch " << g;
  }

  ScopedTempDir tmp_;
  const std::vector<int> counts_ = {100, 60};
  std::vector<std::string> paths_;
  IndexCache index_{tmp_.Join("index")};
  std::shared_ptr<const TfrecordBatchMaker> local_;
};

TEST_F(ProducerPrefetchTest, AGivenTaskIsFetchedBeforeItsFirstBatchIsAskedFor) {
  GatedEnv env(/*remote=*/true);
  auto maker = Maker("train", &env, nullptr);
  ASSERT_NE(maker, nullptr);
  maker->WillMake(MakeTask(1, "train", 0, 8, 8));
  ASSERT_TRUE(WaitFor([&] { return maker->fetch_stats().ahead_fetches >= 1; }));
  EXPECT_TRUE(Requested(env, 8, 16));
  EXPECT_FALSE(Requested(env, 16, 17));  // nothing past the task
  uint64_t bytes = 0;
  for (uint64_t g = 8; g < 16; ++g) bytes += BatchBytes(g);
  EXPECT_EQ(maker->fetch_stats().ahead_bytes, bytes);
  const size_t asked = env.ranges().size();
  for (uint64_t g = 8; g < 16; ++g) ExpectSameBatch(*maker, g);
  // Every batch was taken from what was fetched ahead: no other read.
  EXPECT_EQ(env.ranges().size(), asked);
  EXPECT_EQ(maker->fetch_stats().ahead_used, 8u);
  EXPECT_EQ(maker->fetch_stats().fetched_now, 0u);
  EXPECT_EQ(maker->fetch_stats().ahead_bytes, 0u);
}

// A job's objects (files whose FileInfo has an ETag) are not asked for their indexes when the
// maker is created: a batch loads those of its own objects, and a task given to the producer
// those of its batches, with its reads ahead. An object whose index no longer holds the count the
// job was created with fails the batches that need it, naming it.
TEST_F(ProducerPrefetchTest, AnObjectsIndexIsLoadedByTheFirstBatchOrTaskThatNeedsIt) {
  JobOptions options;
  options.shuffle = "none";
  v1::JobInfo job = MakeJob(paths_, counts_, options);
  for (v1::FileInfo& f : *job.mutable_files()) {
    const FileStat st = *Env::Default()->Stat(f.path());
    f.set_size_bytes(st.size);
    f.set_mtime_ns(st.mtime_ns);
    f.set_etag("\"e\"");
  }
  GatedEnv env(/*remote=*/true);
  croupier::testing::OpenCountingEnv counting("\"e\"");
  IndexCache fresh(tmp_.Join("fresh-index"), &counting);
  auto maker = TfrecordBatchMaker::Create(job, fresh, nullptr, &env);
  ASSERT_TRUE(maker.ok()) << maker.status();
  EXPECT_EQ(counting.opened(paths_[0]), 0);
  EXPECT_EQ(counting.opened(paths_[1]), 0);
  ExpectSameBatch(**maker, 3);  // records 12-15, in the first file
  EXPECT_EQ(counting.opened(paths_[0]), 1);
  EXPECT_EQ(counting.opened(paths_[1]), 0);
  EXPECT_FALSE((*maker)->dataset().loaded(1));
  // Batches 24-31 hold records 96-127, in both files.
  (*maker)->WillMake(MakeTask(1, "train", 0, 24, 8));
  EXPECT_TRUE(WaitFor([&] { return (*maker)->dataset().loaded(1); }));
  for (uint64_t g = 24; g < 32; ++g) ExpectSameBatch(**maker, g);
  EXPECT_EQ(counting.opened(paths_[0]), 1);
  EXPECT_EQ(counting.opened(paths_[1]), 1);

  // The job counted 64 records in the second file, which holds 60.
  v1::JobInfo changed = MakeJob(paths_, {100, 64}, options);
  for (int i = 0; i < 2; ++i) *changed.mutable_files(i) = job.files(i);
  changed.mutable_files(1)->set_num_records(64);
  auto stale = TfrecordBatchMaker::Create(changed, fresh, nullptr, &env);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_TRUE((*stale)->Make(0, 3).ok());
  auto failed = (*stale)->Make(0, 30);
  EXPECT_TRUE(absl::IsFailedPrecondition(failed.status())) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::HasSubstr(paths_[1] + " holds 60 records but held 64"));
}

TEST_F(ProducerPrefetchTest, ATaskTakenAwayFreesWhatWasFetchedForIt) {
  GatedEnv env(/*remote=*/true);
  auto budget = std::make_shared<FetchBudget>(uint64_t{1} << 20);
  auto maker = Maker("train", &env, budget);
  ASSERT_NE(maker, nullptr);
  // Fetched: forgotten at once.
  const v1::Task fetched = MakeTask(1, "train", 0, 0, 8);
  maker->WillMake(fetched);
  ASSERT_TRUE(WaitFor([&] { return maker->fetch_stats().ahead_fetches >= 1; }));
  EXPECT_GT(budget->used(), 0u);
  maker->WontMake(fetched);
  EXPECT_EQ(maker->fetch_stats().ahead_bytes, 0u);
  EXPECT_EQ(budget->used(), 0u);
  EXPECT_EQ(maker->fetch_stats().forgotten, 8u);

  // Being fetched (its reads held at the gate): its bytes come back as the fetch ends.
  env.Close();
  const v1::Task held = MakeTask(2, "train", 0, 16, 8);
  maker->WillMake(held);
  ASSERT_TRUE(env.AwaitWaiting(1));
  EXPECT_GT(budget->used(), 0u);
  maker->WontMake(held);
  env.Open();
  ASSERT_TRUE(WaitFor([&] { return budget->used() == 0; }));
  EXPECT_EQ(maker->fetch_stats().ahead_bytes, 0u);
  EXPECT_EQ(maker->fetch_stats().forgotten, 16u);

  // Given again, it is fetched again, and its batches are the same.
  maker->WillMake(held);
  ASSERT_TRUE(WaitFor([&] { return maker->fetch_stats().ahead_bytes > 0; }));
  for (uint64_t g = 16; g < 24; ++g) ExpectSameBatch(*maker, g);
  EXPECT_EQ(budget->used(), 0u);
}

TEST_F(ProducerPrefetchTest, WhatIsFetchedAheadStaysWithinTheProducersBudget) {
  GatedEnv env(/*remote=*/true);
  // Room for about 3 of the 10 tasks below, shared by two jobs' makers.
  uint64_t task_bytes = 0;
  for (uint64_t g = 0; g < 4; ++g) task_bytes += BatchBytes(g);
  auto budget = std::make_shared<FetchBudget>(3 * task_bytes);
  auto a = Maker("a", &env, budget, 4);
  auto b = Maker("b", &env, budget, 4);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (uint64_t t = 0; t < 5; ++t) {
    a->WillMake(MakeTask(t, "a", 0, 4 * t, 4));
    b->WillMake(MakeTask(t, "b", 0, 20 + 4 * t, 4));
  }
  ASSERT_TRUE(WaitFor([&] { return budget->used() > 2 * task_bytes; }));
  for (uint64_t g = 0; g < 20; ++g) ExpectSameBatch(*a, g);
  for (uint64_t g = 20; g < 40; ++g) ExpectSameBatch(*b, g);
  // The 10 tasks' 40 batches did not fit at once: they were fetched as room was made.
  EXPECT_LE(budget->peak(), budget->capacity());
  EXPECT_GT(budget->peak(), 2 * task_bytes);
  EXPECT_GT(a->fetch_stats().ahead_used + b->fetch_stats().ahead_used, 0u);
  EXPECT_EQ(budget->used(), 0u);
}

// Through the producer's TaskRunner: a task held behind another is fetched while the other's
// first batch waits for its records, and a revoked task's fetch is forgotten.
TEST_F(ProducerPrefetchTest, TheRunnerFetchesTheTasksItHoldsAheadAndForgetsRevokedOnes) {
  GatedEnv env(/*remote=*/true);
  auto maker = Maker("train", &env, nullptr);
  ASSERT_NE(maker, nullptr);
  TaskRunner::Options options;
  options.threads = 1;
  TaskRunner runner(options);
  env.Close();
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 8), maker).ok());
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 0, 8, 8), maker).ok());
  ASSERT_TRUE(runner.AddTask(MakeTask(3, "train", 0, 16, 8), maker).ok());
  // The worker waits for task 1's records; tasks 2 and 3 were asked for meanwhile.
  ASSERT_TRUE(WaitFor([&] { return Requested(env, 0, 24); }));
  EXPECT_EQ(runner.stats().batches_made, 0u);
  ASSERT_TRUE(runner.RevokeTask(3));
  env.Open();
  for (uint64_t g = 0; g < 16; ++g) {
    auto got = runner.GetBatch(BatchKey{"train", 0, g}, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ContentHash(), local_->Make(0, g)->ContentHash()) << "batch " << g;
  }
  ASSERT_TRUE(WaitFor([&] { return maker->fetch_stats().ahead_bytes == 0; }));
  EXPECT_EQ(maker->fetch_stats().forgotten, 8u);
  EXPECT_EQ(maker->fetch_stats().ahead_used, 16u);
  runner.Shutdown();
}

}  // namespace
}  // namespace croupier
