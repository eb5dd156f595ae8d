#include "src/dispatcher/work_waiters.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using Wake = WorkWaiters::Wake;

// Records how one waiter was called back.
struct Outcome {
  absl::Notification called;
  std::atomic<int> calls{0};
  Wake why = Wake::kStopped;
  std::thread::id thread;
  WorkWaiters::Callback Callback() {
    return [this](Wake w) {
      why = w;
      thread = std::this_thread::get_id();
      calls.fetch_add(1);
      called.Notify();
    };
  }
};

// Every test declares its outcomes before the WorkWaiters: destroying the waiters calls back
// whoever still waits, so the outcomes must outlive them.

TEST(WorkWaitersTest, NotifyWakesEveryWaiterOnItsThread) {
  Outcome a, b;
  WorkWaiters waiters;
  waiters.Wait(absl::Now() + absl::Seconds(60), a.Callback());
  waiters.Wait(absl::Now() + absl::Seconds(60), b.Callback());
  EXPECT_EQ(waiters.waiting(), 2u);
  waiters.Notify();
  ASSERT_TRUE(a.called.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(b.called.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(a.why, Wake::kWorkMayBeAvailable);
  EXPECT_EQ(b.why, Wake::kWorkMayBeAvailable);
  EXPECT_NE(a.thread, std::this_thread::get_id());
  EXPECT_EQ(waiters.waiting(), 0u);
}

TEST(WorkWaitersTest, ANotifyWithNobodyWaitingDoesNotWakeALaterWaiter) {
  Outcome a;
  WorkWaiters waiters;
  waiters.Notify();
  const absl::Time start = absl::Now();
  waiters.Wait(start + absl::Milliseconds(200), a.Callback());
  ASSERT_TRUE(a.called.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(a.why, Wake::kDeadline);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
}

TEST(WorkWaitersTest, DeadlinesAreKeptInTheirOrderEvenWhenAnEarlierOneArrivesLater) {
  Outcome late, early;
  WorkWaiters waiters;
  const absl::Time start = absl::Now();
  waiters.Wait(start + absl::Seconds(30), late.Callback());
  // The thread now sleeps until the 30 s deadline; this one must still come on time.
  waiters.Wait(start + absl::Milliseconds(100), early.Callback());
  ASSERT_TRUE(early.called.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(early.why, Wake::kDeadline);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(late.called.HasBeenNotified());
  EXPECT_EQ(waiters.waiting(), 1u);
}

TEST(WorkWaitersTest, StopCallsEveryWaiterBackAndLaterWaitsAnswerAtOnce) {
  Outcome a, b;
  {
    WorkWaiters waiters;
    waiters.Wait(absl::InfiniteFuture(), a.Callback());
    waiters.Stop();
    EXPECT_TRUE(a.called.HasBeenNotified());  // Stop returns after the callbacks ran
    EXPECT_EQ(a.why, Wake::kStopped);
    waiters.Wait(absl::InfiniteFuture(), b.Callback());
    EXPECT_TRUE(b.called.HasBeenNotified());
    EXPECT_EQ(b.why, Wake::kStopped);
    EXPECT_EQ(b.thread, std::this_thread::get_id());
    waiters.Stop();  // idempotent
  }
  EXPECT_EQ(a.calls.load(), 1);
  EXPECT_EQ(b.calls.load(), 1);
}

TEST(WorkWaitersTest, DestructionCallsBackWhoeverStillWaits) {
  Outcome a;
  { WorkWaiters waiters; waiters.Wait(absl::InfiniteFuture(), a.Callback()); }
  EXPECT_EQ(a.calls.load(), 1);
  EXPECT_EQ(a.why, Wake::kStopped);
}

TEST(WorkWaitersTest, ACallbackMayWaitAgain) {
  Outcome second;
  std::atomic<int> first_calls{0};
  WorkWaiters waiters;
  waiters.Wait(absl::InfiniteFuture(), [&](Wake) {
    first_calls.fetch_add(1);
    waiters.Wait(absl::Now() + absl::Milliseconds(50), second.Callback());
  });
  waiters.Notify();
  ASSERT_TRUE(second.called.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(second.why, Wake::kDeadline);
  EXPECT_EQ(first_calls.load(), 1);
}

}  // namespace
}  // namespace croupier
