#include "src/net/socket.h"

#include <sys/resource.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/net/net_testing.h"

namespace croupier::net {
namespace {

using ::testing::HasSubstr;

using ::croupier::testing::Within;

TEST(SocketTest, HostPortSplitsAndJoinsBracketingIpv6) {
  auto v4 = SplitHostPort("10.0.0.1:5051");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(*v4, std::make_pair(std::string("10.0.0.1"), 5051));
  auto v6 = SplitHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(*v6, std::make_pair(std::string("::1"), 0));
  EXPECT_EQ(JoinHostPort("::1", 7), "[::1]:7");
  EXPECT_EQ(JoinHostPort("localhost", 7), "localhost:7");
  for (const char* bad : {"nohost", "host:", "host:70000", ":5051"}) {
    EXPECT_EQ(SplitHostPort(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(SplitHostPort(bad).status().message(), HasSubstr(bad));
  }
}

TEST(SocketTest, BytesCrossAndAnEarlyCloseNamesThePeerAndTheCount) {
  auto [client, server] = testing::LoopbackPair();
  ASSERT_TRUE(client.valid() && server.valid());
  ASSERT_TRUE(SendAll(client.fd(), "hello", Within(absl::Seconds(5)), "server").ok());
  char got[8] = {};
  ASSERT_TRUE(RecvAll(server.fd(), got, 5, Within(absl::Seconds(5)), "client").ok());
  EXPECT_EQ(std::string(got, 5), "hello");
  ASSERT_TRUE(SendAll(client.fd(), "abc", Within(absl::Seconds(5)), "server").ok());
  client.Close();
  absl::Status cut = RecvAll(server.fd(), got, 8, Within(absl::Seconds(5)), "client 1.2.3.4:5");
  EXPECT_EQ(cut.code(), absl::StatusCode::kUnavailable) << cut;
  EXPECT_THAT(cut.message(), HasSubstr("connection closed by client 1.2.3.4:5 after 3 of 8 bytes"));
}

TEST(SocketTest, WaitsEndAtTheDeadlineOrWhenWoken) {
  auto [client, server] = testing::LoopbackPair();
  ASSERT_TRUE(client.valid() && server.valid());
  char byte;
  const absl::Time start = absl::Now();
  auto late = RecvSome(server.fd(), &byte, 1, Within(absl::Milliseconds(100)), "client");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("timed out receiving from client"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));

  auto wake = WakeEvent::Create();
  ASSERT_TRUE(wake.ok()) << wake.status();
  std::thread waker([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*wake)->Notify();
  });
  auto woken = RecvSome(server.fd(), &byte, 1,
                        IoWait{.stall = absl::Seconds(30), .wake = wake->get()}, "client");
  waker.join();
  EXPECT_EQ(woken.status().code(), absl::StatusCode::kCancelled) << woken.status();
  EXPECT_FALSE(PeerHungUpOrSpoke(server.fd()));
  client.Close();
  bool hung_up = PeerHungUp(server.fd());
  for (int i = 0; i < 250 && !hung_up; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    hung_up = PeerHungUp(server.fd());
  }
  EXPECT_TRUE(hung_up);
  EXPECT_TRUE(PeerHungUpOrSpoke(server.fd()));
}

// The soft limit rises to the hard limit; the test lowers the soft limit first and puts it back.
TEST(SocketTest, RaiseOpenFileLimitTakesTheHardLimit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 256) GTEST_SKIP() << "hard limit too low";
  rlimit lowered = saved;
  lowered.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  auto raised = RaiseOpenFileLimit();
  rlimit now{};
  ::getrlimit(RLIMIT_NOFILE, &now);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->before, 256u);
  EXPECT_GT(raised->after, 256u);
  EXPECT_EQ(now.rlim_cur, raised->after);
}

}  // namespace
}  // namespace croupier::net
