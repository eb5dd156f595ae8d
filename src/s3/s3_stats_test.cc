// S3Counters and the process's counters, which processes forked from it share.
#include "src/s3/s3_stats.h"

#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace croupier::s3 {
namespace {

TEST(S3CountersTest, EachCountGoesToTheCountersItIsGivenToo) {
  S3Counters total;
  S3Counters one(&total), two(&total);
  one.AddRequest();
  one.AddBytes(10);
  two.AddRetry(/*throttle=*/true);
  two.AddRetry(/*throttle=*/false);
  two.AddFailure();
  two.AddRanges(3);
  one.AddShared(7);
  EXPECT_EQ(one.Snapshot().ToString(),
            "requests=1 bytes=10 retries=0 throttles=0 failures=0 ranges=0 shared=1 "
            "shared_bytes=7");
  EXPECT_EQ(two.Snapshot().ToString(),
            "requests=0 bytes=0 retries=2 throttles=1 failures=1 ranges=3 shared=0 "
            "shared_bytes=0");
  EXPECT_EQ(total.Snapshot().ToString(),
            "requests=1 bytes=10 retries=2 throttles=1 failures=1 ranges=3 shared=1 "
            "shared_bytes=7");
}

// A map job's worker processes are forks of its producer (through a zygote): what they ask of a
// store must show in the producer's metrics, which read these counters.
TEST(ProcessS3CountersTest, AChildForkedFromThisProcessCountsInItsCounters) {
  const S3Stats before = ProcessS3Counters().Snapshot();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const pid_t grandchild = ::fork();  // as a zygote forks a worker
    if (grandchild == 0) {
      ProcessS3Counters().AddRequest();
      ProcessS3Counters().AddBytes(100);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(grandchild, &status, 0);
    ProcessS3Counters().AddRetry(/*throttle=*/true);
    ::_exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const S3Stats after = ProcessS3Counters().Snapshot();
  EXPECT_EQ(after.requests - before.requests, 1u);
  EXPECT_EQ(after.bytes - before.bytes, 100u);
  EXPECT_EQ(after.retries - before.retries, 1u);
  EXPECT_EQ(after.throttles - before.throttles, 1u);
}

}  // namespace
}  // namespace croupier::s3
