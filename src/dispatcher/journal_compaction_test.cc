// Journal compaction: a snapshot of the state (DispatcherState::Snapshot) rebuilds it exactly, the
// dispatcher replaces its journal with one at start and when the journal grows, a restart replays
// snapshot and updates alike, and a journal that cannot be written shows in the status.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using namespace testing;  // NOLINT: the update builders

// A state with every kind of part: jobs (one python), owned and orphaned tasks, finished ones,
// consumers, ranks whose consumer left, an idle job, a deleted job, a source producer.
DispatcherState RichState() {
  DispatcherState state;
  auto apply = [&state](const journal::Update& u) {
    absl::Status s = state.Apply(u);
    EXPECT_TRUE(s.ok()) << s << " applying " << u.ShortDebugString();
  };
  apply(JobCreated(FakeJob("a", 8, 2, 4, 2)));
  apply(JobCreated(FakeJob("gone", 8, 2, 4, 1)));
  apply(JobCreated(FakePythonJob("py", 8, 2, 4, 1)));
  apply(JobCreated(FakeJob("b", 12, 3, 6, 0, "first_come")));
  apply(ProducerRegistered(1, "h:1"));
  apply(ProducerRegistered(2, "h:2"));
  apply(ProducerRegistered(3, "h:3", "py"));
  apply(ConsumerRegistered(1, "a", 0));
  apply(ConsumerRegistered(2, "a", 1, 0, 1));
  apply(ConsumerRegistered(3, "b", 2));
  apply(TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  apply(TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  apply(TaskAssigned(MakeTask(3, "b", 0, 0, 6), 1));
  apply(TaskAssigned(MakeTask(4, "gone", 0, 0, 4), 1));
  apply(TaskAssigned(MakeTask(5, "py", 0, 0, 4), 3));
  apply(TaskFinished(1, 1));
  apply(ProducerRemoved(2));            // task 2 becomes an orphan
  apply(ProducerRegistered(4, "h:4"));  // drains, keeping task 6; task 7 becomes an orphan
  apply(TaskAssigned(MakeTask(6, "a", 1, 0, 4), 4));
  apply(TaskAssigned(MakeTask(7, "a", 1, 4, 4), 4));
  apply(ProducerDraining(4, {6}));
  apply(ConsumerAcknowledged(1, 0, 2));
  apply(ConsumerRemoved(3));
  journal::Update idle;
  idle.mutable_job_idle()->set_job("b");
  apply(idle);
  journal::Update deleted;
  deleted.mutable_job_deleted()->set_job("gone");
  apply(deleted);
  return state;
}

TEST(SnapshotTest, ASnapshotRebuildsTheStateExactly) {
  const DispatcherState state = RichState();
  ASSERT_THAT(state.DebugString(), HasSubstr("orphan 'a'"));
  ASSERT_THAT(state.DebugString(), HasSubstr("producer 4 h:4 tasks [6] draining"));
  DispatcherState rebuilt;
  const std::vector<journal::Update> snapshot = state.Snapshot();
  ASSERT_EQ(snapshot.size(), 4u);  // three jobs and the end
  for (const journal::Update& u : snapshot) ASSERT_TRUE(rebuilt.Apply(u).ok()) << u.DebugString();
  EXPECT_EQ(rebuilt.DebugString(), state.DebugString());
  // And it carries on as the original would: the next ids, the orphans first.
  EXPECT_EQ(rebuilt.next_task_id(), 8u);
  EXPECT_FALSE(rebuilt.Apply(TaskAssigned(MakeTask(8, "a", 0, 4, 4), 4)).ok());  // it drains
  EXPECT_TRUE(rebuilt.Apply(TaskAssigned(MakeTask(8, "a", 0, 4, 4), 1)).ok());
}

TEST(SnapshotTest, ASnapshotFitsOnlyAnEmptyStateAndChecksItsReferences) {
  const std::vector<journal::Update> snapshot = RichState().Snapshot();
  DispatcherState used;
  ASSERT_TRUE(used.Apply(JobCreated(FakeJob("x", 8, 2, 4))).ok());
  absl::Status s = used.Apply(snapshot[0]);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a snapshot_job after other updates"));

  // A task owned by a producer the snapshot does not hold: refused, the state unchanged.
  std::vector<journal::Update> bad = snapshot;
  bad.back().mutable_snapshot_end()->mutable_producers()->DeleteSubrange(1, 1);  // producer 3
  DispatcherState fresh;
  for (size_t i = 0; i + 1 < bad.size(); ++i) ASSERT_TRUE(fresh.Apply(bad[i]).ok());
  s = fresh.Apply(bad.back());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("task 5 of job 'py' owned by producer 3"));
  // A task that is not one the job cuts (it starts inside one), or a cursor past the end.
  for (int broken = 0; broken < 2; ++broken) {
    std::vector<journal::Update> odd = snapshot;
    journal::SnapshotJob& a = *odd[0].mutable_snapshot_job();
    ASSERT_EQ(a.job().spec().name(), "a");
    if (broken == 0) a.mutable_outstanding(0)->set_first_batch(1);
    if (broken == 1) a.set_next_epoch(3);  // a has 2 epochs
    DispatcherState other;
    for (size_t i = 0; i + 1 < odd.size(); ++i) ASSERT_TRUE(other.Apply(odd[i]).ok());
    s = other.Apply(odd.back());
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << broken;
    EXPECT_THAT(std::string(s.message()), HasSubstr("job 'a'")) << s;
  }
  // Nothing else may come between a snapshot's jobs and its end.
  s = fresh.Apply(ProducerRegistered(1, "h:9"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("without its snapshot_end"));
}

class JournalCompactionTest : public DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    WriteData({40});  // 40 records, batches of 2 for 2 consumers: 20 batches per epoch
    Restart();
  }

  void Restart(uint64_t compact_bytes = uint64_t{64} << 20, Env* env = nullptr) {
    impl_.reset();
    DispatcherOptions options;
    options.journal_path = Journal();
    options.journal_sync = false;
    options.journal_compact_bytes = compact_bytes;
    options.env = env;
    Recreate(options);
  }

  std::string Journal() const { return dir_.Join("journal"); }
  uint64_t JournalBytes() const { return std::filesystem::file_size(Journal()); }

  // The kinds of the journal's entries, in order.
  std::vector<journal::Update::KindCase> Kinds() const {
    std::vector<journal::Update::KindCase> out;
    auto read = ReadJournal(*Env::Default(), Journal(), [&](const journal::Update& u, uint64_t) {
      out.push_back(u.kind_case());
      return absl::OkStatus();
    });
    EXPECT_TRUE(read.ok()) << read.status();
    return out;
  }

  // Both ranks of "train" acknowledge their position `times` times.
  void Acknowledge(int times) {
    for (int i = 0; i < times; ++i) {
      ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, i % 10).ok());
      ASSERT_TRUE(Consumer(2, "train", 1, 2, 0, i % 10).ok());
    }
  }
};

TEST_F(JournalCompactionTest, ARestartStartsTheJournalAnewAsASnapshot) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/3)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());
  Acknowledge(200);
  const std::string before = impl_->StateDebugString();
  const uint64_t long_journal = JournalBytes();
  Restart();
  EXPECT_EQ(impl_->StateDebugString(), before);
  EXPECT_LT(JournalBytes(), long_journal / 4);
  using K = journal::Update;
  EXPECT_THAT(Kinds(), ::testing::ElementsAre(K::kSnapshotJob, K::kSnapshotEnd));
  // The consumers' leases are part of the snapshot: a heartbeat without one is still refused.
  v1::ConsumerHeartbeatRequest bare;
  bare.set_consumer_id(1);
  bare.set_job("train");
  bare.set_world(2);
  EXPECT_EQ(impl_->ConsumerHeartbeat(bare).status().code(), absl::StatusCode::kPermissionDenied);
  // Updates after the snapshot are appended, and a restart replays both.
  ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, 9).ok());
  ASSERT_TRUE(Consumer(2, "train", 1, 2, 1, 0).ok());
  const std::string after = impl_->StateDebugString();
  EXPECT_GT(Kinds().size(), 2u);
  Restart();
  EXPECT_EQ(impl_->StateDebugString(), after);
}

TEST_F(JournalCompactionTest, AJournalPastItsBoundIsCompactedByTick) {
  Restart(/*compact_bytes=*/4096);
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/3)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  impl_->Tick();
  EXPECT_GT(Kinds().size(), 2u);  // small yet: not compacted
  Acknowledge(150);
  ASSERT_GT(JournalBytes(), 4096u);
  impl_->Tick();
  EXPECT_LT(JournalBytes(), 4096u);
  EXPECT_EQ(Kinds().size(), 2u);
  Acknowledge(3);
  const std::string state = impl_->StateDebugString();
  Restart(4096);
  EXPECT_EQ(impl_->StateDebugString(), state);
}

TEST_F(JournalCompactionTest, AJournalThatCannotBeWrittenShowsInTheStatus) {
  FaultyEnv env;
  Restart(uint64_t{64} << 20, &env);
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  EXPECT_EQ(impl_->GetStatus({})->journal_error(), "");
  ASSERT_TRUE(Locate("train", 0, 0, 1).ok());  // not assigned yet: ask again shortly
  env.fail_append = true;
  auto c = Consumer(0, "train", 1, 2);
  EXPECT_TRUE(absl::IsUnavailable(c.status())) << c.status();
  const std::string error = impl_->GetStatus({})->journal_error();
  EXPECT_THAT(error, HasSubstr(Journal()));
  EXPECT_THAT(error, HasSubstr("No space left on device"));
  // A consumer waiting for a batch that no producer can be given hears why.
  auto l = Locate("train", 0, 0, 1);
  EXPECT_TRUE(absl::IsUnavailable(l.status())) << l.status();
  EXPECT_THAT(std::string(l.status().message()),
              HasSubstr("has no producer, and none can be given one: the dispatcher cannot "
                        "write its journal"));
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("No space left on device"));
  env.fail_append = false;
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  EXPECT_EQ(impl_->GetStatus({})->journal_error(), "");
  EXPECT_TRUE(Locate("train", 0, 0, 1).ok());
}

// An Env whose writes of a compaction's new file (a name with ".tmp.", or WriteFileAtomically)
// wait while the gate is closed (10 seconds at most, so that a failed test cannot hang), as a
// large snapshot on a slow disk would. Thread-safe.
class SlowSnapshotEnv : public Env {
 public:
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Waits until a write is held at the gate; false after 10 seconds.
  bool AwaitHeld() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&held_), absl::Seconds(10));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    return Env::Default()->OpenForRead(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& p) override {
    ASSIGN_OR_RETURN(auto file, Env::Default()->OpenForWrite(p));
    if (p.find(".tmp.") == std::string::npos) return file;
    return std::unique_ptr<WritableFile>(new File(this, std::move(file)));
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& p) override {
    return Env::Default()->OpenForAppend(p);
  }
  absl::Status Truncate(const std::string& p, uint64_t size) override {
    return Env::Default()->Truncate(p, size);
  }
  absl::Status SyncDir(const std::string& p) override { return Env::Default()->SyncDir(p); }
  absl::StatusOr<FileStat> Stat(const std::string& p) override { return Env::Default()->Stat(p); }
  absl::Status WriteFileAtomically(const std::string& p, absl::string_view c) override {
    Pass();
    return Env::Default()->WriteFileAtomically(p, c);
  }
  absl::Status CreateDirs(const std::string& p) override { return Env::Default()->CreateDirs(p); }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& p) override {
    return Env::Default()->Glob(p);
  }

 private:
  class File : public WritableFile {
   public:
    File(SlowSnapshotEnv* env, std::unique_ptr<WritableFile> file)
        : env_(env), file_(std::move(file)) {}
    absl::Status Append(absl::string_view data) override {
      env_->Pass();
      return file_->Append(data);
    }
    absl::Status Sync() override { return file_->Sync(); }
    absl::Status Close() override { return file_->Close(); }
    const std::string& name() const override { return file_->name(); }

   private:
    SlowSnapshotEnv* const env_;
    std::unique_ptr<WritableFile> file_;
  };

  void Pass() {
    absl::MutexLock lock(&mu_);
    held_ = !open_;
    mu_.AwaitWithTimeout(absl::Condition(&open_), absl::Seconds(10));
    held_ = false;
  }

  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
};

// Calls are served while a compaction writes its snapshot: the dispatcher's lock is held only to
// take the snapshot and to swap the files. A position acknowledged meanwhile is in the compacted
// journal (carried over from the old one) and survives a restart.
TEST_F(JournalCompactionTest, CallsAreServedWhileTheSnapshotIsWritten) {
  SlowSnapshotEnv env;
  Restart(/*compact_bytes=*/4096, &env);
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/3)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  Acknowledge(150);
  ASSERT_GT(JournalBytes(), 4096u);
  env.Close();
  std::thread ticker([&] { impl_->Tick(); });
  EXPECT_TRUE(env.AwaitHeld());  // the compaction is writing its snapshot
  // A consumer's heartbeat, answered while the snapshot waits on its disk.
  auto call = std::async(std::launch::async, [&] { return Consumer(1, "train", 0, 2, 1, 0); });
  const bool served = call.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  EXPECT_TRUE(served) << "a heartbeat waited for the compaction";
  env.Open();
  ticker.join();
  EXPECT_TRUE(call.get().ok());
  // The snapshot, then what was written meanwhile: the acknowledgement among it.
  using K = journal::Update;
  const std::vector<K::KindCase> kinds = Kinds();
  ASSERT_GT(kinds.size(), 2u);
  EXPECT_EQ(kinds[0], K::kSnapshotJob);
  EXPECT_EQ(kinds[1], K::kSnapshotEnd);
  EXPECT_THAT(kinds, ::testing::Contains(K::kConsumerAcknowledged));
  const DispatcherImpl::CompactionTimes times = impl_->last_compaction();
  EXPECT_GT(times.total, times.lock_held);
  const std::string state = impl_->StateDebugString();
  Restart(4096);
  EXPECT_EQ(impl_->StateDebugString(), state);
}

// The figure of docs/benchmarks.md ("Compaction off the dispatcher's lock"): a journal of 1,000
// jobs of 1,000 files each (about 55 MB of state, as in issue 36), compacted at start. The log
// line "compacted journal ..." gives the time and how much of it the dispatcher's lock was held.
// Run by hand: journal_test --gtest_also_run_disabled_tests --gtest_filter='*LargeState*'
TEST_F(JournalCompactionTest, DISABLED_LargeStateCompactedAtStart) {
  auto made = Create(Spec("train", 2, 2, /*num_epochs=*/3));
  ASSERT_TRUE(made.ok()) << made.status();
  impl_.reset();
  std::filesystem::remove(Journal());
  auto writer = JournalWriter::Open(*Env::Default(), Journal(), 0, {.sync = false});
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int j = 0; j < 1000; ++j) {
    v1::JobInfo info = *made;
    info.mutable_spec()->set_name(absl::StrCat("job-", j));
    const v1::FileInfo file = info.files(0);
    info.clear_files();
    for (int f = 0; f < 1000; ++f) {
      v1::FileInfo* added = info.add_files();
      *added = file;
      added->set_path(absl::StrCat(dir_.Join("data/part-"), j, "-", f, ".tfrecord"));
    }
    ASSERT_TRUE((*writer)->Append(JobCreated(info)).ok());
  }
  writer->reset();
  std::fprintf(stderr, "journal of %llu bytes\n", static_cast<unsigned long long>(JournalBytes()));
  DispatcherOptions options;
  options.journal_path = Journal();
  options.journal_sync = true;
  const absl::Time start = absl::Now();
  Recreate(options);
  std::fprintf(stderr, "replayed and compacted in %s\n",
               absl::FormatDuration(absl::Now() - start).c_str());
}

// The figure of docs/benchmarks.md under traffic: 1,000 jobs of 1,000 files each created through
// CreateJob (a 55 MB journal, fdatasync on), then a Tick compacts it while one consumer
// acknowledges a position in a loop, each call waiting for its sync as a real one does: the
// longest call during the compaction against the calls before it.
// Run by hand: dispatcher_test --gtest_also_run_disabled_tests --gtest_filter='*UnderTraffic*'
TEST_F(JournalCompactionTest, DISABLED_LargeStateCompactedByTickUnderTraffic) {
  std::vector<int64_t> sizes(1000, 2);
  WriteData(sizes);
  impl_.reset();
  std::filesystem::remove(Journal());
  DispatcherOptions options;
  options.journal_path = Journal();
  options.journal_sync = true;
  options.journal_compact_bytes = uint64_t{40} << 20;
  Recreate(options);
  const absl::Time creating = absl::Now();
  for (int j = 0; j < 1000; ++j) {
    ASSERT_TRUE(Create(Spec(absl::StrCat("job-", j), 2, 2, /*num_epochs=*/0)).ok());
  }
  std::fprintf(stderr, "created 1,000 jobs in %s: a journal of %llu bytes\n",
               absl::FormatDuration(absl::Now() - creating).c_str(),
               static_cast<unsigned long long>(JournalBytes()));
  ASSERT_TRUE(Consumer(0, "job-0", 0, 2).ok());
  std::atomic<bool> stop{false};
  std::atomic<bool> ticking{false};
  absl::Duration longest_before, longest_during;
  int calls_during = 0;
  std::thread caller([&] {
    for (uint64_t i = 1; !stop; ++i) {
      const bool during = ticking;
      const absl::Time start = absl::Now();
      EXPECT_TRUE(Consumer(1, "job-0", 0, 2, i / 500, i % 500).ok());
      const absl::Duration took = absl::Now() - start;
      absl::Duration& longest = during ? longest_during : longest_before;
      longest = std::max(longest, took);
      calls_during += during ? 1 : 0;
    }
  });
  absl::SleepFor(absl::Milliseconds(500));
  ticking = true;
  const absl::Time tick = absl::Now();
  impl_->Tick();
  const absl::Duration tick_took = absl::Now() - tick;
  ticking = false;
  absl::SleepFor(absl::Milliseconds(100));
  stop = true;
  caller.join();
  const DispatcherImpl::CompactionTimes times = impl_->last_compaction();
  EXPECT_GT(times.bytes, 0u);
  std::fprintf(stderr,
               "Tick with the compaction: %s (compaction %s, lock held %s); the longest call "
               "during it %s (%d calls), before it %s\n",
               absl::FormatDuration(tick_took).c_str(), absl::FormatDuration(times.total).c_str(),
               absl::FormatDuration(times.lock_held).c_str(),
               absl::FormatDuration(longest_during).c_str(), calls_during,
               absl::FormatDuration(longest_before).c_str());
}

}  // namespace
}  // namespace croupier
