#include "src/consumer/prefetcher.h"

#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// A one-record batch whose int64 column holds `slot` 1 + pad times, so its size can be chosen.
Batch MakeBatch(uint64_t slot, size_t pad = 0) {
  std::vector<int64_t> values(1 + pad, static_cast<int64_t>(slot));
  std::vector<int64_t> dims = {static_cast<int64_t>(values.size())};
  ColumnData c;
  c.name = "slot";
  c.dtype = DType::kInt64;
  c.dims = dims;
  c.num_values = values.size();
  c.values = absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 8);
  return *Batch::FromColumns(1, {c});
}

uint64_t SlotOf(const Batch& b) { return b.view().columns()[0].ints()[0]; }

TEST(PrefetcherTest, DeliversInSlotOrderDespiteRandomDelays) {
  std::atomic<int> in_flight{0}, max_in_flight{0};
  Prefetcher p({.first = 3, .end = 60, .max_batches = 4}, [&](uint64_t slot) {
    int now = ++in_flight;
    int seen = max_in_flight.load();
    while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
    }
    thread_local std::mt19937 rng(slot);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    --in_flight;
    return absl::StatusOr<Batch>(MakeBatch(slot));
  });
  for (uint64_t expected = 3; expected < 60; ++expected) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->has_value());
    EXPECT_EQ(SlotOf(**b), expected);
  }
  auto end = p.Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_LE(max_in_flight.load(), 4);
}

TEST(PrefetcherTest, WindowIsBoundedInBytes) {
  std::atomic<uint64_t> fetched{0};
  // Each batch is about 80 KB; a 200 KB window holds at most 3 (the one that crosses the bound).
  Prefetcher p({.first = 0, .end = 100, .max_batches = 8, .max_bytes = 200 << 10},
               [&](uint64_t slot) {
                 ++fetched;
                 return absl::StatusOr<Batch>(MakeBatch(slot, 10000));
               });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(fetched.load(), 4u);
  EXPECT_GE(fetched.load(), 2u);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(p.Next().ok());
}

// Regression (make asan): fetches in flight counted as zero bytes, so before the first batch
// landed every worker could start one and the window overshot max_bytes; under ASan's slower
// threads WindowIsBoundedInBytes saw 6 fetches where at most 3 fit.
TEST(PrefetcherTest, FetchesGoOneAtATimeUntilTheFirstBatchLands) {
  std::atomic<int> started{0};
  absl::Notification release;
  Prefetcher p({.first = 0, .end = 20, .max_batches = 8, .max_bytes = 200 << 10},
               [&](uint64_t slot) {
                 ++started;
                 if (slot == 0) release.WaitForNotification();
                 return absl::StatusOr<Batch>(MakeBatch(slot, 10000));
               });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(started.load(), 1);
  release.Notify();
  for (int i = 0; i < 500 && started.load() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(started.load(), 3);  // 80 KB each: two held or in flight, the third crosses 200 KB
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.Next().ok());
}

TEST(PrefetcherTest, AnErrorReachesTheCallerAtItsSlotAndStays) {
  Prefetcher p({.first = 0, .end = 10, .max_batches = 3}, [&](uint64_t slot) {
    if (slot == 4) return absl::StatusOr<Batch>(absl::DataLossError("corrupt record at byte 99"));
    return absl::StatusOr<Batch>(MakeBatch(slot));
  });
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.Next().ok());
  auto bad = p.Next();
  EXPECT_TRUE(absl::IsDataLoss(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("byte 99"));
  EXPECT_TRUE(absl::IsDataLoss(p.Next().status()));
}

TEST(PrefetcherTest, CancelWakesABlockedNext) {
  std::atomic<bool> release{false};
  Prefetcher p({.first = 0, .end = 10, .max_batches = 2}, [&](uint64_t slot) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return absl::StatusOr<Batch>(MakeBatch(slot));
  });
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    p.Cancel();
    release = true;
  });
  auto b = p.Next();
  EXPECT_TRUE(absl::IsCancelled(b.status())) << b.status();
  canceller.join();
}

TEST(PrefetcherTest, AnyOrderEndsWhenEveryWorkerRunsOut) {
  std::atomic<int> handed{0};
  Prefetcher p({.first = 0, .end = UINT64_MAX, .max_batches = 3, .any_order = true},
               [&](uint64_t) {
                 int n = handed++;
                 if (n >= 20) return absl::StatusOr<Batch>(absl::OutOfRangeError("done"));
                 return absl::StatusOr<Batch>(MakeBatch(n));
               });
  std::set<uint64_t> seen;
  while (true) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (!b->has_value()) break;
    EXPECT_TRUE(seen.insert(SlotOf(**b)).second);
  }
  EXPECT_EQ(seen.size(), 20u);
}

}  // namespace
}  // namespace croupier
