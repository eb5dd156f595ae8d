// ProducerHeartbeat, producer expiry and GetStatus's producer part.
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/protocol.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using ProducerCut =
    std::tuple<uint64_t, std::string, uint64_t, uint64_t, uint64_t>;  // id, job, e, f, n

std::vector<ProducerCut> Cuts(const v1::ProducerHeartbeatResponse& r) {
  std::vector<ProducerCut> out;
  for (const v1::Task& t : r.new_tasks()) {
    out.emplace_back(t.task_id(), t.job(), t.epoch(), t.first_batch(), t.num_batches());
  }
  return out;
}

class DispatcherProducerHeartbeatTest : public testing::DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    // 40 records in batches of 2 for 2 consumers: 20 batches per epoch, tasks of 8.
    WriteData({25, 15});
    ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/2)).ok());
    Read("train", 2);  // consumer 1, rank 1
  }
  // A job's tasks are assigned once a consumer reads it: the highest rank registers.
  void Read(const std::string& job, uint32_t world) {
    ASSERT_TRUE(Consumer(0, job, world - 1, world).ok());
  }
};

TEST_F(DispatcherProducerHeartbeatTest, RegistersAndPullsTasksInOrder) {
  auto r = Producer(0, "h:1", 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->producer_id(), 1u);
  EXPECT_EQ(r->heartbeat_interval_ms(), 1000u);
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{1, "train", 0, 0, 8}, {2, "train", 0, 8, 8}}));
  ASSERT_EQ(r->jobs_size(), 1);  // the job comes with its first task
  EXPECT_EQ(r->jobs(0).spec().name(), "train");
  EXPECT_EQ(r->jobs(0).batches_per_epoch(), 20u);

  r = Producer(1, "h:1", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->new_tasks().empty());
  r = Producer(1, "", 3);  // the address may be left out after registration
  ASSERT_TRUE(r.ok()) << r.status();
  // The last task of an epoch is short; then the next epoch; then the job is done.
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{
                          {3, "train", 0, 16, 4}, {4, "train", 1, 0, 8}, {5, "train", 1, 8, 8}}));
  EXPECT_TRUE(r->jobs().empty());  // sent already
  r = Producer(1, "h:1", 5);
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{6, "train", 1, 16, 4}}));
  r = Producer(1, "h:1", 5);
  EXPECT_TRUE(r->new_tasks().empty());
}

TEST_F(DispatcherProducerHeartbeatTest, RegistrationNeedsAnAddress) {
  auto r = Producer(0, "", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("data server (host:port)"));
}

TEST_F(DispatcherProducerHeartbeatTest, AJobNobodyReadsGetsNoTasksUntilAConsumerComes) {
  ASSERT_TRUE(Create(Spec("unread", 2, 2)).ok());
  auto r = Producer(0, "h:1", 8);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const ProducerCut& cut : Cuts(*r)) EXPECT_EQ(std::get<1>(cut), "train");
  ASSERT_TRUE(Consumer(0, "unread", 1, 2).ok());
  r = Producer(1, "h:1", 8);
  ASSERT_TRUE(r.ok()) << r.status();
  bool unread_cut = false;
  for (const ProducerCut& cut : Cuts(*r)) unread_cut |= std::get<1>(cut) == "unread";
  EXPECT_TRUE(unread_cut);
}

TEST_F(DispatcherProducerHeartbeatTest, SlotsAreCapped) {
  ASSERT_TRUE(Create(Spec("endless", 1, 1)).ok());  // unbounded: tasks never run out
  Read("endless", 1);
  auto r = Producer(0, "h:1", 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->new_tasks_size(), static_cast<int>(kMaxTasksPerHeartbeat));
}

TEST_F(DispatcherProducerHeartbeatTest, SeveralJobsAlternate) {
  ASSERT_TRUE(Create(Spec("eval", 4, 1, 1)).ok());  // 10 batches, tasks of 4
  Read("eval", 1);
  auto r = Producer(0, "h:1", 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{1, "train", 0, 0, 8},
                                                {2, "eval", 0, 0, 4},
                                                {3, "train", 0, 8, 8},
                                                {4, "eval", 0, 4, 4},
                                                {5, "train", 0, 16, 4}}));
  EXPECT_EQ(r->jobs_size(), 2);
}

TEST_F(DispatcherProducerHeartbeatTest, FinishedTasksAreForgotten) {
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());
  auto r = Producer(1, "h:1", 1, {1, 77});  // 77 is not its task: ignored
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{3, "train", 0, 16, 4}}));
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->producers_size(), 1);
  EXPECT_THAT(status->producers(0).tasks(), ::testing::ElementsAre(2, 3));
  auto where = Locate("train", 0, 0, 20);
  ASSERT_TRUE(where.ok());
  EXPECT_TRUE(where->tasks(0).finished());
  EXPECT_EQ(where->tasks(1).producer_address(), "h:1");
  // Reporting it again (a retried heartbeat) is harmless.
  EXPECT_TRUE(Producer(1, "h:1", 0, {1}).ok());
}

TEST_F(DispatcherProducerHeartbeatTest, ExpiredProducerIsRefusedAndItsTasksGoFirst) {
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());  // tasks 1, 2
  ASSERT_TRUE(Producer(0, "h:2", 1).ok());  // task 3: [16, 20)
  clock_->Advance(absl::Seconds(6));
  ASSERT_TRUE(Producer(2, "h:2", 0).ok());
  clock_->Advance(absl::Seconds(5));  // producer 1 silent for 11 s
  impl_->Tick();
  auto old = Producer(1, "h:1", 1);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(old.status().message()),
              HasSubstr("producer 1 is unknown (expired after 10 s without a heartbeat); "
                        "register again"));
  auto where = Locate("train", 0, 0, 8);
  EXPECT_EQ(where->tasks(0).producer_address(), "");
  EXPECT_EQ(where->tasks(0).task().task_id(), 0u);

  // Producer 2 (still alive) gets the orphans first, under new ids, then new work.
  auto r = Producer(2, "h:2", 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{
                          {4, "train", 0, 0, 8}, {5, "train", 0, 8, 8}, {6, "train", 1, 0, 8}}));
  // Producer 1 rejoins fresh.
  r = Producer(0, "h:1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->producer_id(), 3u);
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{7, "train", 1, 8, 8}}));
}

TEST_F(DispatcherProducerHeartbeatTest, AnOrphanGoesEvenToAProducerWithoutFreeSlots) {
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());  // tasks 1, 2: [0, 8), [8, 16)
  ASSERT_TRUE(Producer(0, "h:2", 2).ok());  // tasks 3, 4: [16, 20), epoch 1 [0, 8)
  clock_->Advance(absl::Seconds(11));
  ASSERT_TRUE(Producer(2, "h:2", 0).ok());
  impl_->Tick();  // producer 1 expires
  // Producer 2's slots are full of later tasks, which wait for consumers that wait for the
  // orphans: it gets them anyway, one per heartbeat.
  auto r = Producer(2, "h:2", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{5, "train", 0, 0, 8}}));
  r = Producer(2, "h:2", 0);
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{6, "train", 0, 8, 8}}));
  r = Producer(2, "h:2", 0);
  EXPECT_TRUE(r->new_tasks().empty());  // no orphans left: new work waits for a free slot
}

TEST_F(DispatcherProducerHeartbeatTest, TasksEveryRankAcknowledgedPastAreRevoked) {
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());  // tasks 1, 2: [0, 8), [8, 16) = steps [0, 4), [4, 8)
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());  // consumer 2, rank 0
  ASSERT_TRUE(Consumer(2, "train", 0, 2, 0, 4).ok());
  auto r = Producer(1, "h:1", 0);
  EXPECT_TRUE(r->revoked_tasks().empty());  // rank 1 is at step 0
  ASSERT_TRUE(Consumer(1, "train", 1, 2, 0, 3).ok());
  r = Producer(1, "h:1", 0);
  EXPECT_TRUE(r->revoked_tasks().empty());  // rank 1 is at step 3
  ASSERT_TRUE(Consumer(1, "train", 1, 2, 0, 5).ok());
  r = Producer(1, "h:1", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->revoked_tasks(), ::testing::ElementsAre(1));
  EXPECT_TRUE(Locate("train", 0, 0, 1)->tasks(0).finished());
  r = Producer(1, "h:1", 0, {1});  // told once; its late report is ignored
  EXPECT_TRUE(r->revoked_tasks().empty());
  EXPECT_THAT(impl_->GetStatus({})->producers(0).tasks(), ::testing::ElementsAre(2));
}

TEST_F(DispatcherProducerHeartbeatTest, ResumedConsumersSkipTheTasksBeforeThem) {
  ASSERT_TRUE(Consumer(0, "train", 0, 2, 1, 5).ok());  // both ranks resume in epoch 1
  auto r = Producer(0, "h:1", 1);
  EXPECT_EQ(Cuts(*r),
            (std::vector<ProducerCut>{{1, "train", 0, 0, 8}}));  // rank 1 still at epoch 0
  ASSERT_TRUE(Consumer(1, "train", 1, 2, 1, 4).ok());
  // The frontier is epoch 1 step 4 = batch 8: task 1 is revoked and the cursor skips to [8, 16).
  r = Producer(1, "h:1", 2);
  EXPECT_THAT(r->revoked_tasks(), ::testing::ElementsAre(1));
  EXPECT_EQ(Cuts(*r), (std::vector<ProducerCut>{{2, "train", 1, 8, 8}, {3, "train", 1, 16, 4}}));
  EXPECT_TRUE(Locate("train", 0, 0, 20)->epoch_finished());
  auto where = Locate("train", 1, 0, 20);
  EXPECT_TRUE(where->tasks(0).finished());
  EXPECT_EQ(where->tasks(0).task().num_batches(), 8u);
}

TEST_F(DispatcherProducerHeartbeatTest, HeartbeatsKeepAProducerAlive) {
  ASSERT_TRUE(Producer(0, "h:1", 1).ok());
  for (int i = 0; i < 5; ++i) {
    clock_->Advance(absl::Seconds(9));
    impl_->Tick();
    ASSERT_TRUE(Producer(1, "h:1", 0).ok()) << i;
  }
  clock_->Advance(absl::Seconds(10));  // exactly the timeout: not older than it
  impl_->Tick();
  EXPECT_TRUE(Producer(1, "h:1", 0).ok());
}

TEST_F(DispatcherProducerHeartbeatTest, RestartAtTheSameAddressReplacesTheOldProducer) {
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());  // tasks 1, 2
  auto r = Producer(0, "h:1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->producer_id(), 2u);
  EXPECT_EQ(Cuts(*r),
            (std::vector<ProducerCut>{{3, "train", 0, 0, 8}}));  // its own old task, again
  ASSERT_EQ(r->jobs_size(), 1);
  auto old = Producer(1, "h:1", 1);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(old.status().message()),
              HasSubstr("producer 1 is unknown (replaced by producer 2 at the same address h:1)"));
}

TEST_F(DispatcherProducerHeartbeatTest, OtherRefusals) {
  auto never = Producer(5, "h:5", 1);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(never.status().message()),
              HasSubstr("producer 5 is unknown (this dispatcher never registered it"));
  ASSERT_TRUE(Producer(0, "h:1", 0).ok());
  auto moved = Producer(1, "h:9", 0);
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(moved.status().message()),
      HasSubstr("producer 1 registered with data address h:1, but this heartbeat gives h:9"));
}

TEST_F(DispatcherProducerHeartbeatTest, StatusShowsStatsAndThroughput) {
  ASSERT_TRUE(Producer(0, "h:1", 1).ok());
  v1::ProducerHeartbeatRequest request;
  request.set_producer_id(1);
  request.mutable_stats()->set_batches_made(100);
  request.mutable_stats()->set_buffered_bytes(4096);
  ASSERT_TRUE(impl_->ProducerHeartbeat(request).ok());
  clock_->Advance(absl::Seconds(2));
  request.mutable_stats()->set_batches_made(160);
  ASSERT_TRUE(impl_->ProducerHeartbeat(request).ok());
  clock_->Advance(absl::Milliseconds(1500));
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->producers_size(), 1);
  const v1::ProducerStatus& p = status->producers(0);
  EXPECT_EQ(p.producer_id(), 1u);
  EXPECT_EQ(p.data_address(), "h:1");
  EXPECT_EQ(p.stats().batches_made(), 160u);
  EXPECT_EQ(p.stats().buffered_bytes(), 4096u);
  EXPECT_DOUBLE_EQ(p.batches_per_second(), 30.0);
  EXPECT_DOUBLE_EQ(p.seconds_since_heartbeat(), 1.5);
  EXPECT_THAT(p.tasks(), ::testing::ElementsAre(1));
  ASSERT_EQ(status->job_summaries_size(), 1);
  EXPECT_EQ(status->protocol_version(), kProtocolVersion);
}

TEST_F(DispatcherProducerHeartbeatTest, ALeavingProducersTasksGoToAnotherAtOnce) {
  auto first = Producer(0, "h:1", 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(Cuts(*first).size(), 2u);
  auto second = Producer(0, "h:2", 0);
  ASSERT_TRUE(second.ok()) << second.status();
  // Batch 0's task is producer 1's; the consumer would be sent there.
  auto located = Locate("train", 0, 0, 1);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_EQ(located->tasks(0).producer_address(), "h:1");

  // Producer 1 leaves, having finished its first task: the other becomes an orphan now, not
  // after the producer timeout, and the answer gives it nothing.
  v1::ProducerHeartbeatRequest leave;
  leave.set_producer_id(1);
  leave.set_data_address("h:1");
  leave.add_finished_tasks(1);
  leave.set_free_task_slots(2);
  leave.set_leaving(true);
  auto left = impl_->ProducerHeartbeat(leave);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->new_tasks().empty());
  located = Locate("train", 0, 8, 1);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_TRUE(located->tasks(0).producer_address().empty());
  EXPECT_THAT(located->tasks(0).waiting_for(), HasSubstr("producer 2 at h:2 holds 0 tasks"));
  auto taken = Producer(2, "h:2", 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(Cuts(*taken).size(), 1u);
  EXPECT_EQ(std::get<3>(Cuts(*taken)[0]), 8u);  // the orphan first
  // Producer 1 is gone: its next heartbeat is told so.
  auto after = Producer(1, "h:1", 2);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(after.status().message()), HasSubstr("it left"));
}

TEST_F(DispatcherProducerHeartbeatTest, ADrainingProducerServesWhatItMadeAndHandsBackTheRest) {
  auto first = Producer(0, "h:1", 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(Cuts(*first).size(), 2u);  // tasks 1 (batches [0, 8)) and 2 ([8, 16))
  auto second = Producer(0, "h:2", 0);
  ASSERT_TRUE(second.ok()) << second.status();

  // Producer 1 drains, having made task 1 whole: it keeps task 1, and task 2 is revoked from it
  // and becomes an orphan at once.
  v1::ProducerHeartbeatRequest drain;
  drain.set_producer_id(1);
  drain.set_data_address("h:1");
  drain.add_held_tasks(1);
  drain.add_held_tasks(2);
  drain.set_held_tasks_reported(true);
  drain.set_draining(true);
  drain.add_made_tasks(1);
  auto drained = impl_->ProducerHeartbeat(drain);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->new_tasks().empty());
  EXPECT_THAT(drained->revoked_tasks(), ::testing::ElementsAre(2));
  auto located = Locate("train", 0, 0, 1);  // its made batches are still fetched from it
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_EQ(located->tasks(0).producer_address(), "h:1");
  located = Locate("train", 0, 8, 1);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_TRUE(located->tasks(0).producer_address().empty());
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->producers(0).draining());
  EXPECT_FALSE(status->producers(1).draining());

  // The other producer takes the orphan first; the drainer gets nothing, even asking for work.
  auto taken = Producer(2, "h:2", 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(Cuts(*taken).size(), 1u);
  EXPECT_EQ(std::get<3>(Cuts(*taken)[0]), 8u);
  drain.clear_held_tasks();
  drain.add_held_tasks(1);
  drain.set_free_task_slots(2);
  auto again = impl_->ProducerHeartbeat(drain);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->new_tasks().empty());
  EXPECT_TRUE(again->revoked_tasks().empty());

  // It served task 1 and leaves: nothing is left to assign again.
  v1::ProducerHeartbeatRequest leave;
  leave.set_producer_id(1);
  leave.set_data_address("h:1");
  leave.add_finished_tasks(1);
  leave.set_leaving(true);
  ASSERT_TRUE(impl_->ProducerHeartbeat(leave).ok());
  located = Locate("train", 0, 0, 1);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_TRUE(located->tasks(0).producer_address().empty());  // finished, not an orphan
  EXPECT_TRUE(located->tasks(0).waiting_for().empty()) << located->tasks(0).waiting_for();
}

TEST_F(DispatcherProducerHeartbeatTest, ADrainerThatDiesHasWhatItKeptReassignedAtItsExpiry) {
  ASSERT_TRUE(Producer(0, "h:1", 2).ok());  // tasks 1 ([0, 8)) and 2 ([8, 16))
  v1::ProducerHeartbeatRequest drain;
  drain.set_producer_id(1);
  drain.set_draining(true);
  drain.add_made_tasks(1);
  drain.add_made_tasks(2);
  ASSERT_TRUE(impl_->ProducerHeartbeat(drain).ok());
  ASSERT_TRUE(Producer(0, "h:2", 0).ok());
  clock_->Advance(absl::Seconds(11));
  ASSERT_TRUE(Producer(2, "h:2", 0).ok());
  impl_->Tick();  // producer 1 expires, draining
  auto taken = Producer(2, "h:2", 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(Cuts(*taken).size(), 2u);
  EXPECT_EQ(std::get<3>(Cuts(*taken)[0]), 0u);
  EXPECT_EQ(std::get<3>(Cuts(*taken)[1]), 8u);
}

TEST_F(DispatcherProducerHeartbeatTest, ABatchNotAssignedYetSaysWhy) {
  // No producer at all.
  auto located = Locate("train", 0, 0, 1);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_THAT(located->tasks(0).waiting_for(), HasSubstr("no producer is registered"));
  // A producer with its slots full: the task waits behind what it holds.
  ASSERT_TRUE(Producer(0, "h:1", 1).ok());
  located = Locate("train", 0, 8, 1);
  ASSERT_TRUE(located.ok()) << located.status();
  EXPECT_THAT(located->tasks(0).waiting_for(),
              HasSubstr("producer 1 at h:1 holds 1 tasks, the first batches [0, 8) of job "
                        "'train' epoch 0"));
}

}  // namespace
}  // namespace croupier
