#include "src/producer/task_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/producer/producer_testing.h"
#include "src/producer/tfrecord_maker.h"

namespace croupier {
namespace {

using ::croupier::testing::GatedEnv;
using ::croupier::testing::JobOptions;
using ::croupier::testing::Key;
using ::croupier::testing::MakeJob;
using ::croupier::testing::MakeTask;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::Soon;
using ::croupier::testing::WaitFor;
using ::croupier::testing::WriteDataset;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// 160 records, batch size 4, 2 consumers: 40 batches an epoch.
class ProducerTaskRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(); }
  void Init(const JobOptions& options = {},
            const std::function<std::string(int64_t)>& record = nullptr) {
    paths_ = WriteDataset(tmp_.path(), counts_, record);
    auto maker =
        TfrecordBatchMaker::Create(MakeJob(paths_, counts_, options), index_, nullptr, &env_);
    ASSERT_TRUE(maker.ok()) << maker.status();
    maker_ = *std::move(maker);
    ASSERT_EQ(maker_->batches_per_epoch(), 40u);
  }
  std::vector<uint64_t> Expected(uint64_t epoch) {
    std::vector<uint64_t> out;
    for (uint64_t g = 0; g < 40; ++g) out.push_back(maker_->Make(epoch, g)->ContentHash());
    return out;
  }
  uint64_t BatchBytes() { return maker_->Make(0, 0)->bytes().size(); }

  ScopedTempDir tmp_;
  const std::vector<int> counts_ = {100, 60};
  std::vector<std::string> paths_;
  IndexCache index_{tmp_.Join("index")};
  GatedEnv env_;
  std::shared_ptr<const BatchMaker> maker_;
};

TEST_F(ProducerTaskRunnerTest, ServesEveryBatchOfTwoTasksExactlyOnce) {
  const std::vector<uint64_t> expected = Expected(0);
  TaskRunner runner({.threads = 3});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 0, 20, 20), maker_).ok());
  EXPECT_THAT(runner.HeldTasks(), ElementsAre(1, 2));

  std::vector<std::thread> consumers;
  for (uint64_t rank = 0; rank < 2; ++rank) {
    consumers.emplace_back([&, rank] {
      for (uint64_t g = rank; g < 40; g += 2) {
        auto batch = runner.GetBatch(Key(g), Soon());
        ASSERT_TRUE(batch.ok()) << batch.status();
        EXPECT_EQ(batch->ContentHash(), expected[g]) << g;
        runner.OnServed(Key(g), batch->bytes().size());
      }
    });
  }
  for (auto& t : consumers) t.join();
  EXPECT_THAT(runner.TakeFinishedTasks(), UnorderedElementsAre(1, 2));
  EXPECT_THAT(runner.TakeFinishedTasks(), IsEmpty());
  EXPECT_EQ(runner.FreeTaskSlots(), 2u);
  const TaskRunner::Stats s = runner.stats();
  EXPECT_EQ(s.batches_made, 40u);  // each made once
  EXPECT_EQ(s.batches_served, 40u);
  EXPECT_EQ(s.make_failures, 0u);
  EXPECT_EQ(s.buffered_bytes, 0u);
  EXPECT_EQ(s.tasks_held, 0u);
}

// An input file deleted mid-job, and its producer replaced: the new producer cannot make the
// job's maker. It holds the job's tasks all the same, and the rank that asks for one of their
// batches gets DATA_LOSS naming the file (on the data plane NOT_FOUND says "this producer does
// not hold it", which a consumer retried elsewhere until its deadline). Once the file is back,
// the job's next task makes batches again. A producer whose maker exists already, when the file
// goes, names it the same way.
TEST_F(ProducerTaskRunnerTest, AnInputFileThatIsGoneIsNamedToTheRankThatNeedsIt) {
  const v1::JobInfo job = MakeJob(paths_, counts_);
  const std::string saved = tmp_.Join("saved");
  ASSERT_EQ(std::rename(paths_[1].c_str(), saved.c_str()), 0);
  TaskRunner::Options options;
  options.threads = 1;
  options.makers =
      [&](const v1::JobInfo& info) -> absl::StatusOr<std::shared_ptr<const BatchMaker>> {
    IndexCache fresh(tmp_.Join("fresh-index"));  // a new producer: no index of its own yet
    auto made = TfrecordBatchMaker::Create(info, fresh, nullptr, nullptr);
    if (!made.ok()) return made.status();
    return std::shared_ptr<const BatchMaker>(*std::move(made));
  };
  TaskRunner runner(options);
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), job).ok());
  EXPECT_THAT(runner.HeldTasks(), ElementsAre(1));
  auto got = runner.GetBatch(Key(3), Soon());
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(paths_[1]));
  EXPECT_THAT(got.status().message(), HasSubstr("job 'train' epoch 0 batch 3"));

  ASSERT_EQ(std::rename(saved.c_str(), paths_[1].c_str()), 0);
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 0, 20, 20), job).ok());
  auto back = runner.GetBatch(Key(25), Soon());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ContentHash(), Expected(0)[25]);

  // The file goes while a maker exists (its index built, the file not opened yet): a batch
  // that reads it names it too.
  ScopedTempDir again;
  IndexCache index(again.Join("index"));
  std::vector<std::string> paths = WriteDataset(again.path(), counts_, nullptr);
  auto maker = TfrecordBatchMaker::Create(MakeJob(paths, counts_), index, nullptr, nullptr);
  ASSERT_TRUE(maker.ok()) << maker.status();
  ASSERT_EQ(::unlink(paths[1].c_str()), 0);
  absl::Status missing = absl::OkStatus();
  for (uint64_t g = 0; g < 40 && missing.ok(); ++g) missing = (*maker)->Make(0, g).status();
  EXPECT_TRUE(absl::IsDataLoss(missing)) << missing;
  EXPECT_THAT(missing.message(), HasSubstr(paths[1]));
}

TEST_F(ProducerTaskRunnerTest, CompressionOfFollowsTheHeldJobsSpec) {
  TaskRunner runner({.threads = 1});
  EXPECT_EQ(runner.CompressionOf("train"), Codec::kNone);  // no task of it held
  v1::JobInfo job = MakeJob(paths_, counts_);
  job.mutable_spec()->set_compression(v1::COMPRESSION_LZ4);
  auto maker = TfrecordBatchMaker::Create(job, index_, nullptr, &env_);
  ASSERT_TRUE(maker.ok()) << maker.status();
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), *std::move(maker)).ok());
  EXPECT_EQ(runner.CompressionOf("train"), Codec::kLz4);
  EXPECT_EQ(runner.CompressionOf("other"), Codec::kNone);
}

TEST_F(ProducerTaskRunnerTest, BufferStaysBoundedWhileNobodyTakes) {
  const uint64_t batch = BatchBytes();
  const uint64_t capacity = 3 * batch;
  TaskRunner runner({.threads = 4, .buffer_bytes = capacity});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 40), maker_).ok());
  ASSERT_TRUE(WaitFor([&] { return runner.stats().buffered_bytes >= 2 * batch; }));
  absl::SleepFor(absl::Milliseconds(200));  // time enough to overrun, if it would
  TaskRunner::Stats s = runner.stats();
  EXPECT_LE(s.buffered_bytes, capacity + batch);
  EXPECT_LE(s.peak_buffered_bytes, capacity + batch);
  EXPECT_LE(s.batches_made, 4u);
  EXPECT_EQ(s.buffer_capacity_bytes, capacity);

  // Taking makes room, and the workers carry on.
  for (uint64_t g = 0; g < 40; ++g) {
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << got.status();
    runner.OnServed(Key(g), got->bytes().size());
  }
  s = runner.stats();
  EXPECT_LE(s.peak_buffered_bytes, capacity + batch);
  EXPECT_EQ(s.batches_made, 40u);
  EXPECT_THAT(runner.TakeFinishedTasks(), ElementsAre(1));
}

TEST_F(ProducerTaskRunnerTest, CountsTheTimeSpentMakingAndItsThreads) {
  // Each batch takes 20 ms more (the test delay); 2 workers, a buffer of 3 batches.
  const uint64_t batch = BatchBytes();
  TaskRunner runner(
      {.threads = 2, .buffer_bytes = 3 * batch, .test_make_delay = absl::Milliseconds(20)});
  EXPECT_EQ(runner.stats().threads, 2);
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 10), maker_).ok());
  for (uint64_t g = 0; g < 10; ++g) {
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << got.status();
    runner.OnServed(Key(g), got->bytes().size());
  }
  const TaskRunner::Stats s = runner.stats();
  EXPECT_EQ(s.batches_made, 10u);
  EXPECT_GE(s.make_seconds, 10 * 0.020);
  // Once the buffer is full and nobody takes, the workers wait: the time stops growing.
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 0, 10, 10), maker_).ok());
  ASSERT_TRUE(WaitFor([&] { return runner.stats().buffered_bytes >= 2 * batch; }));
  absl::SleepFor(absl::Milliseconds(100));  // the last batches that fit are made
  const double full = runner.stats().make_seconds;
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_LT(runner.stats().make_seconds - full, 0.05);
}

TEST_F(ProducerTaskRunnerTest, RequestsInAnyOrderNeverWaitBehindAFullBuffer) {
  const std::vector<uint64_t> expected = Expected(0);
  TaskRunner runner({.threads = 2, .buffer_bytes = 2 * BatchBytes()});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 40), maker_).ok());
  ASSERT_TRUE(WaitFor([&] { return runner.stats().buffered_bytes >= BatchBytes(); }));
  for (uint64_t g = 40; g-- > 0;) {  // the latest first: none of them has been made
    auto got = runner.GetBatch(Key(g), absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ContentHash(), expected[g]) << g;
  }
  EXPECT_EQ(runner.stats().batches_made, 40u);
}

TEST_F(ProducerTaskRunnerTest, ForeignBatchesAreNotFound) {
  TaskRunner runner({.threads = 1});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  auto got = runner.GetBatch(Key(57, 1), Soon());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(got.status().message(), "producer does not hold batch 57 of job 'train' epoch 1");
  EXPECT_EQ(runner.GetBatch(Key(20), Soon()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runner.GetBatch(BatchKey{"eval", 0, 3}, Soon()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(runner.GetBatch(Key(19), Soon()).ok());
}

TEST_F(ProducerTaskRunnerTest, ServedBatchIsRemadeIdenticallyOnRetry) {
  const std::vector<uint64_t> expected = Expected(0);
  TaskRunner runner({.threads = 2});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 4), maker_).ok());
  auto first = runner.GetBatch(Key(3), Soon());
  ASSERT_TRUE(first.ok()) << first.status();
  runner.OnServed(Key(3), first->bytes().size());
  auto again = runner.GetBatch(Key(3), Soon());  // the consumer lost the connection
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ContentHash(), expected[3]);
  runner.OnServed(Key(3), again->bytes().size());  // served twice counts once

  for (uint64_t g = 0; g < 3; ++g) {
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << got.status();
    runner.OnServed(Key(g), got->bytes().size());
  }
  EXPECT_THAT(runner.TakeFinishedTasks(), ElementsAre(1));
  EXPECT_THAT(runner.TakeFinishedTasks(), IsEmpty());
  // A finished task is kept for late retries.
  auto late = runner.GetBatch(Key(3), Soon());
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->ContentHash(), expected[3]);
  EXPECT_EQ(runner.stats().batches_served, 5u);
}

TEST_F(ProducerTaskRunnerTest, RevokedTaskIsDroppedAndItsWaitersFail) {
  {
    TaskRunner runner({.threads = 1});
    ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
    ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 0, 20, 20), maker_).ok());
    ASSERT_TRUE(WaitFor([&] { return runner.stats().buffered_bytes > 0; }));
    EXPECT_TRUE(runner.RevokeTask(1));
    EXPECT_FALSE(runner.RevokeTask(1));
    EXPECT_THAT(runner.HeldTasks(), ElementsAre(2));
    auto got = runner.GetBatch(Key(0), Soon());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
    // Its buffered batches are freed: what the buffer holds now is task 2's.
    for (uint64_t g = 20; g < 40; ++g) {
      auto b = runner.GetBatch(Key(g), Soon());
      ASSERT_TRUE(b.ok()) << b.status();
    }
    EXPECT_TRUE(WaitFor([&] { return runner.stats().buffered_bytes == 0; }));
  }

  // A request waiting for a batch being made learns of the revocation. On a runner of its own:
  // the first one's worker may still be inside a batch of task 1 (revoked, and thrown away once
  // made) when this begins, if it was slow (under the sanitizers) while this thread made task 2's
  // batches on demand. It would then be the read held at the closed gate, the request below would
  // find batch 0 not started and make it itself, and be answered with it once the gate opened.
  TaskRunner runner({.threads = 1});
  env_.Close();
  ASSERT_TRUE(runner.AddTask(MakeTask(3, "train", 1, 0, 10), maker_).ok());
  ASSERT_TRUE(env_.AwaitWaiting(1));  // the only worker is making batch 0 of epoch 1
  absl::Status waited;
  std::thread waiter([&] { waited = runner.GetBatch(Key(0, 1), Soon()).status(); });
  // Revoked once the request waits (revoked before, it would be told the task is not held).
  EXPECT_TRUE(WaitFor([&] { return runner.stats().waiting_requests == 1; }));
  EXPECT_TRUE(runner.RevokeTask(3));
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kNotFound) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("task 3 (batches [0, 10) of job 'train' epoch 1) was "
                                          "revoked"));
  env_.Open();
  EXPECT_THAT(runner.TakeFinishedTasks(), IsEmpty());
}

// A request making a batch on demand (no worker has reached it) when its task is revoked is told
// so once the batch is made, not handed the batch: the task may be another producer's by then.
TEST_F(ProducerTaskRunnerTest, RevokedTaskFailsARequestMakingItsBatchOnDemand) {
  TaskRunner runner({.threads = 1});
  env_.Close();
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  ASSERT_TRUE(env_.AwaitWaiting(1));  // the worker, making batch 0
  absl::Status made;
  std::thread requester([&] { made = runner.GetBatch(Key(5), Soon()).status(); });
  EXPECT_TRUE(env_.AwaitWaiting(2));  // the request, making batch 5 itself
  EXPECT_TRUE(runner.RevokeTask(1));
  env_.Open();
  requester.join();
  EXPECT_EQ(made.code(), absl::StatusCode::kNotFound) << made;
  EXPECT_THAT(made.message(),
              HasSubstr("task 1 (batches [0, 20) of job 'train' epoch 0) was revoked"));
}

// The same for first_come, where the task's next owner hands its batches to whoever asks: a
// batch handed out here after the revocation could be handed out there too.
TEST_F(ProducerTaskRunnerTest, RevokedTaskFailsAnAnyRequestMakingItsBatchOnDemand) {
  JobOptions first_come;
  first_come.mode = "first_come";
  Init(first_come);
  TaskRunner runner({.threads = 1});
  env_.Close();
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  ASSERT_TRUE(env_.AwaitWaiting(1));  // the worker, making batch 0
  absl::Status made;
  std::thread requester([&] { made = runner.GetAnyBatch("train", 0, Soon()).status(); });
  EXPECT_TRUE(env_.AwaitWaiting(2));  // the request, making batch 1 itself
  EXPECT_TRUE(runner.RevokeTask(1));
  env_.Open();
  requester.join();
  EXPECT_EQ(made.code(), absl::StatusCode::kNotFound) << made;
  EXPECT_THAT(made.message(),
              HasSubstr("task 1 (batches [0, 20) of job 'train' epoch 0) was revoked"));
}

TEST_F(ProducerTaskRunnerTest, GetAnyBatchHandsEachBatchOutOnceThenOutOfRange) {
  JobOptions first_come;
  first_come.mode = "first_come";
  Init(first_come);
  const std::vector<uint64_t> expected = Expected(2);
  TaskRunner runner({.threads = 2, .buffer_bytes = 4 * BatchBytes()});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 2, 0, 20), maker_).ok());
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 2, 20, 20), maker_).ok());
  std::mutex mu;
  std::multiset<uint64_t> seen;
  std::vector<std::thread> takers;
  for (int t = 0; t < 4; ++t) {
    takers.emplace_back([&] {
      while (true) {
        auto got = runner.GetAnyBatch("train", 2, Soon());
        if (got.status().code() == absl::StatusCode::kOutOfRange) return;
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->second.ContentHash(), expected[got->first]) << got->first;
        runner.OnServed(Key(got->first, 2), got->second.bytes().size());
        std::lock_guard<std::mutex> lock(mu);
        seen.insert(got->first);
      }
    });
  }
  for (auto& t : takers) t.join();
  ASSERT_EQ(seen.size(), 40u);
  for (uint64_t g = 0; g < 40; ++g) EXPECT_EQ(seen.count(g), 1u) << g;
  auto after = runner.GetAnyBatch("train", 2, Soon());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(after.status().message(), HasSubstr("no more batches of job 'train' epoch 2"));
  EXPECT_THAT(runner.TakeFinishedTasks(), UnorderedElementsAre(1, 2));
  EXPECT_EQ(runner.stats().batches_made, 40u);
}

TEST_F(ProducerTaskRunnerTest, FailedBatchIsReportedAndNotRetriedByTheWorkers) {
  JobOptions none;
  none.shuffle = "none";
  Init(none, [](int64_t id) {
    Example e = testing::RecordOf(id);
    if (id == 9) e.pop_back();  // no "name": batch 2 cannot be made
    return EncodeExample(e);
  });
  TaskRunner runner({.threads = 2});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 40), maker_).ok());
  ASSERT_TRUE(WaitFor([&] {
    const TaskRunner::Stats s = runner.stats();
    return s.batches_made + s.make_failures == 40;
  }));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(runner.stats().make_failures, 1u);
  for (int attempt = 0; attempt < 2; ++attempt) {  // from the buffer, then remade
    auto got = runner.GetBatch(Key(2), Soon());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_THAT(got.status().message(),
                HasSubstr(absl::StrCat("job 'train' epoch 0 batch 2: record 9 of ", paths_[0])));
    EXPECT_THAT(got.status().message(), HasSubstr("feature 'name': missing"));
  }
  EXPECT_EQ(runner.stats().make_failures, 2u);
  // Every other batch served: the failed one, whose requester was told, holds the task no longer.
  EXPECT_THAT(runner.TakeFinishedTasks(), IsEmpty());
  for (uint64_t g = 0; g < 40; ++g) {
    if (g == 2) continue;
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << g << ": " << got.status();
    runner.OnServed(Key(g), got->bytes().size());
  }
  EXPECT_THAT(runner.TakeFinishedTasks(), ElementsAre(1));
  EXPECT_EQ(runner.FreeTaskSlots(), 2u);
}

// Rank 0 of 2 reads its whole epoch while rank 1 reads nothing, and the test gives the runner a
// new task whenever it has a free slot, as the dispatcher does. The slots free up as tasks are
// made, rank 1's batches make way in the small buffer for those rank 0 needs, and when rank 1
// reads at last it gets every batch, identical (the evicted ones made again).
TEST_F(ProducerTaskRunnerTest, ARankThatDoesNotReadHoldsNoSlotAndItsBatchesAreMadeAgainLater) {
  const std::vector<uint64_t> expected = Expected(0);
  const uint64_t capacity = 4 * BatchBytes();
  TaskRunner runner({.threads = 2,
                     .buffer_bytes = capacity,
                     .max_tasks = 1,
                     .stale_after = absl::ZeroDuration()});
  uint64_t next_task = 0;  // tasks of 8 batches: 4 rounds of the 2 ranks
  auto give_tasks = [&] {
    while (next_task < 5 && runner.FreeTaskSlots() > 0) {
      ASSERT_TRUE(
          runner.AddTask(MakeTask(next_task + 1, "train", 0, 8 * next_task, 8), maker_).ok());
      ++next_task;
    }
  };
  for (uint64_t g = 0; g < 40; g += 2) {
    // The task of batch g arrives once a slot is free, within 2 s (a dispatcher's heartbeat).
    ASSERT_TRUE(WaitFor([&] {
      give_tasks();
      return next_task > g / 8;
    })) << "no slot for the task of batch "
        << g << ": " << runner.stats().tasks_held << " held";
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << g << ": " << got.status();
    EXPECT_EQ(got->ContentHash(), expected[g]) << g;
    runner.OnServed(Key(g), got->bytes().size());
  }
  TaskRunner::Stats s = runner.stats();
  EXPECT_LE(s.peak_buffered_bytes, capacity + BatchBytes());
  EXPECT_GT(s.batches_evicted, 0u);
  // Rank 1 comes: every batch is there, made again where it was evicted.
  for (uint64_t g = 1; g < 40; g += 2) {
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << g << ": " << got.status();
    EXPECT_EQ(got->ContentHash(), expected[g]) << g;
    runner.OnServed(Key(g), got->bytes().size());
  }
  runner.TakeFinishedTasks();
  EXPECT_THAT(runner.HeldTasks(), IsEmpty());
}

// Stale means behind: while both ranks read in step, a full buffer waits for them (backpressure)
// and nothing is evicted, however long the batches wait.
TEST_F(ProducerTaskRunnerTest, RanksReadingInStepAreNeverEvictedFrom) {
  const uint64_t capacity = 4 * BatchBytes();
  TaskRunner runner({.threads = 2, .buffer_bytes = capacity, .stale_after = absl::ZeroDuration()});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 0, 20, 20), maker_).ok());
  for (uint64_t g = 0; g < 40; ++g) {
    if (g % 8 == 0) absl::SleepFor(absl::Milliseconds(20));  // the buffer fills meanwhile
    auto got = runner.GetBatch(Key(g), Soon());
    ASSERT_TRUE(got.ok()) << g << ": " << got.status();
    runner.OnServed(Key(g), got->bytes().size());
  }
  EXPECT_EQ(runner.stats().batches_evicted, 0u);
  EXPECT_EQ(runner.stats().batches_made, 40u);
  EXPECT_THAT(runner.TakeFinishedTasks(), ElementsAre(1, 2));
}

TEST_F(ProducerTaskRunnerTest, ShutdownFailsBlockedWaitersPromptly) {
  env_.Close();
  TaskRunner runner({.threads = 2});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  ASSERT_TRUE(env_.AwaitWaiting(1));  // a worker is inside batch 0
  // Not made in time.
  auto late = runner.GetBatch(Key(0), absl::Now() + absl::Milliseconds(30));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("batch 0 of job 'train' epoch 0"));

  std::vector<absl::Status> results(3);
  std::vector<std::thread> waiters;
  for (auto& result : results) {
    waiters.emplace_back([&] { result = runner.GetBatch(Key(0), Soon()).status(); });
  }
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  absl::Notification shut;
  std::thread shutdown([&] {
    runner.Shutdown();
    shut.Notify();
  });
  for (auto& t : waiters) t.join();  // woken while the worker is still stuck in its read
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  for (const auto& result : results) {
    EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
  }
  EXPECT_FALSE(shut.HasBeenNotified());
  env_.Open();
  EXPECT_TRUE(shut.WaitForNotificationWithTimeout(absl::Seconds(10)));
  shutdown.join();
  EXPECT_EQ(runner.GetBatch(Key(1), Soon()).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(runner.GetAnyBatch("train", 0, Soon()).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(runner.AddTask(MakeTask(2, "train", 0, 20, 20), maker_).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(ProducerTaskRunnerTest, DeadlinesFollowTheInjectedClock) {
  FakeClock clock;
  env_.Close();
  TaskRunner runner({.threads = 1, .clock = &clock});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  ASSERT_TRUE(env_.AwaitWaiting(1));
  absl::Notification done;
  std::thread waiter([&] {
    auto got = runner.GetBatch(Key(0), clock.Now() + absl::Seconds(5));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  clock.Advance(absl::Seconds(6));
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  waiter.join();
  env_.Open();
}

TEST_F(ProducerTaskRunnerTest, AddTaskChecksItsTask) {
  env_.Close();  // nothing gets made: every task held keeps its slot
  TaskRunner runner({.threads = 1, .max_tasks = 2});
  ASSERT_TRUE(runner.AddTask(MakeTask(1, "train", 0, 0, 20), maker_).ok());
  EXPECT_EQ(runner.AddTask(MakeTask(1, "train", 0, 20, 20), maker_).code(),
            absl::StatusCode::kAlreadyExists);
  absl::Status overlap = runner.AddTask(MakeTask(2, "train", 0, 10, 20), maker_);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overlap.message(), HasSubstr("overlaps task 1"));
  EXPECT_EQ(runner.AddTask(MakeTask(2, "train", 0, 30, 20), maker_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner.AddTask(MakeTask(2, "train", 0, 30, 0), maker_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner.AddTask(MakeTask(2, "eval", 0, 20, 20), maker_).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner.AddTask(MakeTask(2, "train", 0, 20, 20), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner.FreeTaskSlots(), 1u);
  ASSERT_TRUE(runner.AddTask(MakeTask(2, "train", 1, 0, 20), maker_).ok());
  ASSERT_TRUE(runner.AddTask(MakeTask(3, "train", 2, 0, 20), maker_).ok());  // beyond max_tasks
  EXPECT_EQ(runner.FreeTaskSlots(), 0u);
  env_.Open();
}

}  // namespace
}  // namespace croupier
