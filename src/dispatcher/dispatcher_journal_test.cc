// DispatcherImpl with a journal: restarts rebuild the state, lost assignments are sent again,
// and a journal that cannot be written fails the call without changing the state.
#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/control/call_deadline.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<uint64_t> TaskIds(const v1::ProducerHeartbeatResponse& r) {
  std::vector<uint64_t> out;
  for (const v1::Task& t : r.new_tasks()) out.push_back(t.task_id());
  return out;
}

class DispatcherJournalTest : public testing::DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    // 40 records in batches of 2 for 2 consumers: 20 batches per epoch, tasks of 8.
    WriteData({25, 15});
    Restart();
  }

  // A new dispatcher on the same journal, as after a crash (the old one is simply dropped).
  void Restart(Env* env = nullptr) {
    impl_.reset();
    DispatcherOptions options;
    options.journal_path = Journal();
    options.journal_sync = false;
    options.env = env;
    Recreate(options);
  }

  std::string Journal() const { return dir_.Join("journal"); }

  // A new dispatcher on the same journal, syncing it through `env`; compacting past
  // `compact_bytes` (0: only at start).
  void RestartSynced(Env* env, uint64_t compact_bytes = 0) {
    impl_.reset();
    DispatcherOptions options;
    options.journal_path = Journal();
    options.journal_sync = true;
    options.journal_compact_bytes = compact_bytes;
    options.env = env;
    Recreate(options);
  }

  // Registers ranks 0..n-1 of a new job "train" (batch size 1, epochs without end), returns the
  // consumer ids by rank.
  std::vector<uint64_t> JobWithRanks(uint32_t n) {
    std::vector<uint64_t> ids;
    EXPECT_TRUE(Create(Spec("train", 1, n)).ok());
    for (uint32_t r = 0; r < n; ++r) {
      auto c = Consumer(0, "train", r, n);
      EXPECT_TRUE(c.ok()) << c.status();
      ids.push_back(c.ok() ? c->consumer_id() : 0);
    }
    return ids;
  }

  // The positions of the consumers in the state a replay of `image` (a journal's bytes, as a
  // crash would leave them) rebuilds; `scratch` is a file path to replay from.
  absl::StatusOr<std::map<uint64_t, DispatcherState::TaskKey>> CrashPositions(
      const std::string& image, const std::string& scratch) {
    RETURN_IF_ERROR(Env::Default()->WriteFileAtomically(scratch, image));
    DispatcherState state;
    RETURN_IF_ERROR(ReadJournal(*Env::Default(), scratch,
                                [&](const journal::Update& u, uint64_t) { return state.Apply(u); })
                        .status());
    std::map<uint64_t, DispatcherState::TaskKey> out;
    for (const auto& [id, c] : state.consumers()) out[id] = {c.epoch, c.step};
    return out;
  }

  absl::StatusOr<v1::ProducerHeartbeatResponse> Reporting(uint64_t id, uint32_t slots,
                                                          std::vector<uint64_t> held,
                                                          std::vector<uint64_t> finished = {}) {
    v1::ProducerHeartbeatRequest request;
    request.set_producer_id(id);
    request.set_free_task_slots(slots);
    for (uint64_t t : held) request.add_held_tasks(t);
    for (uint64_t t : finished) request.add_finished_tasks(t);
    request.set_held_tasks_reported(true);
    return impl_->ProducerHeartbeat(request);
  }
};

TEST_F(DispatcherJournalTest, RestartRebuildsTheSameState) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());  // tasks 1, 2
  ASSERT_TRUE(Producer(0, "h:2", 1).ok());  // task 3
  ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, 3).ok());
  ASSERT_TRUE(Consumer(2, "train", 1, 2, 0, 5).ok());  // tasks 1 delivered
  ASSERT_TRUE(Producer(1, "h:1", 1, {2}).ok());
  clock_->Advance(absl::Seconds(11));
  ASSERT_TRUE(Producer(1, "h:1", 0).ok());
  ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, 5).ok());
  ASSERT_TRUE(Consumer(2, "train", 1, 2, 0, 5).ok());
  impl_->Tick();  // producer 2 expires: task 3 is an orphan
  const std::string before = impl_->StateDebugString();
  ASSERT_THAT(before, HasSubstr("orphan"));

  Restart();
  EXPECT_EQ(impl_->StateDebugString(), before);
  // Replayed producers and consumers are timed from the restart.
  clock_->Advance(absl::Seconds(9));
  impl_->Tick();
  EXPECT_EQ(impl_->StateDebugString(), before);
  // And the restarted dispatcher carries on: the orphan goes to the next producer to ask.
  auto r = Producer(1, "h:1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->new_tasks_size(), 1);
  EXPECT_EQ(r->new_tasks(0).first_batch(), 16u);  // task 3, producer 2's
  EXPECT_EQ(r->jobs_size(), 1);  // the job again: the restarted dispatcher has not sent it yet
  const std::string after = impl_->StateDebugString();
  Restart();
  EXPECT_EQ(impl_->StateDebugString(), after);
}

TEST_F(DispatcherJournalTest, ATaskRemadeOnRequestIsReplayed) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  auto p = Producer(0, "h:1", 1);  // task 1: batches [0, 8)
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(Producer(1, "h:1", 1, {p->new_tasks(0).task_id()}).ok());
  v1::LocateRequest need;
  need.set_job("train");
  need.set_epoch(0);
  need.set_first_batch(3);
  need.set_num_batches(1);
  need.set_remake_if_finished(true);
  ASSERT_TRUE(impl_->Locate(need).ok());
  const std::string before = impl_->StateDebugString();
  ASSERT_THAT(before, HasSubstr("orphan 'train' epoch 0 batch 0"));
  Restart();
  EXPECT_EQ(impl_->StateDebugString(), before);
}

TEST_F(DispatcherJournalTest, LostAssignmentsAreSentAgainAndStaleTasksRevoked) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());  // consumer 1
  auto r = Producer(0, "h:1", 2);
  ASSERT_TRUE(r.ok());
  ASSERT_THAT(TaskIds(*r), ElementsAre(1, 2));
  // The dispatcher crashes before the producer hears of tasks 1 and 2.
  Restart();
  r = Reporting(1, 2, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(TaskIds(*r), ElementsAre(1, 2));  // the same tasks, not new ones
  EXPECT_EQ(r->jobs_size(), 1);
  // Holding both, finishing 1: nothing is sent again; the free slot gets task 3.
  r = Reporting(1, 1, {2}, {1});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(TaskIds(*r), ElementsAre(3));
  // Every rank past task 2: it is finished by delivery; a producer that missed the revocation
  // and still reports it held is told again.
  ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, 8).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2, 0, 8).ok());
  r = Reporting(1, 0, {2, 3});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->revoked_tasks(), ElementsAre(2));
  r = Reporting(1, 0, {2, 3});  // the response was lost
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->revoked_tasks(), ElementsAre(2));
  EXPECT_TRUE(r->new_tasks().empty());
}

TEST_F(DispatcherJournalTest, AReplayedProducerIsShownSilentSinceTheRestart) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
  ASSERT_TRUE(Producer(0, "h:1", 0).ok());
  clock_->Advance(absl::Seconds(3));
  Restart();
  clock_->Advance(absl::Seconds(2));
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->producers_size(), 1);
  // Not a negative age from the expiry grace: two seconds since the restart.
  EXPECT_DOUBLE_EQ(status->producers(0).seconds_since_heartbeat(), 2.0);
}

TEST_F(DispatcherJournalTest, JournalWriteErrorFailsTheCallAndChangesNothing) {
  testing::FaultyEnv env;
  Restart(&env);
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
  const std::string before = impl_->StateDebugString();
  env.fail_append = true;
  auto r = Producer(0, "h:1", 2);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("cannot write its journal " + Journal()));
  EXPECT_EQ(impl_->StateDebugString(), before);
  auto c = Consumer(0, "train", 0, 2);
  EXPECT_TRUE(absl::IsUnavailable(c.status())) << c.status();
  EXPECT_EQ(impl_->StateDebugString(), before);
  // The disk has room again: the calls succeed, and a restart sees exactly what was answered.
  env.fail_append = false;
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());
  const std::string after = impl_->StateDebugString();
  Restart();
  EXPECT_EQ(impl_->StateDebugString(), after);
}

// Group commit: 8 consumers acknowledging 30 positions each, concurrently, share the fdatasyncs
// (each takes 2 ms here), and every acknowledgement is answered only once its journal entry is
// durable: after each answer, the entry is in what a machine crash would leave (CrashEnv).
TEST_F(DispatcherJournalTest, ConcurrentCallsShareSyncsAndAnswerOnlyWhatIsDurable) {
  testing::CrashEnv env(absl::Milliseconds(2));
  RestartSynced(&env);
  constexpr uint32_t kRanks = 8;
  constexpr int kAcks = 30;
  const std::vector<uint64_t> ids = JobWithRanks(kRanks);  // 40 records: 5 steps per epoch
  const uint64_t syncs_before = env.syncs();
  std::atomic<int> failed{0}, early{0};
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int k = 1; k <= kAcks; ++k) {
        const uint64_t epoch = k / 5, step = k % 5;
        v1::ConsumerHeartbeatRequest request;
        request.set_consumer_id(ids[r]);
        request.set_lease(Lease(ids[r]));
        request.set_epoch(epoch);
        request.set_step(step);
        const CallDeadline bounded(absl::Now() + absl::Seconds(20));
        auto answer = impl_->ConsumerHeartbeat(request);
        if (!answer.ok()) {
          ++failed;
          ADD_FAILURE() << answer.status();
          continue;
        }
        const std::string entry = JournalEntry(
            testing::ConsumerAcknowledged(ids[r], epoch, step).SerializeAsString());
        if (env.Durable(Journal()).find(entry) == std::string::npos) ++early;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(early, 0) << "answers given before their entry was durable";
  const uint64_t syncs = env.syncs() - syncs_before;
  std::printf("%u consumers x %d acknowledgements: %llu fdatasyncs\n", kRanks, kAcks,
              static_cast<unsigned long long>(syncs));
  EXPECT_LE(syncs, kRanks * kAcks / 2);
}

// The Done forms (the gRPC adapter's path): answered from the journal's thread only once the
// acknowledgement is durable, the calls of a commit interval sharing one sync, which the status
// counts (croupier_journal_syncs_total).
TEST_F(DispatcherJournalTest, DoneFormsAnswerOnlyOnceDurableAndShareACommitInterval) {
  testing::CrashEnv env;
  impl_.reset();
  DispatcherOptions options;
  options.journal_path = Journal();
  options.journal_sync = true;
  options.journal_commit_interval = absl::Milliseconds(300);
  options.journal_compact_bytes = 0;
  options.env = &env;
  Recreate(options);
  constexpr uint32_t kRanks = 8;
  const std::vector<uint64_t> ids = JobWithRanks(kRanks);  // 40 records: 5 steps per epoch
  absl::SleepFor(absl::Milliseconds(350));                 // past the interval of their syncs
  const uint64_t syncs_before = env.syncs();
  absl::Mutex mu;
  int answered = 0, failed = 0, early = 0;
  for (int k = 1; k <= 3; ++k) {
    for (uint32_t r = 0; r < kRanks; ++r) {
      v1::ConsumerHeartbeatRequest request;
      request.set_consumer_id(ids[r]);
      request.set_lease(Lease(ids[r]));
      request.set_step(k);
      const std::string entry =
          JournalEntry(testing::ConsumerAcknowledged(ids[r], 0, k).SerializeAsString());
      const CallDeadline bounded(absl::Now() + absl::Seconds(20));
      impl_->ConsumerHeartbeat(
          request, [&, entry](absl::StatusOr<v1::ConsumerHeartbeatResponse> answer) {
            absl::MutexLock lock(&mu);
            ++answered;
            if (!answer.ok()) {
              ++failed;
              ADD_FAILURE() << answer.status();
            } else if (env.Durable(Journal()).find(entry) == std::string::npos) {
              ++early;
            }
          });
    }
  }
  {
    absl::MutexLock lock(&mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == 3 * kRanks; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20)))
        << answered << " answered";
    EXPECT_EQ(failed, 0);
    EXPECT_EQ(early, 0) << "answers given before their entry was durable";
  }
  // The first call found no sync within the interval and synced at once; the other 23, made
  // within a few milliseconds, share at most two more.
  const uint64_t syncs = env.syncs() - syncs_before;
  EXPECT_GE(syncs, 1u);
  EXPECT_LE(syncs, 3u);
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  // Every fdatasync of entries (the env also counts the one that made the new file's header
  // durable when the journal was opened).
  EXPECT_EQ(status->journal_syncs(), env.syncs() - 1);
  EXPECT_EQ(status->journal_bytes(), env.Durable(Journal()).size());
}

// Compaction (by Tick, at every doubling of the journal) while acknowledgements are in flight:
// after each answer a crash would keep the position answered, and after the last the state a
// crash leaves holds exactly the positions acknowledged.
TEST_F(DispatcherJournalTest, CompactionWhileCallsAreInFlightLosesNothingAnswered) {
  testing::CrashEnv env(absl::Milliseconds(1));
  RestartSynced(&env, /*compact_bytes=*/1);
  constexpr uint32_t kRanks = 6;
  constexpr int kAcks = 25;
  const std::vector<uint64_t> ids = JobWithRanks(kRanks);  // 40 records: 6 steps per epoch
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done) {
      impl_->Tick();
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  std::atomic<int> failed{0}, lost{0};
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      const std::string scratch = dir_.Join(absl::StrCat("crash-", r));
      for (int k = 1; k <= kAcks; ++k) {
        const DispatcherState::TaskKey position(k / 6, k % 6);
        v1::ConsumerHeartbeatRequest request;
        request.set_consumer_id(ids[r]);
        request.set_lease(Lease(ids[r]));
        request.set_epoch(position.first);
        request.set_step(position.second);
        const CallDeadline bounded(absl::Now() + absl::Seconds(20));
        auto answer = impl_->ConsumerHeartbeat(request);
        if (!answer.ok()) {
          ++failed;
          ADD_FAILURE() << answer.status();
          continue;
        }
        auto crashed = CrashPositions(env.Durable(Journal()), scratch);
        if (!crashed.ok()) {
          ++failed;
          ADD_FAILURE() << crashed.status();
        } else if ((*crashed)[ids[r]] < position) {
          ++lost;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  ticker.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(lost, 0) << "answered positions a crash would lose";
  // The journal was compacted meanwhile: what a crash leaves begins with a snapshot.
  const std::string image = env.Durable(Journal());
  std::vector<journal::Update> entries;
  const std::string scratch = dir_.Join("crash-end");
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(scratch, image).ok());
  ASSERT_TRUE(ReadJournal(*Env::Default(), scratch, [&](const journal::Update& u, uint64_t) {
                entries.push_back(u);
                return absl::OkStatus();
              }).ok());
  ASSERT_FALSE(entries.empty());
  EXPECT_TRUE(entries[0].has_snapshot_job()) << entries[0].ShortDebugString();
  auto crashed = CrashPositions(image, scratch);
  ASSERT_TRUE(crashed.ok()) << crashed.status();
  const DispatcherState::TaskKey last(kAcks / 6, kAcks % 6);
  for (uint64_t id : ids) EXPECT_EQ((*crashed)[id], last) << "consumer " << id;
}

// A failed fdatasync: the call whose change it was for fails naming the journal, and so does
// every later call, reads included (they would show the change a crash may take back); a crash
// leaves the state as last acknowledged.
TEST_F(DispatcherJournalTest, AFailedSyncFailsTheCallAndEveryLaterOne) {
  testing::CrashEnv env;
  RestartSynced(&env);
  const uint64_t id = JobWithRanks(2)[0];
  ASSERT_TRUE(Consumer(id, "train", 0, 2, 0, 1).ok());
  env.set_fail_sync(true);
  auto r = Consumer(id, "train", 0, 2, 0, 2);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(),
              HasSubstr("journal " + Journal() + " is unusable until a restart: syncing it up to "
                        "byte"));
  env.set_fail_sync(false);
  auto status = impl_->GetStatus({});
  EXPECT_TRUE(absl::IsUnavailable(status.status())) << status.status();
  r = Consumer(id, "train", 0, 2, 0, 2);  // no change, but it would show the unsynced one
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  r = Consumer(id, "train", 0, 2, 0, 3);  // a change: refused
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("journal " + Journal() + " is unusable"));
  auto crashed = CrashPositions(env.Durable(Journal()), dir_.Join("crash"));
  ASSERT_TRUE(crashed.ok()) << crashed.status();
  EXPECT_EQ((*crashed)[id], DispatcherState::TaskKey(0, 1));
}

// A call whose entry waits for another call's fdatasync gives up at its own deadline, naming the
// journal; the syncing call answers once its fdatasync ends.
TEST_F(DispatcherJournalTest, AWaitForTheJournalEndsByTheCallsDeadline) {
  testing::CrashEnv env;
  RestartSynced(&env);
  const uint64_t id = JobWithRanks(2)[0];
  const uint64_t started = env.syncs_started();
  env.set_hold_syncs(true);
  absl::Status syncer;
  std::thread t([&] {
    const CallDeadline bounded(absl::Now() + absl::Seconds(20));
    syncer = Consumer(id, "train", 0, 2, 0, 1).status();
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (env.syncs_started() == started && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::StatusOr<v1::StatusResponse> status = absl::UnknownError("not called");
  {
    const CallDeadline bounded(absl::Now() + absl::Milliseconds(50));
    status = impl_->GetStatus({});
  }
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_THAT(status.status().message(), HasSubstr("journal " + Journal() + " to be synced"));
  env.set_hold_syncs(false);
  t.join();
  EXPECT_TRUE(syncer.ok()) << syncer;
  EXPECT_TRUE(impl_->GetStatus({}).ok());
}

TEST_F(DispatcherJournalTest, UnreplayableJournalFailsTheStart) {
  impl_.reset();
  {
    // A journal whose only entry does not fit an empty state: a task of an unknown job.
    auto writer = JournalWriter::Open(*Env::Default(), Journal(), 0, {.sync = false});
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(testing::TaskFinished(4, 1)).ok());
  }
  DispatcherOptions options;
  options.journal_path = Journal();
  options.clock = clock_.get();
  auto impl = DispatcherImpl::Create(options);
  EXPECT_TRUE(absl::IsDataLoss(impl.status())) << impl.status();
  EXPECT_THAT(impl.status().message(),
              HasSubstr("journal entry at byte 16 of " + Journal() + " (task_finished"));
  EXPECT_THAT(impl.status().message(), HasSubstr("task 4 is not outstanding"));
}

}  // namespace
}  // namespace croupier
