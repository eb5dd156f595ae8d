#include "src/dispatcher/journal.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/crc32c.h"
#include "src/common/testing.h"
#include "src/dispatcher/dispatcher_state.h"
#include "src/dispatcher/journal_upgrade.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using testing::FaultyEnv;
using ::testing::HasSubstr;
using testing::ScopedTempDir;

// A small but real history: a job, a producer, tasks, a consumer and its positions.
std::vector<journal::Update> History() {
  using namespace ::croupier::testing;
  std::vector<journal::Update> u;
  u.push_back(JobCreated(FakeJob("train", 16, 2, 4, 2)));
  u.push_back(ProducerRegistered(1, "127.0.0.1:7001"));
  u.push_back(TaskAssigned(MakeTask(1, "train", 0, 0, 4), 1));
  u.push_back(TaskAssigned(MakeTask(2, "train", 0, 4, 4), 1));
  u.push_back(TaskFinished(1, 1));
  u.push_back(ProducerRegistered(2, "127.0.0.1:7002"));
  u.push_back(ProducerRemoved(1));
  u.push_back(TaskAssigned(MakeTask(3, "train", 0, 4, 4), 2));
  return u;
}

// Appends `updates` to a new journal at `path`; returns where each entry starts, then the end.
std::vector<uint64_t> WriteJournal(const std::string& path,
                                   const std::vector<journal::Update>& updates, bool sync = false) {
  auto writer = JournalWriter::Open(*Env::Default(), path, 0, {.sync = sync});
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::vector<uint64_t> offsets;
  for (const auto& u : updates) {
    offsets.push_back((*writer)->size());
    EXPECT_TRUE((*writer)->Append(u).ok());
  }
  offsets.push_back((*writer)->size());
  return offsets;
}

std::string ReadAll(const std::string& path) { return *ReadFileToString(*Env::Default(), path); }
void WriteAll(const std::string& path, const std::string& contents) {
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(path, contents).ok());
}

// Replays `path`, collecting the updates.
absl::StatusOr<JournalReplay> Replay(const std::string& path, std::vector<std::string>* got) {
  return ReadJournal(*Env::Default(), path, [&](const journal::Update& u, uint64_t) {
    got->push_back(u.SerializeAsString());
    return absl::OkStatus();
  });
}

TEST(JournalTest, RoundTripRebuildsTheState) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<journal::Update> history = History();
  const std::vector<uint64_t> offsets = WriteJournal(path, history, /*sync=*/true);
  EXPECT_EQ(offsets.front(), kJournalHeaderBytes);
  EXPECT_EQ(ReadAll(path).substr(0, 8), "CRPJRNL\n");

  DispatcherState want, got;
  for (const auto& u : history) ASSERT_TRUE(want.Apply(u).ok());
  std::vector<uint64_t> seen;
  auto replay = ReadJournal(*Env::Default(), path, [&](const journal::Update& u, uint64_t at) {
    seen.push_back(at);
    return got.Apply(u);
  });
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->entries, history.size());
  EXPECT_EQ(replay->valid_bytes, offsets.back());
  EXPECT_EQ(replay->file_bytes, offsets.back());
  EXPECT_TRUE(replay->torn.empty());
  EXPECT_EQ(seen, std::vector<uint64_t>(offsets.begin(), offsets.end() - 1));
  EXPECT_EQ(got.DebugString(), want.DebugString());
}

TEST(JournalTest, OpenJournalReplaysThenAppendsAfterIt) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<journal::Update> history = History();
  for (size_t i = 0; i < history.size(); ++i) {
    // Reopen before each append: what a dispatcher restarting after every change does.
    DispatcherState state;
    auto opened = OpenJournal(*Env::Default(), path,
                              [&](const journal::Update& u, uint64_t) { return state.Apply(u); });
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(opened->replay.entries, i);
    ASSERT_TRUE(opened->writer->Append(history[i]).ok());
  }
  std::vector<std::string> got;
  ASSERT_TRUE(Replay(path, &got).ok());
  EXPECT_EQ(got.size(), history.size());
}

TEST(JournalTest, EmptyFileIsAnEmptyJournal) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  WriteAll(path, "");
  std::vector<std::string> got;
  auto replay = Replay(path, &got);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->entries, 0u);
  EXPECT_EQ(replay->valid_bytes, 0u);
  EXPECT_TRUE(replay->torn.empty());
  auto opened =
      OpenJournal(*Env::Default(), path, [](auto&, uint64_t) { return absl::OkStatus(); });
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(ReadAll(path), JournalHeader());
  // A missing file is created the same way.
  const std::string fresh = tmp.Join("fresh");
  ASSERT_TRUE(
      OpenJournal(*Env::Default(), fresh, [](auto&, uint64_t) { return absl::OkStatus(); }).ok());
  EXPECT_EQ(ReadAll(fresh), JournalHeader());
}

TEST(JournalTest, TornTailOfEveryLengthIsCutAndNeverApplied) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<journal::Update> history = History();
  const std::vector<uint64_t> offsets = WriteJournal(path, history);
  const std::string full = ReadAll(path);
  const uint64_t last = offsets[offsets.size() - 2];
  for (uint64_t cut = last + 1; cut < full.size(); ++cut) {
    SCOPED_TRACE(absl::StrCat("file cut at byte ", cut));
    WriteAll(path, full.substr(0, cut));
    std::vector<std::string> got;
    auto replay = Replay(path, &got);
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(got.size(), history.size() - 1);
    EXPECT_EQ(replay->valid_bytes, last);
    EXPECT_FALSE(replay->torn.empty());
    // Opening cuts the torn entry away; what is appended next replays.
    auto opened =
        OpenJournal(*Env::Default(), path, [](auto&, uint64_t) { return absl::OkStatus(); });
    ASSERT_TRUE(opened.ok()) << opened.status();
    ASSERT_TRUE(opened->writer->Append(history.back()).ok());
    opened->writer.reset();
    EXPECT_EQ(ReadAll(path), full);
  }
}

TEST(JournalTest, GarbageOrBadChecksumAtTheEndIsATornTail) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<journal::Update> history = History();
  const std::vector<uint64_t> offsets = WriteJournal(path, history);
  const std::string full = ReadAll(path);
  for (int n = 1; n <= 64; ++n) {
    SCOPED_TRACE(absl::StrCat(n, " garbage bytes"));
    WriteAll(path, full + std::string(n, static_cast<char>(0xA5 + n)));
    std::vector<std::string> got;
    auto replay = Replay(path, &got);
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(got.size(), history.size());
    EXPECT_EQ(replay->valid_bytes, full.size());
  }
  // Zeros where the last entry's blocks never reached the disk: its checksum fails.
  const uint64_t last = offsets[offsets.size() - 2];
  std::string zeroed = full;
  for (uint64_t i = last + 12; i < zeroed.size(); ++i) zeroed[i] = 0;
  WriteAll(path, zeroed);
  std::vector<std::string> got;
  auto replay = Replay(path, &got);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(got.size(), history.size() - 1);
  EXPECT_THAT(replay->torn, HasSubstr("checksum"));
}

TEST(JournalTest, TornHeaderStartsAnEmptyJournal) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  for (uint64_t n = 1; n < kJournalHeaderBytes; ++n) {
    WriteAll(path, JournalHeader().substr(0, n));
    auto opened =
        OpenJournal(*Env::Default(), path, [](auto&, uint64_t) { return absl::OkStatus(); });
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_THAT(opened->replay.torn, HasSubstr("header cut short"));
    EXPECT_EQ(opened->replay.entries, 0u);
    opened->writer.reset();
    EXPECT_EQ(ReadAll(path), JournalHeader());
  }
}

TEST(JournalTest, CorruptionFollowedByValidDataIsDataLossNamingTheOffset) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<journal::Update> history = History();
  const std::vector<uint64_t> offsets = WriteJournal(path, history);
  const std::string full = ReadAll(path);
  // Every byte of the second entry: its length, the length's checksum, the payload, its checksum.
  for (uint64_t i = offsets[1]; i < offsets[2]; ++i) {
    SCOPED_TRACE(absl::StrCat("byte ", i, " flipped"));
    std::string bad = full;
    bad[i] ^= 0x40;
    WriteAll(path, bad);
    std::vector<std::string> got;
    auto replay = Replay(path, &got);
    EXPECT_TRUE(absl::IsDataLoss(replay.status())) << replay.status();
    EXPECT_THAT(replay.status().message(), HasSubstr(absl::StrCat("corrupt journal entry at byte ",
                                                                  offsets[1], " of ", path)));
    EXPECT_THAT(replay.status().message(), HasSubstr("followed by a valid entry"));
    // OpenJournal refuses too: it never cuts away valid entries.
    EXPECT_TRUE(absl::IsDataLoss(OpenJournal(*Env::Default(), path, [](auto&, uint64_t) {
                                   return absl::OkStatus();
                                 }).status()));
  }
}

TEST(JournalTest, VersionMismatchNamesBothVersions) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  WriteJournal(path, History());
  const std::string written = ReadAll(path);
  // A later version, and one older than the oldest this dispatcher upgrades.
  for (const uint32_t version : {uint32_t{kJournalVersion} + 1, kOldestJournalVersion - 1}) {
    std::string other = written;
    std::memcpy(other.data() + 8, &version, 4);
    const uint32_t crc = crc32c::Mask(crc32c::Value(other.data(), 12));
    std::memcpy(other.data() + 12, &crc, 4);
    WriteAll(path, other);
    std::vector<std::string> got;
    auto replay = Replay(path, &got);
    EXPECT_TRUE(absl::IsFailedPrecondition(replay.status())) << replay.status();
    EXPECT_THAT(replay.status().message(),
                HasSubstr(absl::StrCat("journal ", path, " has version ", version,
                                       ", but this dispatcher reads versions ",
                                       kOldestJournalVersion, " to ", kJournalVersion)));
    EXPECT_TRUE(got.empty());
  }
}

TEST(JournalTest, NotAJournalAndBadHeaderAreDataLoss) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  std::vector<std::string> got;
  WriteAll(path, "this is not a journal at all");
  auto replay = Replay(path, &got);
  EXPECT_TRUE(absl::IsDataLoss(replay.status())) << replay.status();
  EXPECT_THAT(replay.status().message(), HasSubstr(path + " is not a croupier journal"));
  WriteAll(path, "xyz");
  EXPECT_TRUE(absl::IsDataLoss(Replay(path, &got).status()));
  std::string header = JournalHeader();
  header[14] ^= 1;
  WriteAll(path, header);
  replay = Replay(path, &got);
  EXPECT_TRUE(absl::IsDataLoss(replay.status())) << replay.status();
  EXPECT_THAT(replay.status().message(), HasSubstr("at byte 0 of " + path));
}

TEST(JournalTest, RefusedOrUnparsableEntryIsDataLoss) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<uint64_t> offsets = WriteJournal(path, History());
  auto replay = ReadJournal(*Env::Default(), path, [&](const journal::Update&, uint64_t at) {
    return at == offsets[2] ? absl::FailedPreconditionError("producer 9 is unknown")
                            : absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsDataLoss(replay.status())) << replay.status();
  EXPECT_THAT(replay.status().message(),
              HasSubstr(absl::StrCat("journal entry at byte ", offsets[2], " of ", path)));
  EXPECT_THAT(replay.status().message(), HasSubstr("producer 9 is unknown"));

  // A well-framed entry whose payload is not an Update.
  WriteAll(path, JournalHeader() + JournalEntry("\xff\xff\xff"));
  std::vector<std::string> got;
  replay = Replay(path, &got);
  EXPECT_TRUE(absl::IsDataLoss(replay.status())) << replay.status();
  EXPECT_THAT(replay.status().message(), HasSubstr("is not a journal update"));
}

TEST(JournalTest, FailedWriteLeavesNoPartialEntry) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  FaultyEnv env;
  const std::vector<journal::Update> history = History();
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append(history[0]).ok());
  env.fail_append = true;
  absl::Status s = (*writer)->Append(history[1]);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("cannot write its journal " + path));
  EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
  // Cut back: the next append (the disk has room again) follows the first entry directly.
  env.fail_append = false;
  ASSERT_TRUE((*writer)->Append(history[1]).ok());
  std::vector<std::string> got;
  auto replay = Replay(path, &got);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(got.size(), 2u);
  EXPECT_TRUE(replay->torn.empty());
}

TEST(JournalTest, FailedSyncOrCutBreaksTheWriter) {
  ScopedTempDir tmp;
  FaultyEnv env;
  const std::vector<journal::Update> history = History();
  {
    auto writer = JournalWriter::Open(env, tmp.Join("a"), 0, {});
    ASSERT_TRUE(writer.ok());
    env.fail_sync = true;
    ASSERT_TRUE((*writer)->Append(history[0]).ok());  // written only
    absl::Status s = (*writer)->Sync();
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("journal " + tmp.Join("a") + " is unusable"));
    EXPECT_THAT(s.message(),
                HasSubstr("syncing it up to byte " + std::to_string((*writer)->size())));
    env.fail_sync = false;
    EXPECT_EQ((*writer)->Append(history[0]), s);  // stays broken
    EXPECT_EQ((*writer)->Sync(), s);
  }
  {
    auto writer = JournalWriter::Open(env, tmp.Join("b"), 0, {});
    ASSERT_TRUE(writer.ok());
    env.fail_append = env.fail_truncate = true;
    EXPECT_TRUE(absl::IsUnavailable((*writer)->Append(history[0])));
    env.fail_append = env.fail_truncate = false;
    absl::Status s = (*writer)->Append(history[0]);
    EXPECT_THAT(s.message(), HasSubstr("could not be cut back"));
  }
}

TEST(JournalTest, DropLastRemovesTheLastEntry) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  const std::vector<journal::Update> history = History();
  auto writer = JournalWriter::Open(*Env::Default(), path, 0, {});
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*writer)->DropLast()));
  ASSERT_TRUE((*writer)->Append(history[0]).ok());
  const uint64_t size = (*writer)->size();
  ASSERT_TRUE((*writer)->Append(history[1]).ok());
  ASSERT_TRUE((*writer)->DropLast().ok());
  EXPECT_EQ((*writer)->size(), size);
  EXPECT_TRUE(absl::IsFailedPrecondition((*writer)->DropLast()));
  ASSERT_TRUE((*writer)->Append(history[1]).ok());
  std::vector<std::string> got;
  ASSERT_TRUE(Replay(path, &got).ok());
  EXPECT_EQ(got.size(), 2u);
  // A published entry may have been reported durable to a waiter: it stays.
  (*writer)->Publish();
  absl::Status dropped = (*writer)->DropLast();
  EXPECT_TRUE(absl::IsFailedPrecondition(dropped)) << dropped;
  EXPECT_THAT(dropped.message(), HasSubstr("is published"));
}

// Group commit: threads that each append an entry (under one mutex, as DispatcherImpl does) and
// then wait for it outside the mutex share the fdatasyncs, and each returns only once a sync
// covered its entry: the CrashEnv's durable image reaches at least the caller's ticket.
TEST(JournalTest, ConcurrentWaitersShareSyncsAndReturnOnlyOnceDurable) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env(absl::Milliseconds(2));  // a disk's fdatasync
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  const std::vector<journal::Update> history = History();
  constexpr int kThreads = 8, kEntries = 40;
  absl::Mutex mu;
  std::atomic<int> early{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEntries; ++i) {
        uint64_t ticket;
        {
          absl::MutexLock lock(&mu);
          if (!w.Append(history[(t + i) % history.size()]).ok()) ++failed;
          ticket = w.Publish();
        }
        if (!w.WaitSynced(ticket, absl::Now() + absl::Seconds(20)).ok()) ++failed;
        if (env.DurableBytes(path) < ticket) ++early;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(early, 0);
  constexpr int kCalls = kThreads * kEntries;
  std::printf("%d entries, %d threads: %llu fdatasyncs\n", kCalls, kThreads,
              static_cast<unsigned long long>(w.syncs()));
  EXPECT_LE(w.syncs(), kCalls / 2);
  EXPECT_GE(w.syncs(), 1u);
  // The durable image replays to every entry.
  const std::string copy = tmp.Join("after-crash");
  WriteAll(copy, env.Durable(path));
  std::vector<std::string> got;
  auto replay = Replay(copy, &got);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(got.size(), static_cast<size_t>(kCalls));
}

// A failed sync: the waiters it was for fail, and so does every later wait past what was synced
// before and every later append; what was synced before stays acknowledged.
TEST(JournalTest, AFailedSyncFailsItsWaitersAndEveryLaterCall) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  const std::vector<journal::Update> history = History();
  absl::Mutex mu;
  ASSERT_TRUE(w.Append(history[0]).ok());
  const uint64_t first = w.Publish();
  ASSERT_TRUE(w.WaitSynced(first, absl::InfiniteFuture()).ok());

  // Three waiters past `first`: the first one's sync is held until all three wait, then fails.
  const uint64_t started = env.syncs_started();
  env.set_hold_syncs(true);
  std::vector<absl::Status> results(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      uint64_t ticket;
      {
        absl::MutexLock lock(&mu);
        ASSERT_TRUE(w.Append(history[1 + t]).ok());
        ticket = w.Publish();
      }
      results[t] = w.WaitSynced(ticket, absl::Now() + absl::Seconds(20));
    });
    // One at a time, so that the second and third find the first syncing.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (env.syncs_started() == started && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  env.set_fail_sync(true);
  env.set_hold_syncs(false);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("journal " + path + " is unusable until a restart"));
    EXPECT_THAT(s.message(), HasSubstr("durable up to byte " + std::to_string(first)));
  }
  env.set_fail_sync(false);
  EXPECT_TRUE(w.WaitSynced(first, absl::InfiniteFuture()).ok());  // synced before: still fine
  EXPECT_EQ(w.WaitSynced(w.published(), absl::InfiniteFuture()), results[0]);
  EXPECT_EQ(w.Append(history[4]), results[0]);
  EXPECT_EQ(env.DurableBytes(path), first);
}

// A waiter whose sync is someone else's, still in progress, gives up at its deadline, naming the
// journal; the syncer returns once its fdatasync ends.
TEST(JournalTest, AWaitEndsByItsDeadline) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  ASSERT_TRUE(w.Append(History()[0]).ok());
  const uint64_t ticket = w.Publish();
  const uint64_t started = env.syncs_started();
  env.set_hold_syncs(true);
  absl::Status syncer;
  std::thread t([&] { syncer = w.WaitSynced(ticket, absl::Now() + absl::Seconds(20)); });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (env.syncs_started() == started && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Time before = absl::Now();
  absl::Status waited = w.WaitSynced(ticket, absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  EXPECT_THAT(waited.message(),
              HasSubstr("journal " + path + " to be synced up to byte " + std::to_string(ticket)));
  EXPECT_THAT(waited.message(), HasSubstr("an fdatasync is still in progress"));
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  env.set_hold_syncs(false);
  t.join();
  EXPECT_TRUE(syncer.ok()) << syncer;
}

// Compaction writes a durable snapshot of everything written: every ticket from the old file is
// covered at once, and positions go on growing in the new file.
TEST(JournalTest, CompactionCoversEveryEarlierTicket) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  const std::vector<journal::Update> history = History();
  for (const journal::Update& u : history) ASSERT_TRUE(w.Append(u).ok());
  const uint64_t old_ticket = w.Publish();
  auto size = w.Compact({history[0], history[1]});
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(w.size(), *size);
  // The compaction synced its new file (the snapshot, then the tail at the swap); the journal's
  // old tickets need no sync of their own.
  const uint64_t syncs = env.syncs();
  EXPECT_TRUE(w.WaitSynced(old_ticket, absl::Now()).ok());  // no sync needed, no time given
  EXPECT_EQ(env.syncs(), syncs);
  ASSERT_TRUE(w.Append(history[2]).ok());
  const uint64_t new_ticket = w.Publish();
  EXPECT_GT(new_ticket, old_ticket);
  ASSERT_TRUE(w.WaitSynced(new_ticket, absl::Now() + absl::Seconds(20)).ok());
  EXPECT_EQ(env.syncs(), syncs + 1);
  const std::string copy = tmp.Join("after-crash");
  WriteAll(copy, env.Durable(path));
  std::vector<std::string> got;
  ASSERT_TRUE(Replay(copy, &got).ok());
  EXPECT_EQ(got.size(), 3u);
}

// Compaction off the writers' mutex (BeginCompaction, WriteCompaction, FinishCompaction): entries
// written while the snapshot is written are acknowledged from the old journal as ever and carried
// over to the new one, and a crash at each step leaves a journal that holds every entry
// acknowledged by then (the snapshot standing for the entries before it), in order.
TEST(JournalTest, CompactionCarriesTheTailOverAndEveryCrashImageHoldsWhatWasAcknowledged) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  testing::CrashEnv env;
  auto writer = JournalWriter::Open(env, path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  // Distinct entries, each acknowledged (published and synced) unless said otherwise.
  auto entry = [](uint64_t step) { return testing::ConsumerAcknowledged(1, 0, step); };
  std::vector<std::string> acknowledged;
  auto append = [&](uint64_t step, bool acknowledge) {
    ASSERT_TRUE(w.Append(entry(step)).ok());
    const uint64_t ticket = w.Publish();
    if (!acknowledge) return;
    ASSERT_TRUE(w.WaitSynced(ticket, absl::Now() + absl::Seconds(20)).ok());
    acknowledged.push_back(entry(step).SerializeAsString());
  };
  // What a crash now leaves at `path`, replayed.
  int images = 0;
  auto crash_image = [&]() {
    const std::string copy = tmp.Join(absl::StrCat("image-", ++images));
    WriteAll(copy, env.Durable(path));
    std::vector<std::string> got;
    absl::StatusOr<JournalReplay> replay = Replay(copy, &got);
    EXPECT_TRUE(replay.ok()) << replay.status();
    return got;
  };
  // Whether `image` is `prefix` (the snapshot) followed by the acknowledged entries from
  // `covered` on (those the snapshot does not stand for), in order, among entries written but
  // not acknowledged.
  auto holds = [&](const std::vector<std::string>& image, const std::vector<std::string>& prefix,
                   size_t covered) {
    if (image.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), image.begin())) {
      return false;
    }
    size_t next = covered;
    for (size_t i = prefix.size(); i < image.size() && next < acknowledged.size(); ++i) {
      if (image[i] == acknowledged[next]) ++next;
    }
    return next == acknowledged.size();
  };

  for (uint64_t step = 0; step < 5; ++step) append(step, true);
  // The snapshot stands for the 5 entries so far: here, one entry that says so.
  const std::vector<journal::Update> snapshot = {entry(1000)};
  const std::vector<std::string> snapshot_bytes = {entry(1000).SerializeAsString()};
  ASSERT_TRUE(w.BeginCompaction().ok());
  EXPECT_EQ(w.BeginCompaction().code(), absl::StatusCode::kFailedPrecondition);
  append(5, true);  // before the snapshot is written: the tail
  EXPECT_TRUE(holds(crash_image(), {}, 0));
  ASSERT_TRUE(w.WriteCompaction(snapshot).ok());
  append(6, true);                           // after it: acknowledged from the old journal
  append(7, false);                          // written, not synced
  EXPECT_TRUE(holds(crash_image(), {}, 0));  // the old journal, whole
  // A crash while the swap syncs the new file's last bytes: still the old journal.
  env.set_hold_syncs(true);
  const uint64_t started = env.syncs_started();
  absl::StatusOr<uint64_t> finished;
  std::thread finisher([&] { finished = w.FinishCompaction(); });
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (env.syncs_started() == started && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(holds(crash_image(), {}, 0));
  env.set_hold_syncs(false);
  finisher.join();
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_EQ(*finished, w.size());
  // Renamed, the directory not synced yet: a crash may still leave the old journal, so an entry
  // appended to the new file is not acknowledged until SyncCompaction.
  EXPECT_TRUE(holds(crash_image(), {}, 0));
  ASSERT_TRUE(w.Append(entry(8)).ok());
  const uint64_t early = w.Publish();
  EXPECT_EQ(w.WaitSynced(early, absl::Now() + absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(w.SyncCompaction().ok());
  ASSERT_TRUE(w.WaitSynced(early, absl::Now() + absl::Seconds(20)).ok());
  acknowledged.push_back(entry(8).SerializeAsString());
  // After the swap: the snapshot, then the tail (the entry never synced included), then 8.
  const std::vector<std::string> image = crash_image();
  EXPECT_TRUE(holds(image, snapshot_bytes, 5));
  ASSERT_EQ(image.size(), 5u);
  EXPECT_EQ(image[3], entry(7).SerializeAsString());
  append(9, true);  // appended to the new file
  EXPECT_TRUE(holds(crash_image(), snapshot_bytes, 5));
  std::vector<std::string> on_disk;
  ASSERT_TRUE(Replay(path, &on_disk).ok());
  EXPECT_EQ(on_disk.size(), 6u);
  EXPECT_FALSE(
      std::filesystem::exists(tmp.Join(absl::StrCat(kJournalFileName, ".tmp.", getpid()))));
}

// A compaction whose new file cannot be written leaves the journal as it was, in use, and
// removes its temporary file.
TEST(JournalTest, AFailedCompactionLeavesTheJournalInUse) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  auto writer = JournalWriter::Open(*Env::Default(), path, 0, {});
  ASSERT_TRUE(writer.ok()) << writer.status();
  JournalWriter& w = **writer;
  const std::vector<journal::Update> history = History();
  ASSERT_TRUE(w.Append(history[0]).ok());
  ASSERT_TRUE(w.BeginCompaction().ok());
  // The temporary file's place is taken by a directory: it cannot be opened for writing.
  const std::string blocker = absl::StrCat(path, ".tmp.", getpid());
  std::filesystem::create_directory(blocker);
  absl::Status written = w.WriteCompaction({history[0]});
  EXPECT_FALSE(written.ok());
  EXPECT_THAT(std::string(written.message()), HasSubstr(blocker));
  EXPECT_THAT(std::string(written.message()), HasSubstr("the journal stays as it was"));
  w.AbortCompaction();
  std::filesystem::remove(blocker);
  ASSERT_TRUE(w.Append(history[1]).ok());
  ASSERT_TRUE(w.Sync().ok());
  std::vector<std::string> got;
  ASSERT_TRUE(Replay(path, &got).ok());
  EXPECT_EQ(got.size(), 2u);
  EXPECT_TRUE(w.BeginCompaction().ok());  // another may begin
  ASSERT_TRUE(w.WriteCompaction({history[0], history[1]}).ok());
  ASSERT_TRUE(w.FinishCompaction().ok());
  ASSERT_TRUE(w.SyncCompaction().ok());
  got.clear();
  ASSERT_TRUE(Replay(path, &got).ok());
  EXPECT_EQ(got.size(), 2u);
}

// Not a check: prints what an entry costs with and without fdatasync (journal.h quotes it).
TEST(JournalTest, SyncCost) {
  ScopedTempDir tmp;
  const journal::Update update = History()[2];
  for (bool sync : {false, true}) {
    auto writer =
        JournalWriter::Open(*Env::Default(), tmp.Join(sync ? "s" : "n"), 0, {.sync = sync});
    ASSERT_TRUE(writer.ok());
    constexpr int kEntries = 200;
    const auto start = std::chrono::steady_clock::now();
    // One entry at a time, each synced before the next: the cost of an entry without grouping.
    for (int i = 0; i < kEntries; ++i) {
      ASSERT_TRUE((*writer)->Append(update).ok());
      ASSERT_TRUE((*writer)->Sync().ok());
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        kEntries;
    std::printf("journal append %s fdatasync: %.1f us per entry\n", sync ? "with" : "without", us);
  }
}

}  // namespace
}  // namespace croupier
