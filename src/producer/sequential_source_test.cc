#include "src/producer/sequential_source.h"

#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/producer_testing.h"
#include "src/transport/transport_testing.h"

namespace croupier {
namespace {

using ::croupier::testing::Soon;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::Task MakeTask(uint64_t id, uint64_t epoch, uint64_t first, uint64_t n) {
  v1::Task t;
  t.set_task_id(id);
  t.set_job("py");
  t.set_epoch(epoch);
  t.set_first_batch(first);
  t.set_num_batches(n);
  return t;
}

absl::Time Past() { return absl::Now() - absl::Seconds(1); }

BatchKey PyKey(uint64_t epoch, uint64_t batch) { return BatchKey{"py", epoch, batch}; }

// Supplies the next `n` slots as the feeder would, each a batch of its own; their keys in order.
std::vector<BatchKey> Feed(SequentialSource& source, int n) {
  std::vector<BatchKey> keys;
  for (int i = 0; i < n; ++i) {
    auto key = source.NextSlot(Soon());
    EXPECT_TRUE(key.ok()) << key.status();
    if (!key.ok()) break;
    keys.push_back(*key);
    EXPECT_TRUE(source.Put(*key, testing::MakeBatch(4096, i)).ok());
  }
  return keys;
}

TEST(ProducerSequentialSourceTest, SlotsComeInOrderAcrossTasksAndEpochs) {
  SequentialSource source({.buffer_bytes = 1 << 20, .max_tasks = 3});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 0, 0, 2)).ok());
  ASSERT_TRUE(source.AddTask(MakeTask(2, 0, 2, 1)).ok());
  ASSERT_TRUE(source.AddTask(MakeTask(3, 1, 0, 1)).ok());
  EXPECT_EQ(source.FreeTaskSlots(), 0u);
  const std::vector<BatchKey> keys = Feed(source, 4);
  EXPECT_THAT(keys, ElementsAre(PyKey(0, 0), PyKey(0, 1), PyKey(0, 2), PyKey(1, 0)));
  EXPECT_EQ(source.LastTaskEnd(), std::make_pair(uint64_t{1}, uint64_t{1}));
  EXPECT_EQ(source.NextSlot(Past()).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ProducerSequentialSourceTest, ATaskBeforeTheHeldOnesIsHeldFirstAndFedFirst) {
  // A task of epoch 1 is held; then task 2 of epoch 0 comes, one a dead source left unfinished.
  SequentialSource source({});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 1, 0, 2)).ok());
  ASSERT_TRUE(source.AddTask(MakeTask(2, 0, 8, 2)).ok());
  EXPECT_THAT(source.HeldTasks(), ElementsAre(2, 1));
  const std::vector<BatchKey> keys = Feed(source, 4);
  EXPECT_THAT(keys, ElementsAre(PyKey(0, 8), PyKey(0, 9), PyKey(1, 0), PyKey(1, 1)));
  EXPECT_EQ(source.LastTaskEnd(), std::make_pair(uint64_t{1}, uint64_t{2}));
  absl::Status overlap = source.AddTask(MakeTask(3, 0, 9, 4));
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overlap.message(), HasSubstr("overlaps held task 2"));
  EXPECT_EQ(source.AddTask(MakeTask(1, 2, 0, 4)).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(source.AddTask(MakeTask(4, 2, 0, 0)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProducerSequentialSourceTest, ServedBatchesFinishTheTaskAndCannotBeServedAgain) {
  SequentialSource source({});
  ASSERT_TRUE(source.AddTask(MakeTask(7, 0, 0, 2)).ok());
  const Batch b0 = testing::MakeBatch(4096, 1), b1 = testing::MakeBatch(4096, 2);
  ASSERT_TRUE(source.Put(PyKey(0, 0), b0).ok());
  ASSERT_TRUE(source.Put(PyKey(0, 1), b1).ok());
  auto got = source.GetBatch(PyKey(0, 1), Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ContentHash(), b1.ContentHash());
  source.OnServed(PyKey(0, 1), got->bytes().size());
  EXPECT_EQ(source.GetBatch(PyKey(0, 1), Soon()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(source.TakeFinishedTasks().empty());
  ASSERT_TRUE(source.GetBatch(PyKey(0, 0), Soon()).ok());
  source.OnServed(PyKey(0, 0), 4096);
  EXPECT_THAT(source.TakeFinishedTasks(), ElementsAre(7u));
  EXPECT_TRUE(source.HeldTasks().empty());
  EXPECT_EQ(source.stats().buffered_bytes, 0u);
}

TEST(ProducerSequentialSourceTest, AFullBufferHoldsTheFeederBack) {
  SequentialSource source({.buffer_bytes = 10000, .max_tasks = 2});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 0, 0, 8)).ok());
  for (uint64_t g = 0; g < 3; ++g) {
    auto key = source.NextSlot(Soon());
    ASSERT_TRUE(key.ok());
    ASSERT_TRUE(source.Put(*key, testing::MakeBatch(4096, g)).ok());
  }
  // 12 KiB buffered > 10,000 bytes: no room until a batch is served.
  EXPECT_EQ(source.NextSlot(absl::Now() + absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread consumer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    auto b = source.GetBatch(PyKey(0, 0), Soon());
    ASSERT_TRUE(b.ok());
    source.OnServed(PyKey(0, 0), b->bytes().size());
  });
  auto key = source.NextSlot(Soon());
  consumer.join();
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, PyKey(0, 3));
  EXPECT_LE(source.stats().buffered_bytes, 10000u);
}

TEST(ProducerSequentialSourceTest, ARequestWaitsForItsBatchAndAnErrorReachesIt) {
  SequentialSource source({});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 0, 0, 2)).ok());
  std::thread feeder([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(source.Put(PyKey(0, 0), testing::MakeBatch(4096, 3)).ok());
    ASSERT_TRUE(source.Put(PyKey(0, 1), absl::InvalidArgumentError("feature 'x' is float64")).ok());
  });
  EXPECT_TRUE(source.GetBatch(PyKey(0, 0), Soon()).ok());
  auto bad = source.GetBatch(PyKey(0, 1), Soon());
  feeder.join();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("float64"));
  EXPECT_EQ(source.GetBatch(PyKey(0, 5), Soon()).status().code(), absl::StatusCode::kNotFound);
}

TEST(ProducerSequentialSourceTest, ARevokedTaskIsSkippedByTheFeeder) {
  SequentialSource source({.buffer_bytes = 1 << 20, .max_tasks = 3});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 0, 0, 2)).ok());
  ASSERT_TRUE(source.AddTask(MakeTask(2, 0, 2, 2)).ok());
  auto key = source.NextSlot(Soon());
  ASSERT_TRUE(key.ok());
  EXPECT_TRUE(source.RevokeTask(1));
  EXPECT_TRUE(source.Put(*key, testing::MakeBatch(4096, 0)).ok());  // dropped
  auto next = source.NextSlot(Soon());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, PyKey(0, 2));
  EXPECT_EQ(source.stats().buffered_bytes, 0u);
  EXPECT_EQ(source.Put(PyKey(0, 3), testing::MakeBatch(4096, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ProducerSequentialSourceTest, FirstComeHandsEachBatchOnceThenOutOfRange) {
  SequentialSource source({});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 0, 0, 2)).ok());
  ASSERT_TRUE(source.Put(PyKey(0, 0), testing::MakeBatch(4096, 0)).ok());
  ASSERT_TRUE(source.Put(PyKey(0, 1), testing::MakeBatch(4096, 1)).ok());
  auto a = source.GetAnyBatch("py", 0, Soon());
  auto b = source.GetAnyBatch("py", 0, Soon());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->first, b->first);
  EXPECT_EQ(source.GetAnyBatch("py", 0, Soon()).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(ProducerSequentialSourceTest, ShutdownWakesEveryWaiter) {
  SequentialSource source({});
  ASSERT_TRUE(source.AddTask(MakeTask(1, 0, 0, 2)).ok());
  std::thread waiter([&] {
    EXPECT_EQ(source.GetBatch(PyKey(0, 1), Soon()).status().code(), absl::StatusCode::kUnavailable);
  });
  absl::SleepFor(absl::Milliseconds(30));
  const absl::Time start = absl::Now();
  source.Shutdown();
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(source.NextSlot(Soon()).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace croupier
