#include "src/producer/batch_buffer.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/producer_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// A batch of one record holding `payload` bytes.
Batch MakeBatch(size_t payload, char fill = 'x') {
  auto builder = BatchBuilder::Create({FeatureSpec{"blob", DType::kBytes, {}, false}});
  EXPECT_TRUE(builder.ok());
  EXPECT_TRUE(
      (*builder)
          ->AddRecord(EncodeExample({{"blob", Feature::Bytes({std::string(payload, fill)})}}))
          .ok());
  auto batch = (*builder)->Finish();
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *std::move(batch);
}

using ::croupier::testing::Key;
using ::croupier::testing::Soon;

TEST(ProducerBatchBufferTest, PutThenTakeByKey) {
  BatchBuffer buffer(1 << 20);
  const Batch batch = MakeBatch(100);
  ASSERT_TRUE(buffer.Put(Key(3), batch, Soon()).ok());
  BatchBuffer::Stats s = buffer.stats();
  EXPECT_EQ(s.bytes, batch.bytes().size());
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.capacity_bytes, 1u << 20);

  EXPECT_EQ(buffer.Take(Key(3, 1), absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  auto got = buffer.Take(Key(3), Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ContentHash(), batch.ContentHash());
  EXPECT_EQ(buffer.stats().bytes, 0u);
  EXPECT_EQ(buffer.stats().count, 0u);
}

TEST(ProducerBatchBufferTest, StoredErrorIsHandedToTheRequester) {
  BatchBuffer buffer(1000);
  ASSERT_TRUE(buffer.Put(Key(1), absl::DataLossError("bad record at byte 7"), Soon()).ok());
  EXPECT_EQ(buffer.stats().bytes, 0u);
  auto got = buffer.Take(Key(1), Soon());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("byte 7"));
}

TEST(ProducerBatchBufferTest, OversizeBatchIsAdmittedOnlyIntoAnEmptyBuffer) {
  const Batch big = MakeBatch(5000);
  BatchBuffer buffer(1000);
  ASSERT_TRUE(buffer.Put(Key(0), big, Soon()).ok());
  EXPECT_EQ(buffer.stats().bytes, big.bytes().size());
  // Not empty now: even a small batch waits, until the deadline.
  const absl::Time start = absl::Now();
  absl::Status put = buffer.Put(Key(1), MakeBatch(10), start + absl::Milliseconds(50));
  EXPECT_EQ(put.code(), absl::StatusCode::kDeadlineExceeded) << put;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_THAT(put.message(), HasSubstr("batch 1 of job 'train' epoch 0"));

  // A put blocked on room goes through once the big batch is taken.
  std::thread putter([&] { EXPECT_TRUE(buffer.Put(Key(1), MakeBatch(10), Soon()).ok()); });
  ASSERT_TRUE(buffer.Take(Key(0), Soon()).ok());
  EXPECT_TRUE(buffer.Take(Key(1), Soon()).ok());
  putter.join();
}

TEST(ProducerBatchBufferTest, BoundHoldsUnderConcurrentPutsAndTakes) {
  const Batch batch = MakeBatch(1000);
  const uint64_t size = batch.bytes().size();
  const uint64_t capacity = 5 * size + size / 2;
  BatchBuffer buffer(capacity);
  constexpr int kThreads = 4, kPerThread = 50;
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int p = 0; p < kThreads; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerThread; ++i) {
        EXPECT_TRUE(buffer.Put(Key(p * kPerThread + i), batch, Soon()).ok());
        if (buffer.stats().bytes > capacity) over = true;
      }
    });
  }
  std::mutex seen_mu;
  std::set<uint64_t> seen;
  for (int c = 0; c < kThreads; ++c) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        auto got = buffer.TakeAny("train", 0, Soon());
        ASSERT_TRUE(got.ok()) << got.status();
        std::lock_guard<std::mutex> lock(seen_mu);
        EXPECT_TRUE(seen.insert(got->first).second) << "twice: " << got->first;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over);
  EXPECT_LE(buffer.stats().peak_bytes, capacity);
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(buffer.stats().bytes, 0u);
}

TEST(ProducerBatchBufferTest, PutGoesStraightToEveryWaiterOfItsKey) {
  BatchBuffer buffer(1 << 20);
  const Batch batch = MakeBatch(64);
  std::vector<std::thread> waiters;
  std::atomic<int> got{0};
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      auto b = buffer.Take(Key(9), Soon());
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->ContentHash(), batch.ContentHash());
      ++got;
    });
  }
  absl::SleepFor(absl::Milliseconds(50));  // let them register
  ASSERT_TRUE(buffer.Put(Key(9), batch, Soon()).ok());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(got, 3);
  EXPECT_EQ(buffer.stats().bytes, 0u);  // handed over, never stored
  EXPECT_EQ(buffer.stats().peak_bytes, 0u);
}

TEST(ProducerBatchBufferTest, TakeAnyTakesOnlyItsEpochLowestFirst) {
  BatchBuffer buffer(1 << 20);
  ASSERT_TRUE(buffer.Put(Key(7, 1), MakeBatch(8), Soon()).ok());
  ASSERT_TRUE(buffer.Put(Key(5, 1), MakeBatch(8), Soon()).ok());
  ASSERT_TRUE(buffer.Put(Key(1, 2), MakeBatch(8), Soon()).ok());
  ASSERT_TRUE(buffer.Put(Key(0, 1, "other"), MakeBatch(8), Soon()).ok());
  EXPECT_EQ(buffer.TakeAny("train", 1, Soon())->first, 5u);
  EXPECT_EQ(buffer.TakeAny("train", 1, Soon())->first, 7u);
  EXPECT_EQ(buffer.TakeAny("train", 1, absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(buffer.stats().count, 2u);
}

TEST(ProducerBatchBufferTest, CancelWakesEveryWaiterWithItsStatus) {
  BatchBuffer buffer(100);
  ASSERT_TRUE(buffer.Put(Key(0), MakeBatch(500), Soon()).ok());  // full
  // Far enough that only Cancel ends the waits; bounded, so that a broken Cancel fails the test
  // instead of hanging it.
  const absl::Time forever = absl::Now() + absl::Seconds(30);
  std::vector<std::thread> threads;
  std::atomic<int> woken{0};
  auto expect_cancelled = [&](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(), HasSubstr("going away"));
    ++woken;
  };
  threads.emplace_back([&] { expect_cancelled(buffer.Take(Key(1), forever).status()); });
  threads.emplace_back([&] { expect_cancelled(buffer.Take(Key(1), forever).status()); });
  threads.emplace_back([&] { expect_cancelled(buffer.TakeAny("train", 3, forever).status()); });
  threads.emplace_back([&] { expect_cancelled(buffer.Put(Key(2), MakeBatch(10), forever)); });
  threads.emplace_back([&] { expect_cancelled(buffer.AwaitRoom(10, forever)); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(woken, 0);
  const absl::Time start = absl::Now();
  buffer.Cancel(absl::UnavailableError("producer going away"));
  for (auto& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(woken, 5);
  // Later calls fail at once, and what was held is dropped.
  expect_cancelled(buffer.Take(Key(0), forever).status());
  expect_cancelled(buffer.Put(Key(0), MakeBatch(1), forever));
  EXPECT_EQ(buffer.stats().bytes, 0u);
  EXPECT_FALSE(buffer.TryReserve(1));
}

TEST(ProducerBatchBufferTest, DeadlinesFollowTheInjectedClock) {
  FakeClock clock;
  BatchBuffer buffer(1 << 20, &clock);
  absl::Notification done;
  std::thread waiter([&] {
    auto got = buffer.Take(Key(1), clock.Now() + absl::Seconds(30));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
    EXPECT_THAT(got.status().message(), HasSubstr("batch 1 of job 'train' epoch 0"));
    done.Notify();
  });
  // Real time passes, the fake clock does not: still waiting.
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  clock.Advance(absl::Seconds(31));
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  waiter.join();
}

TEST(ProducerBatchBufferTest, ReservationsCountAgainstTheBound) {
  const Batch batch = MakeBatch(100);
  const uint64_t size = batch.bytes().size();
  BatchBuffer buffer(2 * size);
  EXPECT_TRUE(buffer.TryReserve(size));
  EXPECT_TRUE(buffer.TryReserve(size));
  EXPECT_FALSE(buffer.TryReserve(1));
  EXPECT_EQ(buffer.stats().reserved_bytes, 2 * size);
  EXPECT_EQ(buffer.AwaitRoom(1, absl::Now() + absl::Milliseconds(10)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(buffer.PutReserved(Key(0), batch, size));  // stored: nobody waits
  buffer.Unreserve(size);
  EXPECT_TRUE(buffer.AwaitRoom(size, Soon()).ok());
  EXPECT_EQ(buffer.stats().reserved_bytes, 0u);
  EXPECT_EQ(buffer.stats().bytes, size);

  // A registered ticket receives a later PutReserved, which reports the handover.
  BatchBuffer::Ticket ticket = buffer.Expect(Key(4));
  ASSERT_TRUE(buffer.TryReserve(size));
  EXPECT_TRUE(buffer.PutReserved(Key(4), batch, size));
  auto got = buffer.Wait(std::move(ticket), Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->first, 4u);
}

TEST(ProducerBatchBufferTest, DiscardAndFailAnyWakeTheirWaiters) {
  BatchBuffer buffer(1 << 20);
  ASSERT_TRUE(buffer.Put(Key(2), MakeBatch(10), Soon()).ok());
  buffer.Discard(Key(2), absl::NotFoundError("revoked"));
  EXPECT_EQ(buffer.stats().count, 0u);

  BatchBuffer::Ticket keyed = buffer.Expect(Key(3));
  BatchBuffer::Ticket any = buffer.ExpectAny("train", 0);
  BatchBuffer::Ticket other = buffer.ExpectAny("train", 1);
  buffer.Discard(Key(3), absl::NotFoundError("task 4 was revoked"));
  buffer.FailAnyWaiters("train", 0, absl::OutOfRangeError("no more batches"));
  auto k = buffer.Wait(std::move(keyed), Soon());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(k.status().message(), HasSubstr("task 4 was revoked"));
  EXPECT_EQ(buffer.Wait(std::move(any), Soon()).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(buffer.Wait(std::move(other), absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace croupier
