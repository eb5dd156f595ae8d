#include "src/transport/connection_pool.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Counts the connections alive, so that a test sees which ones the pool closed.
struct FakeConnection {
  explicit FakeConnection(std::atomic<int>* live) : live(live) { ++*live; }
  ~FakeConnection() { --*live; }
  bool reusable() const { return in_step; }
  bool Stale() { return stale; }

  std::atomic<int>* const live;
  bool in_step = true;
  bool stale = false;
};

class ConnectionPoolTest : public ::testing::Test {
 protected:
  // A pool of at most `max` connections whose opener fails with `open_error_` when it is set.
  std::unique_ptr<ConnectionPool<FakeConnection>> MakePool(size_t max) {
    auto cancel = net::WakeEvent::Create();
    EXPECT_TRUE(cancel.ok()) << cancel.status();
    return std::make_unique<ConnectionPool<FakeConnection>>(
        "10.0.0.5:7001", max, absl::Seconds(5), *std::move(cancel),
        [this](absl::Time,
               const net::WakeEvent*) -> absl::StatusOr<std::unique_ptr<FakeConnection>> {
          ++opens_;
          if (!open_error_.ok()) return open_error_;
          return std::make_unique<FakeConnection>(&live_);
        });
  }

  std::atomic<int> live_{0};
  std::atomic<int> opens_{0};
  absl::Status open_error_;
};

TEST_F(ConnectionPoolTest, ReusesAReleasedConnectionAndWaitsAtTheLimit) {
  auto pool = MakePool(2);
  auto a = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(opens_, 2);
  // Both busy: a third call waits for one until its deadline.
  auto c = pool->Acquire(absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("data server 10.0.0.5:7001"));
  EXPECT_THAT(c.status().message(), HasSubstr("all 2 busy"));
  // One comes back while a call waits: the waiter gets it, nothing new is opened.
  std::thread giver([&] {
    absl::SleepFor(absl::Milliseconds(20));
    pool->Release(*std::move(a));
  });
  auto d = pool->Acquire(absl::Now() + absl::Seconds(5));
  giver.join();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(opens_, 2);
  pool->Release(*std::move(b));
  pool->Release(*std::move(d));
  EXPECT_EQ(live_, 2);  // both pooled
}

TEST_F(ConnectionPoolTest, ClosesAConnectionOutOfStepAndOneGoneStale) {
  auto pool = MakePool(1);
  auto a = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->in_step = false;
  pool->Release(*std::move(a));
  EXPECT_EQ(live_, 0);  // closed, and its slot is free again
  auto b = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(b.ok()) << b.status();
  (*b)->stale = true;  // e.g. the server closed it while it was idle
  pool->Release(*std::move(b));
  EXPECT_EQ(live_, 1);
  auto c = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->stale);
  EXPECT_EQ(opens_, 3);
  EXPECT_EQ(live_, 1);
  pool->Release(*std::move(c));
}

TEST_F(ConnectionPoolTest, AFailedOpenIsReturnedWithoutOpeningAgain) {
  auto pool = MakePool(4);
  open_error_ = absl::UnauthenticatedError(
      "data server 10.0.0.5:7001: the data server refused "
      "the auth token");
  auto a = pool->Acquire(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(a.status(), open_error_);
  EXPECT_EQ(opens_, 1);
  EXPECT_EQ(pool->OpenFirst(), open_error_);
}

TEST_F(ConnectionPoolTest, CancelWakesAWaitingCallAndClosesIdleOnes) {
  auto pool = MakePool(1);
  ASSERT_TRUE(pool->OpenFirst().ok());
  auto a = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(a.ok()) << a.status();
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(20));
    pool->Cancel();
  });
  auto b = pool->Acquire(absl::Now() + absl::Seconds(30));
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(b.status())) << b.status();
  EXPECT_THAT(b.status().message(),
              HasSubstr("the data client of data server 10.0.0.5:7001 was cancelled"));
  pool->Release(*std::move(a));
  EXPECT_EQ(live_, 0);  // a cancelled pool keeps nothing
}

TEST_F(ConnectionPoolTest, RetireClosesIdleConnectionsAndBusyOnesOnRelease) {
  auto pool = MakePool(2);
  auto a = pool->Acquire(absl::Now() + absl::Seconds(1));
  auto b = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(a.ok() && b.ok());
  pool->Release(*std::move(a));
  EXPECT_EQ(live_, 2);
  pool->Retire();
  EXPECT_EQ(live_, 1);  // the idle one
  pool->Release(*std::move(b));
  EXPECT_EQ(live_, 0);  // the busy one, when its call ended
  // Later calls still work, on new connections.
  auto c = pool->Acquire(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(c.ok()) << c.status();
  pool->Release(*std::move(c));
  EXPECT_EQ(live_, 0);
}

}  // namespace
}  // namespace croupier
