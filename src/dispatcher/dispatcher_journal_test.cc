// DispatcherImpl with a journal: restarts rebuild the state, lost assignments are sent again,
// and a journal that cannot be written fails the call without changing the state.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
