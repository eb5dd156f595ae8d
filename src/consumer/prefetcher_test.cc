#include "src/consumer/prefetcher.h"

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
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

// Fetches in flight in a test's fetch functions, and the most there ever were.
struct InFlight {
  std::atomic<int> now{0}, most{0};
  void Start(int n) {
    const int after = now += n;
    int seen = most.load();
    while (after > seen && !most.compare_exchange_weak(seen, after)) {
    }
  }
  void End(int n) { now -= n; }
};

// A FetchGroupFn over a function that returns the whole group at once: lands every result when
// the function returns.
FetchGroupFn Vectors(
    std::function<std::vector<absl::StatusOr<Batch>>(uint64_t first, uint32_t count)> fetch) {
  return [fetch = std::move(fetch)](uint64_t first, uint32_t count, const LandFn& land) {
    std::vector<absl::StatusOr<Batch>> got = fetch(first, count);
    for (uint32_t k = 0; k < got.size(); ++k) land(k, std::move(got[k]));
  };
}

// Raises `value` to at least `n`.
void RaiseTo(std::atomic<uint32_t>& value, uint32_t n) {
  uint32_t seen = value.load();
  while (n > seen && !value.compare_exchange_weak(seen, n)) {
  }
}

TEST(PrefetcherTest, DeliversInSlotOrderDespiteRandomDelays) {
  InFlight in_flight;
  Prefetcher p({.first = 3, .end = 60, .max_batches = 4}, [&](uint64_t slot) {
    in_flight.Start(1);
    thread_local std::mt19937 rng(slot);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    in_flight.End(1);
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
  EXPECT_LE(in_flight.most.load(), 4);
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

// The epoch runs out before any batch lands (another consumer took them all, first_come): the
// worker whose fetch ran out ends while the others wait for its fetch to land, and they must be
// woken to find out too, or Next() waits forever.
TEST(PrefetcherTest, AnyOrderEndsWhenTheFirstFetchRunsOutWhileTheOthersWait) {
  absl::Notification release;
  std::atomic<int> calls{0};
  Prefetcher p({.first = 0, .end = UINT64_MAX, .max_batches = 4, .any_order = true},
               [&](uint64_t) {
                 if (calls++ == 0) release.WaitForNotification();
                 return absl::StatusOr<Batch>(absl::OutOfRangeError("the epoch is finished"));
               });
  absl::Notification ended;
  absl::StatusOr<std::optional<Batch>> got = absl::UnknownError("not returned");
  std::thread caller([&] {
    got = p.Next();
    ended.Notify();
  });
  // The other workers wait for the first fetch (one at a time until a batch has landed).
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(calls.load(), 1);
  release.Notify();
  const bool returned = ended.WaitForNotificationWithTimeout(absl::Seconds(10));
  EXPECT_TRUE(returned) << "Next() still waits: the idle workers were never woken";
  if (!returned) p.Cancel();
  caller.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
}

// Small batches go in groups: every slot is fetched exactly once (singly or in a group), in slot
// order to the caller, the window holds, and groups of more than one do happen.
TEST(PrefetcherTest, SmallBatchesAreFetchedInGroupsWithinTheWindow) {
  absl::Mutex mu;
  std::multiset<uint64_t> fetched;
  InFlight in_flight;
  std::atomic<int> groups{0};
  std::atomic<uint32_t> largest_group{0};
  Prefetcher p(
      {.first = 5, .end = 205, .max_batches = 6},
      [&](uint64_t slot) {
        in_flight.Start(1);
        {
          absl::MutexLock lock(&mu);
          fetched.insert(slot);
        }
        in_flight.End(1);
        return absl::StatusOr<Batch>(MakeBatch(slot));
      },
      Vectors([&](uint64_t first, uint32_t count) {
        in_flight.Start(static_cast<int>(count));
        ++groups;
        RaiseTo(largest_group, count);
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        std::vector<absl::StatusOr<Batch>> out;
        for (uint32_t i = 0; i < count; ++i) {
          absl::MutexLock lock(&mu);
          fetched.insert(first + i);
          out.push_back(MakeBatch(first + i));
        }
        in_flight.End(static_cast<int>(count));
        return out;
      }));
  for (uint64_t expected = 5; expected < 205; ++expected) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->has_value());
    EXPECT_EQ(SlotOf(**b), expected);
  }
  auto end = p.Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(fetched.size(), 200u);
  for (uint64_t slot = 5; slot < 205; ++slot) EXPECT_EQ(fetched.count(slot), 1u) << slot;
  EXPECT_LE(in_flight.most.load(), 6);
  EXPECT_GT(groups.load(), 0);
  EXPECT_GE(largest_group.load(), 3u);  // at least half the window per group
}

// A failed slot inside a group reaches the caller at its slot, after the good ones before it.
TEST(PrefetcherTest, AnErrorInsideAGroupReachesTheCallerAtItsSlot) {
  Prefetcher p(
      {.first = 0, .end = 40, .max_batches = 4},
      [&](uint64_t slot) { return absl::StatusOr<Batch>(MakeBatch(slot)); },
      Vectors([&](uint64_t first, uint32_t count) {
        std::vector<absl::StatusOr<Batch>> out;
        for (uint32_t i = 0; i < count; ++i) {
          if (first + i == 13) {
            out.push_back(absl::DataLossError("corrupt record of slot 13"));
          } else {
            out.push_back(MakeBatch(first + i));
          }
        }
        return out;
      }));
  for (uint64_t i = 0; i < 13; ++i) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(SlotOf(**b), i);
  }
  auto bad = p.Next();
  EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("slot 13"));
  EXPECT_TRUE(absl::IsDataLoss(p.Next().status()));
}

// A slot a group leaves UNAVAILABLE (its task not assigned yet, say) does not hold the group's
// other batches back: they are handed over, and the slot is fetched alone, with the FetchFn, once
// the caller reaches it (in the consumer, after it has taken, and so acknowledged, every batch
// before it, which may be what the assignment waits for). An UNAVAILABLE from the FetchFn itself
// is the slot's error.
TEST(PrefetcherTest, ASlotAGroupCouldNotFetchIsFetchedAloneWhenTheCallerReachesIt) {
  std::atomic<uint64_t> taken{0};
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> single;  // (slot, batches taken when it was asked)
  Prefetcher p(
      {.first = 0, .end = 40, .max_batches = 32},
      [&](uint64_t slot) -> absl::StatusOr<Batch> {
        {
          absl::MutexLock lock(&mu);
          single.emplace_back(slot, taken.load());
        }
        if (slot == 30) return absl::UnavailableError("slot 30 is still not there");
        return MakeBatch(slot);
      },
      Vectors([&](uint64_t first, uint32_t count) {
        std::vector<absl::StatusOr<Batch>> out;
        for (uint32_t i = 0; i < count; ++i) {
          const uint64_t slot = first + i;
          if (slot == 10 || slot == 11 || slot == 30) {
            out.push_back(absl::UnavailableError("not assigned yet"));
          } else {
            out.push_back(MakeBatch(slot));
          }
        }
        return out;
      }));
  for (uint64_t expected = 0; expected < 30; ++expected) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << expected << ": " << b.status();
    ASSERT_TRUE(b->has_value());
    ASSERT_EQ(SlotOf(**b), expected);
    ++taken;
  }
  auto bad = p.Next();
  EXPECT_TRUE(absl::IsUnavailable(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("slot 30 is still not there"));
  absl::MutexLock lock(&mu);
  // The first batch goes alone (its size is not known yet); then 10, 11 and 30 were fetched
  // alone, each once the caller had taken everything before it.
  std::vector<std::pair<uint64_t, uint64_t>> deferred;
  for (const auto& [slot, when] : single) {
    if (slot != 0) deferred.emplace_back(slot, when);
  }
  EXPECT_THAT(deferred, ::testing::ElementsAre(std::make_pair(10u, 10u), std::make_pair(11u, 11u),
                                               std::make_pair(30u, 30u)));
}

// Batches above group_below_bytes go one by one; the group function is never called.
TEST(PrefetcherTest, LargeBatchesAreNotGrouped) {
  std::atomic<int> grouped{0};
  Prefetcher p(
      {.first = 0, .end = 30, .max_batches = 4, .group_below_bytes = 1000},
      [&](uint64_t slot) { return absl::StatusOr<Batch>(MakeBatch(slot, 500)); },
      Vectors([&](uint64_t first, uint32_t count) {
        ++grouped;
        std::vector<absl::StatusOr<Batch>> out;
        for (uint32_t i = 0; i < count; ++i) out.push_back(MakeBatch(first + i, 500));
        return out;
      }));
  for (uint64_t i = 0; i < 30; ++i) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(SlotOf(**b), i);
  }
  EXPECT_EQ(grouped.load(), 0);
}

// The automatic window (max_batches 0): 4 batches, and up to 64 once the batches are small enough
// to go in groups; large batches keep 4.
TEST(PrefetcherTest, TheAutomaticWindowGrowsForSmallBatchesOnly) {
  for (const bool small : {true, false}) {
    SCOPED_TRACE(small ? "small batches" : "large batches");
    const size_t pad = small ? 0 : 500;  // about 200 bytes, or about 4 KB
    InFlight in_flight;
    std::atomic<uint32_t> largest_group{0};
    Prefetcher p(
        {.first = 0, .end = 400, .group_below_bytes = 1000},
        [&](uint64_t slot) {
          in_flight.Start(1);
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          in_flight.End(1);
          return absl::StatusOr<Batch>(MakeBatch(slot, pad));
        },
        Vectors([&](uint64_t first, uint32_t count) {
          in_flight.Start(static_cast<int>(count));
          RaiseTo(largest_group, count);
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          std::vector<absl::StatusOr<Batch>> out;
          for (uint32_t i = 0; i < count; ++i) out.push_back(MakeBatch(first + i, pad));
          in_flight.End(static_cast<int>(count));
          return out;
        }));
    for (uint64_t expected = 0; expected < 400; ++expected) {
      auto b = p.Next();
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_TRUE(b->has_value());
      ASSERT_EQ(SlotOf(**b), expected);
    }
    if (small) {
      EXPECT_LE(in_flight.most.load(), static_cast<int>(Prefetcher::kAutoMaxBatches));
      // Groups of at least half the grown window, far past the 4 of a fixed default.
      EXPECT_GE(largest_group.load(), Prefetcher::kAutoMaxBatches / 2);
    } else {
      EXPECT_LE(in_flight.most.load(), static_cast<int>(Prefetcher::kAutoBatches));
      EXPECT_EQ(largest_group.load(), 0u);
    }
  }
}

// A group fetch that takes `fetch` and records the thread it ran on.
struct SlowGroups {
  absl::Duration fetch;
  absl::Mutex mu;
  std::vector<std::thread::id> threads;
  std::vector<absl::StatusOr<Batch>> Fetch(uint64_t first, uint32_t count) {
    absl::SleepFor(fetch);
    {
      absl::MutexLock lock(&mu);
      threads.push_back(std::this_thread::get_id());
    }
    std::vector<absl::StatusOr<Batch>> out;
    for (uint32_t i = 0; i < count; ++i) out.push_back(MakeBatch(first + i));
    return out;
  }
};

// A caller slower than a group's round trip finds its batches ready: the workers fetch ahead
// while it works.
TEST(PrefetcherTest, ASlowCallerIsPrefetchedFor) {
  SlowGroups groups{absl::Milliseconds(2)};
  Prefetcher p(
      {.first = 0, .end = 60, .max_batches = 4},
      [&](uint64_t slot) { return absl::StatusOr<Batch>(MakeBatch(slot)); },
      Vectors([&](uint64_t first, uint32_t count) { return groups.Fetch(first, count); }));
  int waited = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    const absl::Time start = absl::Now();
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(SlotOf(**b), i);
    if (i >= 10 && absl::Now() - start > absl::Milliseconds(2)) ++waited;
    absl::SleepFor(absl::Milliseconds(6));  // the trainer's step
  }
  EXPECT_LE(waited, 5);  // of 50: the fetches ran ahead
  absl::MutexLock lock(&groups.mu);
  int on_caller = 0;
  for (auto id : groups.threads) on_caller += id == std::this_thread::get_id();
  EXPECT_LE(on_caller, 3) << "of " << groups.threads.size();
}

// A caller that takes batches as fast as they come fetches the groups itself: no hand-over
// between threads.
TEST(PrefetcherTest, AFastCallerFetchesTheGroupsItself) {
  SlowGroups groups{absl::Microseconds(200)};
  Prefetcher p(
      {.first = 0, .end = 400, .max_batches = 4},
      [&](uint64_t slot) { return absl::StatusOr<Batch>(MakeBatch(slot)); },
      Vectors([&](uint64_t first, uint32_t count) { return groups.Fetch(first, count); }));
  for (uint64_t i = 0; i < 400; ++i) {
    auto b = p.Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(SlotOf(**b), i);
  }
  absl::MutexLock lock(&groups.mu);
  size_t on_caller = 0;
  for (auto id : groups.threads) on_caller += id == std::this_thread::get_id();
  EXPECT_GE(on_caller, groups.threads.size() * 3 / 4) << "of " << groups.threads.size();
}

// Producers slower than the caller: each batch of a group reaches the caller as soon as it has
// landed, not when its whole group has (a group held whole made a rank wait for its whole window,
// 16 s for its first step in a probe with the default window).
TEST(PrefetcherTest, EachBatchOfAGroupIsHandedOverAsSoonAsItLands) {
  constexpr absl::Duration kPerBatch = absl::Milliseconds(40);
  absl::Mutex mu;
  std::map<uint64_t, absl::Time> landed;
  uint32_t largest_group = 0;
  Prefetcher p(
      {.first = 0, .end = 40, .max_batches = 16},
      [&](uint64_t slot) {
        {
          absl::MutexLock lock(&mu);
          landed[slot] = absl::Now();
        }
        return absl::StatusOr<Batch>(MakeBatch(slot));
      },
      [&](uint64_t first, uint32_t count, const LandFn& land) {
        {
          absl::MutexLock lock(&mu);
          largest_group = std::max(largest_group, count);
        }
        for (uint32_t k = 0; k < count; ++k) {
          absl::SleepFor(kPerBatch);  // the producer makes the next batch
          {
            absl::MutexLock lock(&mu);
            landed[first + k] = absl::Now();
          }
          land(k, MakeBatch(first + k));
        }
      });
  absl::Duration longest = absl::ZeroDuration();
  absl::Time asked = absl::Now();
  for (uint64_t i = 0; i < 40; ++i) {
    auto b = p.Next();
    const absl::Time taken = absl::Now();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(SlotOf(**b), i);
    absl::MutexLock lock(&mu);
    // How long it waited once it had landed and the caller had asked for it.
    longest = std::max(longest, taken - std::max(landed.at(i), asked));
    asked = taken;  // the caller asks for the next one at once
  }
  absl::MutexLock lock(&mu);
  EXPECT_GE(largest_group, 8u);  // groups of at least half the window: a whole one takes 320 ms
  EXPECT_LT(longest, absl::Milliseconds(150)) << "a batch waited for the rest of its group";
}

// A batch that lands at once in a group whose next batches are slow (a producer that had one made
// ahead): the caller takes it without waiting for the rest of its group (which lands only once
// the caller has taken it). The group starts as soon as the first batch's size is known, so its
// first batch has landed before the caller asks; a landing while the caller waits, within 1 ms
// of its group's start (kPromptLanding's timed wait), is not made to happen here.
TEST(PrefetcherTest, ABatchThatLandsEarlyIsTakenWithoutWaitingForTheRestOfItsGroup) {
  absl::Notification first_taken;
  Prefetcher p(
      // More slots than a group, so that no idle worker ends (and wakes the caller) meanwhile.
      {.first = 0, .end = 200, .max_batches = 16},
      [&](uint64_t slot) { return absl::StatusOr<Batch>(MakeBatch(slot)); },
      [&](uint64_t first, uint32_t count, const LandFn& land) {
        land(0, MakeBatch(first));  // at once
        // The next ones only once the caller has taken the first (or after 5 s).
        first_taken.WaitForNotificationWithTimeout(absl::Seconds(5));
        for (uint32_t k = 1; k < count; ++k) land(k, MakeBatch(first + k));
      });
  ASSERT_EQ(SlotOf(**p.Next()), 0u);  // fetched alone: its size is not known before
  const absl::Time start = absl::Now();
  auto second = p.Next();  // the group's first batch
  const absl::Duration took = absl::Now() - start;
  first_taken.Notify();
  ASSERT_TRUE(second.ok() && second->has_value()) << second.status();
  EXPECT_EQ(SlotOf(**second), 1u);
  EXPECT_LT(took, absl::Seconds(1)) << "the batch waited for the rest of its group";
  for (uint64_t i = 2; i < 200; ++i) ASSERT_EQ(SlotOf(**p.Next()), i);
}

// Destroying the prefetcher while another thread waits in Next(): that Next returns CANCELLED
// before the members it uses go away (the sanitizer builds catch a use after free).
TEST(PrefetcherTest, DestructionWaitsForANextInProgress) {
  auto p = std::make_unique<Prefetcher>(
      Prefetcher::Options{.first = 0, .end = 10, .max_batches = 2}, [&](uint64_t slot) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return absl::StatusOr<Batch>(MakeBatch(slot));
      });
  absl::Status got;
  Prefetcher* raw = p.get();
  std::thread caller([&got, raw] { got = raw->Next().status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  p.reset();
  caller.join();
  EXPECT_TRUE(absl::IsCancelled(got)) << got;
}

}  // namespace
}  // namespace croupier
