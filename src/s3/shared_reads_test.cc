// SharedReads: a range fetched once by the processes that share a directory, its copies checked,
// kept within the capacity, and never a reason for a read to wait for ever or fail.
#include "src/s3/shared_reads.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier::s3 {
namespace {

namespace fs = std::filesystem;
using Served = SharedReads::Served;

std::string Bytes(char seed, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

// Counts shared with the processes forked from the test.
struct SharedCounts {
  std::atomic<int> fetches{0};
  std::atomic<int> shared{0};
  std::atomic<int> wrong{0};
};

SharedCounts* MapCounts() {
  void* page = ::mmap(nullptr, sizeof(SharedCounts), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return nullptr;
  return new (page) SharedCounts();
}

class SharedReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shared_reads_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  SharedReads Make(uint64_t capacity = 1 << 20, absl::Duration wait = absl::Seconds(10)) {
    return SharedReads(SharedReads::Options{dir_, capacity, wait});
  }

  // Reads `key` (of `want`'s bytes) through `reads`, fetching `want` (after `delay`) on a miss.
  static absl::StatusOr<Served> ReadKey(SharedReads& reads, const std::string& key,
                                        const std::string& want, std::string* got,
                                        int* fetches = nullptr,
                                        absl::Duration delay = absl::ZeroDuration()) {
    got->assign(want.size(), '\0');
    return reads.Read(key, want.size(), got->data(), [&](char* dst) {
      if (fetches != nullptr) ++*fetches;
      absl::SleepFor(delay);
      want.copy(dst, want.size());
      return absl::OkStatus();
    });
  }

  // A child process that reads `key` with a fetch that never returns (it sleeps until it is
  // killed, or its parent dies): its pid once the fetch has begun (the claim taken), or -1.
  pid_t ForkAFetchThatHangs(const std::string& key) {
    int ready[2];
    if (::pipe(ready) != 0) return -1;
    const pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      SharedReads reads = Make();
      std::string got(10, '\0');
      (void)reads.Read(key, 10, got.data(), [&](char*) {
        (void)!::write(ready[1], "x", 1);
        absl::SleepFor(absl::Seconds(60));
        return absl::OkStatus();
      });
      ::_exit(1);
    }
    char x;
    const bool began = child > 0 && ::read(ready[0], &x, 1) == 1;
    ::close(ready[0]);
    ::close(ready[1]);
    return began ? child : -1;
  }

  // The names of the copies in the directory.
  std::set<std::string> Copies() const {
    std::set<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename();
      if (name.size() == 32) names.insert(name);
    }
    return names;
  }

  std::string dir_;
};

TEST_F(SharedReadsTest, ProcessesThatNeedARangeAtOnceFetchItOnce) {
  SharedCounts* counts = MapCounts();
  ASSERT_NE(counts, nullptr);
  const std::string want = Bytes('a', 100000);
  std::vector<pid_t> children;
  for (int k = 0; k < 4; ++k) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      SharedReads reads = Make();
      std::string got;
      int fetches = 0;
      // A slow fetch: the others ask while it runs, and wait for its copy.
      absl::StatusOr<Served> served = ReadKey(reads, "object\n100000\netag\n0\n100000", want, &got,
                                              &fetches, absl::Milliseconds(200));
      counts->fetches += fetches;
      if (served.ok() && *served == Served::kShared) ++counts->shared;
      if (!served.ok() || got != want) ++counts->wrong;
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(counts->fetches.load(), 1);
  EXPECT_EQ(counts->shared.load(), 3);
  EXPECT_EQ(counts->wrong.load(), 0);
  ::munmap(counts, sizeof(SharedCounts));
}

TEST_F(SharedReadsTest, ACopyThatDoesNotCheckIsFetchedAgainNeverServed) {
  SharedReads reads = Make();
  const std::string want = Bytes('b', 5000);
  std::string got;
  int fetches = 0;
  ASSERT_EQ(*ReadKey(reads, "k", want, &got, &fetches), Served::kFetched);
  ASSERT_EQ(*ReadKey(reads, "k", want, &got, &fetches), Served::kShared);
  EXPECT_EQ(got, want);
  ASSERT_EQ(Copies().size(), 1u);
  const std::string copy = absl::StrCat(dir_, "/", *Copies().begin());
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16 + 1234);
    f.put('X');  // one byte of the range changed
  }
  EXPECT_EQ(*ReadKey(reads, "k", want, &got, &fetches), Served::kFetched);
  EXPECT_EQ(got, want);
  {
    std::ofstream f(copy, std::ios::binary | std::ios::trunc);
    f << "CRSR";  // cut short, as by a crash (a copy is renamed whole, but a disk may lie)
  }
  EXPECT_EQ(*ReadKey(reads, "k", want, &got, &fetches), Served::kFetched);
  EXPECT_EQ(got, want);
  EXPECT_EQ(fetches, 3);
  EXPECT_EQ(*ReadKey(reads, "k", want, &got, &fetches), Served::kShared);
}

TEST_F(SharedReadsTest, CopiesStayWithinTheCapacityTheLeastRecentlyUsedGoingFirst) {
  // Each copy takes one page (16 + 1000 bytes); the capacity holds three.
  SharedReads reads = Make(/*capacity=*/3 * 4096);
  std::string got;
  const auto pause = [] { absl::SleepFor(absl::Milliseconds(20)); };  // coarse file times
  ASSERT_EQ(*ReadKey(reads, "a", Bytes('a', 1000), &got), Served::kFetched);
  pause();
  ASSERT_EQ(*ReadKey(reads, "b", Bytes('b', 1000), &got), Served::kFetched);
  pause();
  ASSERT_EQ(*ReadKey(reads, "c", Bytes('c', 1000), &got), Served::kFetched);
  pause();
  ASSERT_EQ(*ReadKey(reads, "a", Bytes('a', 1000), &got), Served::kShared);  // a used again
  pause();
  ASSERT_EQ(*ReadKey(reads, "d", Bytes('d', 1000), &got), Served::kFetched);  // b goes
  EXPECT_EQ(Copies().size(), 3u);
  EXPECT_EQ(*ReadKey(reads, "a", Bytes('a', 1000), &got), Served::kShared);
  EXPECT_EQ(*ReadKey(reads, "c", Bytes('c', 1000), &got), Served::kShared);
  EXPECT_EQ(*ReadKey(reads, "d", Bytes('d', 1000), &got), Served::kShared);
  EXPECT_EQ(*ReadKey(reads, "b", Bytes('b', 1000), &got), Served::kFetched);
  EXPECT_EQ(got, Bytes('b', 1000));
}

// The processes forked from the one that made it count the bytes kept together: what they keep
// between them stays within the capacity, although each kept less than it.
TEST_F(SharedReadsTest, ProcessesForkedFromItKeepWithinTheCapacityTogether) {
  SharedReads reads = Make(/*capacity=*/3 * 4096);
  for (char k = 'a'; k < 'a' + 5; ++k) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string got;
      absl::StatusOr<Served> served = ReadKey(reads, std::string(1, k), Bytes(k, 1000), &got);
      ::_exit(served.ok() && *served == Served::kFetched && got == Bytes(k, 1000) ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    absl::SleepFor(absl::Milliseconds(20));  // coarse file times
  }
  EXPECT_EQ(Copies().size(), 3u);
  std::string got;
  EXPECT_EQ(*ReadKey(reads, "e", Bytes('e', 1000), &got), Served::kShared);  // the newest stay
  EXPECT_EQ(*ReadKey(reads, "a", Bytes('a', 1000), &got), Served::kFetched);
}

TEST_F(SharedReadsTest, ARangeLargerThanTheCapacityIsFetchedAndNotKept) {
  SharedReads reads = Make(/*capacity=*/4096);
  std::string got;
  int fetches = 0;
  EXPECT_EQ(*ReadKey(reads, "big", Bytes('e', 5000), &got, &fetches), Served::kFetched);
  EXPECT_EQ(*ReadKey(reads, "big", Bytes('e', 5000), &got, &fetches), Served::kFetched);
  EXPECT_EQ(fetches, 2);
  EXPECT_EQ(got, Bytes('e', 5000));
  EXPECT_TRUE(Copies().empty());
}

TEST_F(SharedReadsTest, AFailedFetchIsReturnedAndKeepsNothing) {
  SharedReads reads = Make();
  std::string got(10, '\0');
  absl::StatusOr<Served> served = reads.Read("k", 10, got.data(), [](char*) {
    return absl::UnavailableError("s3://b/k bytes [0, 10): 503 SlowDown");
  });
  EXPECT_EQ(served.status(), absl::UnavailableError("s3://b/k bytes [0, 10): 503 SlowDown"));
  EXPECT_TRUE(Copies().empty());
  int fetches = 0;
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('f', 10), &got, &fetches), Served::kFetched);
  EXPECT_EQ(fetches, 1);
}

TEST_F(SharedReadsTest, ACopyThatCannotBeWrittenLeavesTheReadItsBytes) {
  SharedReads reads = Make();
  std::string got;
  EXPECT_EQ(*ReadKey(reads, "first", Bytes('g', 10), &got), Served::kFetched);
  fs::remove_all(dir_);  // no copy can be written now, as on a full device
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('g', 3000), &got), Served::kFetched);
  EXPECT_EQ(got, Bytes('g', 3000));
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('g', 3000), &got), Served::kFetched);
}

TEST_F(SharedReadsTest, TheFirstCopyMakesTheDirectoryOfThisUserAlone) {
  const std::string dir = absl::StrCat(dir_, "/made");
  SharedReads reads(SharedReads::Options{dir, 1 << 20, absl::Seconds(10)});
  std::string got;
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('m', 100), &got), Served::kFetched);
  EXPECT_EQ(fs::status(dir).permissions(), fs::perms::owner_all);
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('m', 100), &got), Served::kShared);
}

TEST_F(SharedReadsTest, ADirectoryThatOthersMayWriteToIsNotUsed) {
  const std::string dir = absl::StrCat(dir_, "/open");
  ASSERT_TRUE(fs::create_directory(dir));
  fs::permissions(dir, fs::perms::all);  // as if made by someone else first
  {
    // A copy of "k" planted there: whole and checking, but not the store's bytes.
    SharedReads elsewhere(SharedReads::Options{dir_ + "/ours", 1 << 20, absl::Seconds(10)});
    std::string planted;
    ASSERT_EQ(*ReadKey(elsewhere, "k", Bytes('x', 100), &planted), Served::kFetched);
    for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/ours")) {
      fs::copy(e.path(), dir + "/" + e.path().filename().string());
    }
  }
  SharedReads reads(SharedReads::Options{dir, 1 << 20, absl::Seconds(10)});
  std::string got;
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('n', 100), &got), Served::kFetched);
  EXPECT_EQ(got, Bytes('n', 100));
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('n', 100), &got), Served::kFetched);
  EXPECT_EQ(got, Bytes('n', 100));
}

// A process that dies while it fetches (SIGKILLed: a worker killed for its memory or its
// batch's time) releases its claim with it: the process waiting for the range fetches it.
TEST_F(SharedReadsTest, AProcessKilledWhileFetchingLeavesTheRangeToTheOneWaiting) {
  const pid_t child = ForkAFetchThatHangs("k");
  ASSERT_GT(child, 0);
  std::thread killer([child] {
    absl::SleepFor(absl::Milliseconds(300));
    ::kill(child, SIGKILL);
  });
  SharedReads reads = Make(1 << 20, /*wait=*/absl::Seconds(30));
  std::string got;
  int fetches = 0;
  const absl::Time start = absl::Now();
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('h', 10), &got, &fetches), Served::kFetched);
  const absl::Duration waited = absl::Now() - start;
  killer.join();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(fetches, 1);
  EXPECT_EQ(got, Bytes('h', 10));
  EXPECT_GE(waited, absl::Milliseconds(250));  // it waited for the claim...
  EXPECT_LT(waited, absl::Seconds(10));        // ...until the holder died, not its 30 s
}

// A process whose fetch is stuck (in its retries) keeps the claim: the others wait at most
// claim_wait, then fetch the range themselves.
TEST_F(SharedReadsTest, AWaitForAStuckFetchEndsAtTheClaimWait) {
  const pid_t child = ForkAFetchThatHangs("k");
  ASSERT_GT(child, 0);
  SharedReads reads = Make(1 << 20, /*wait=*/absl::Milliseconds(300));
  std::string got;
  int fetches = 0;
  const absl::Time start = absl::Now();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(*ReadKey(reads, "k", Bytes('i', 10), &got, &fetches), Served::kFetched);
  const std::string said = ::testing::internal::GetCapturedStderr();
  const absl::Duration waited = absl::Now() - start;
  EXPECT_THAT(said, ::testing::HasSubstr("another process of this producer has been fetching k "
                                         "for 300ms without an end; fetching it here"));
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_EQ(fetches, 1);
  EXPECT_EQ(got, Bytes('i', 10));
  EXPECT_GE(waited, absl::Milliseconds(250));
  EXPECT_LT(waited, absl::Seconds(10));
}

// Threads of one process are claimants of their own: two that need a range at once fetch it
// once.
TEST_F(SharedReadsTest, ThreadsOfOneProcessThatNeedARangeAtOnceFetchItOnce) {
  SharedReads reads = Make();
  const std::string want = Bytes('j', 20000);
  std::atomic<int> fetches{0}, shared{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      std::string got(want.size(), '\0');
      absl::StatusOr<Served> served = reads.Read("k", want.size(), got.data(), [&](char* dst) {
        ++fetches;
        absl::SleepFor(absl::Milliseconds(200));
        want.copy(dst, want.size());
        return absl::OkStatus();
      });
      if (served.ok() && *served == Served::kShared && got == want) ++shared;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(fetches.load(), 1);
  EXPECT_EQ(shared.load(), 3);
}

TEST_F(SharedReadsTest, TheProcessSetIsOffUntilSetAndOffAgainWithNoDirectory) {
  EXPECT_EQ(ProcessSharedReads(), nullptr);
  SetProcessSharedReads(dir_, 1 << 20);
  ASSERT_NE(ProcessSharedReads(), nullptr);
  EXPECT_EQ(ProcessSharedReads()->options().directory, dir_);
  EXPECT_EQ(ProcessSharedReads()->options().capacity, uint64_t{1} << 20);
  SetProcessSharedReads(dir_, 0);
  EXPECT_EQ(ProcessSharedReads(), nullptr);
  SetProcessSharedReads("", 1 << 20);
  EXPECT_EQ(ProcessSharedReads(), nullptr);
}

TEST(SharedReadBytesTest, ComesFromTheEnvironmentAndNamesAMalformedValue) {
  const auto env_of = [](std::optional<std::string> value) -> GetEnv {
    return [value](absl::string_view name) -> std::optional<std::string> {
      if (name == "CROUPIER_S3_SHARED_READ_BYTES") return value;
      return std::nullopt;
    };
  };
  EXPECT_EQ(*SharedReadBytesFromEnvironment(env_of(std::nullopt)), kDefaultSharedReadBytes);
  EXPECT_EQ(*SharedReadBytesFromEnvironment(env_of("0")), 0u);
  EXPECT_EQ(*SharedReadBytesFromEnvironment(env_of("1048576")), 1048576u);
  EXPECT_THAT(SharedReadBytesFromEnvironment(env_of("lots")).status().message(),
              ::testing::HasSubstr("CROUPIER_S3_SHARED_READ_BYTES='lots'"));
}

}  // namespace
}  // namespace croupier::s3
