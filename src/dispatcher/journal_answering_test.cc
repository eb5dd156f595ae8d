// JournalWriter::WhenSynced (journal_answering.cc): callers answered from the writer's own
// threads, once durable, spaced by the commit interval, by their deadlines, and each exactly once.
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using testing::ScopedTempDir;

journal::Update AnEntry(uint64_t id) {
  return testing::ProducerRegistered(id, "127.0.0.1:" + std::to_string(7000 + id % 1000));
}

// Counts answers and waits for a number of them, bounded.
class Answers {
 public:
  JournalWriter::SyncedCallback Expect(uint64_t ticket, const testing::CrashEnv* env,
                                       const std::string* path) {
    return [this, ticket, env, path](absl::Status status) {
      absl::MutexLock lock(&mu_);
      statuses_.push_back(status);
      // An OK answer never comes before the crash image holds the caller's ticket.
      if (status.ok() && env != nullptr && env->DurableBytes(*path) < ticket) ++early_;
    };
  }
  // True once `n` answers came, false if 20 s pass first.
  bool WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return statuses_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
  }
  size_t count() const {
    absl::MutexLock lock(&mu_);
    return statuses_.size();
  }
  std::vector<absl::Status> statuses() const {
    absl::MutexLock lock(&mu_);
    return statuses_;
  }
  int early() const {
    absl::MutexLock lock(&mu_);
    return early_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<absl::Status> statuses_ ABSL_GUARDED_BY(mu_);
  int early_ ABSL_GUARDED_BY(mu_) = 0;
};

// Many callers, none of whose threads waits: each is answered once, only after a sync covered
// its entry, and the syncs are shared.
TEST(JournalAnsweringTest, CallersAreAnsweredOnceDurableAndShareSyncs) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env(absl::Milliseconds(2));  // a disk's fdatasync
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  Answers answers;
  constexpr int kThreads = 4, kEntries = 50;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEntries; ++i) {
        uint64_t ticket;
        {
          absl::MutexLock lock(&mu);
          ASSERT_TRUE(w.Append(AnEntry(t * kEntries + i + 1)).ok());
          ticket = w.Publish();
        }
        w.WhenSynced(ticket, absl::Now() + absl::Seconds(20), answers.Expect(ticket, &env, &path));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  constexpr size_t kCalls = kThreads * kEntries;
  ASSERT_TRUE(answers.WaitFor(kCalls)) << answers.count() << " of " << kCalls << " answered";
  for (const absl::Status& s : answers.statuses()) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(answers.early(), 0);
  std::printf("%zu callers: %llu fdatasyncs\n", kCalls,
              static_cast<unsigned long long>(w.syncs()));
  EXPECT_LE(w.syncs(), kCalls / 2);
  EXPECT_EQ(env.DurableBytes(path), w.published());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(answers.count(), kCalls);  // none twice
}

// With a commit interval, a caller that comes just after a sync waits for the interval, and the
// callers of that interval share one sync.
TEST(JournalAnsweringTest, TheCommitIntervalSpacesTheSyncs) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {.commit_interval = absl::Seconds(1)});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  Answers answers;
  ASSERT_TRUE(w.Append(AnEntry(1)).ok());
  uint64_t ticket = w.Publish();
  w.WhenSynced(ticket, absl::InfiniteFuture(), answers.Expect(ticket, &env, &path));
  ASSERT_TRUE(answers.WaitFor(1));  // no sync before it: at once
  const uint64_t syncs = w.syncs();
  for (uint64_t id = 2; id <= 6; ++id) {
    ASSERT_TRUE(w.Append(AnEntry(id)).ok());
    ticket = w.Publish();
    w.WhenSynced(ticket, absl::InfiniteFuture(), answers.Expect(ticket, &env, &path));
  }
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(answers.count(), 1u) << "answered within the commit interval";
  ASSERT_TRUE(answers.WaitFor(6));
  for (const absl::Status& s : answers.statuses()) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(answers.early(), 0);
  EXPECT_EQ(w.syncs(), syncs + 1);
}

// A disk whose fdatasync hangs (full, failing): the caller is answered by its deadline, naming
// the journal, while the sync still hangs; once it ends, later callers are answered.
TEST(JournalAnsweringTest, ADeadlinePassesWhileTheFdatasyncHangs) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  env.set_hold_syncs(true);
  Answers answers;
  ASSERT_TRUE(w.Append(AnEntry(1)).ok());
  const uint64_t ticket = w.Publish();
  const absl::Time before = absl::Now();
  w.WhenSynced(ticket, before + absl::Milliseconds(100), answers.Expect(ticket, &env, &path));
  ASSERT_TRUE(answers.WaitFor(1));
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  const absl::Status waited = answers.statuses()[0];
  EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  EXPECT_THAT(waited.message(),
              HasSubstr("journal " + path + " to be synced up to byte " + std::to_string(ticket)));
  EXPECT_THAT(waited.message(), HasSubstr("an fdatasync is still in progress"));
  EXPECT_GE(env.syncs_started(), 1u);
  env.set_hold_syncs(false);
  w.WhenSynced(ticket, absl::Now() + absl::Seconds(20), answers.Expect(ticket, &env, &path));
  ASSERT_TRUE(answers.WaitFor(2));
  EXPECT_TRUE(answers.statuses()[1].ok()) << answers.statuses()[1];
}

// A failed sync fails the callers it was for and every later one, at once.
TEST(JournalAnsweringTest, AFailedSyncFailsItsCallersAndEveryLaterOne) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  env.set_fail_sync(true);
  Answers answers;
  ASSERT_TRUE(w.Append(AnEntry(1)).ok());
  uint64_t ticket = w.Publish();
  w.WhenSynced(ticket, absl::Now() + absl::Seconds(20), answers.Expect(ticket, &env, &path));
  ASSERT_TRUE(answers.WaitFor(1));
  const absl::Status failed = answers.statuses()[0];
  EXPECT_TRUE(absl::IsUnavailable(failed)) << failed;
  EXPECT_THAT(failed.message(), HasSubstr("journal " + path + " is unusable until a restart"));
  env.set_fail_sync(false);
  std::atomic<bool> at_once{false};
  w.WhenSynced(ticket, absl::Now() + absl::Seconds(20), [&](absl::Status s) {
    at_once = true;
    EXPECT_EQ(s, failed);
  });
  EXPECT_TRUE(at_once) << "a broken writer answers on the caller's thread";
}

// Stopping answers every caller still waiting, exactly once, and later callers at once; an
// already durable ticket stays OK.
TEST(JournalAnsweringTest, StopAnsweringAnswersEveryCallerOnce) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  ASSERT_TRUE(w.Append(AnEntry(1)).ok());
  const uint64_t durable = w.Publish();
  ASSERT_TRUE(w.WaitSynced(durable, absl::InfiniteFuture()).ok());
  env.set_hold_syncs(true);
  const uint64_t started = env.syncs_started();
  Answers answers;
  std::vector<uint64_t> tickets;
  for (uint64_t id = 2; id <= 4; ++id) {
    ASSERT_TRUE(w.Append(AnEntry(id)).ok());
    tickets.push_back(w.Publish());
  }
  for (uint64_t ticket : tickets) {
    w.WhenSynced(ticket, absl::InfiniteFuture(), answers.Expect(ticket, &env, &path));
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (env.syncs_started() == started && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // Appended after the held sync began: not covered by it.
  ASSERT_TRUE(w.Append(AnEntry(5)).ok());
  const uint64_t late = w.Publish();
  w.WhenSynced(late, absl::InfiniteFuture(), answers.Expect(late, &env, &path));
  std::thread stopper([&] { w.StopAnswering(); });
  absl::SleepFor(absl::Milliseconds(50));
  env.set_hold_syncs(false);  // the fdatasync in progress ends; the stop waits for it
  stopper.join();
  ASSERT_EQ(answers.count(), 4u);
  const std::vector<absl::Status> statuses = answers.statuses();
  int ok = 0, closed = 0;
  for (const absl::Status& s : statuses) {
    if (s.ok()) {
      ++ok;
    } else {
      EXPECT_TRUE(absl::IsUnavailable(s)) << s;
      EXPECT_THAT(s.message(), HasSubstr(path));
      ++closed;
    }
  }
  EXPECT_EQ(ok, 3) << "the held sync covered the first three";
  EXPECT_EQ(closed, 1);
  EXPECT_EQ(answers.early(), 0);
  // Later: a durable ticket is OK at once, another one UNAVAILABLE at once.
  std::vector<absl::Status> later;
  w.WhenSynced(durable, absl::InfiniteFuture(), [&](absl::Status s) { later.push_back(s); });
  ASSERT_TRUE(w.Append(AnEntry(6)).ok());
  w.WhenSynced(w.Publish(), absl::InfiniteFuture(), [&](absl::Status s) { later.push_back(s); });
  ASSERT_EQ(later.size(), 2u);
  EXPECT_TRUE(later[0].ok()) << later[0];
  EXPECT_TRUE(absl::IsUnavailable(later[1])) << later[1];
  EXPECT_THAT(later[1].message(), HasSubstr("is closing"));
}

// Without syncing (tests, benchmarks), every caller is answered at once, on its own thread.
TEST(JournalAnsweringTest, WithoutSyncingCallersAreAnsweredAtOnce) {
  ScopedTempDir tmp;
  auto writer = JournalWriter::Open(*Env::Default(), tmp.Join(kJournalFileName), 0,
                                    {.sync = false, .commit_interval = absl::Seconds(10)});
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append(AnEntry(1)).ok());
  bool answered = false;
  (*writer)->WhenSynced((*writer)->Publish(), absl::InfiniteFuture(), [&](absl::Status s) {
    answered = true;
    EXPECT_TRUE(s.ok()) << s;
  });
  EXPECT_TRUE(answered);
}

}  // namespace
}  // namespace croupier
