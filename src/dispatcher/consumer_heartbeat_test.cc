// ConsumerHeartbeat: registration, ranks, expiry and takeover, positions.
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

class DispatcherConsumerHeartbeatTest : public testing::DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    // 40 records, batches of 2 for 4 consumers: 20 batches, 5 steps per epoch; 2 epochs.
    WriteData({40});
    ASSERT_TRUE(Create(Spec("train", 2, 4, /*num_epochs=*/2)).ok());
  }

  void ExpectError(const absl::StatusOr<v1::ConsumerHeartbeatResponse>& r, absl::StatusCode code,
                   const std::string& substring) {
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(substring));
  }

  const v1::ConsumerStatus* StatusOf(uint64_t id) {
    status_ = *impl_->GetStatus({});
    for (const v1::ConsumerStatus& c : status_.consumers()) {
      if (c.consumer_id() == id) return &c;
    }
    return nullptr;
  }

  v1::StatusResponse status_;
};

TEST_F(DispatcherConsumerHeartbeatTest, RegistersAndReturnsTheJob) {
  auto r = Consumer(0, "train", 2, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consumer_id(), 1u);
  EXPECT_EQ(r->job().spec().name(), "train");
  EXPECT_EQ(r->job().steps_per_epoch(), 5u);
  EXPECT_EQ(r->heartbeat_interval_ms(), 1000u);
  r = Consumer(0, "train", 0, 4, /*epoch=*/1, /*step=*/3);  // resuming from a checkpoint
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consumer_id(), 2u);
  const v1::ConsumerStatus* c = StatusOf(2);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->job(), "train");
  EXPECT_EQ(c->rank(), 0u);
  EXPECT_EQ(c->epoch(), 1u);
  EXPECT_EQ(c->step(), 3u);
}

// Only the registration's answer carries the JobInfo: a later heartbeat's answer is a few dozen
// bytes whatever the job's size (it carried the whole JobInfo, its file list included, every
// second, for every consumer).
TEST_F(DispatcherConsumerHeartbeatTest, OnlyTheRegistrationsAnswerCarriesTheJob) {
  WriteData({40, 40, 40, 40, 40, 40, 40, 40});
  ASSERT_TRUE(Create(Spec("wide", 2, 4)).ok());
  auto registered = Consumer(0, "wide", 0, 4);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->job().files_size(), 8);
  auto beat = Consumer(registered->consumer_id(), "wide", 0, 4, 0, 1);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(beat->has_job());
  EXPECT_LT(beat->ByteSizeLong(), 64u) << beat->ShortDebugString();
  EXPECT_GT(beat->takeover_ms(), 0u);
}

// A status without its client lists (omit_clients) still counts them, and its job summaries are
// the full status's: a poller of jobs, counts or advice pays a few hundred bytes, not 58 a client.
TEST_F(DispatcherConsumerHeartbeatTest, AStatusWithoutClientListsStillCountsThem) {
  ASSERT_TRUE(Producer(0, "127.0.0.1:7000", /*slots=*/0).ok());
  for (uint32_t rank : {0u, 1u, 2u}) {
    auto r = Consumer(0, "train", rank, 4, /*epoch=*/0, /*step=*/rank);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  const v1::StatusResponse full = *impl_->GetStatus({});
  EXPECT_EQ(full.consumers_size(), 3);
  EXPECT_EQ(full.producers_size(), 1);
  EXPECT_EQ(full.rank_positions_size(), 3);
  v1::StatusRequest request;
  request.set_omit_clients(true);
  const v1::StatusResponse brief = *impl_->GetStatus(request);
  EXPECT_TRUE(brief.consumers().empty());
  EXPECT_TRUE(brief.producers().empty());
  EXPECT_TRUE(brief.rank_positions().empty());
  EXPECT_EQ(brief.num_consumers(), 3u);
  EXPECT_EQ(brief.num_producers(), 1u);
  EXPECT_EQ(full.num_consumers(), 3u);
  EXPECT_EQ(full.num_producers(), 1u);
  ASSERT_EQ(brief.job_summaries_size(), 1);
  EXPECT_EQ(brief.job_summaries(0).consumers(), 3u);
  EXPECT_EQ(brief.job_summaries(0).SerializeAsString(), full.job_summaries(0).SerializeAsString());
  EXPECT_EQ(brief.producer_advice().SerializeAsString(),
            full.producer_advice().SerializeAsString());
}

TEST_F(DispatcherConsumerHeartbeatTest, RegistrationErrors) {
  ExpectError(Consumer(0, "test", 0, 4), absl::StatusCode::kNotFound,
              "job 'test' is unknown (jobs: train)");
  ExpectError(Consumer(0, "train", 0, 2), absl::StatusCode::kInvalidArgument,
              "job 'train' deals to 4 consumers, but this consumer says world size 2");
  ExpectError(Consumer(0, "train", 4, 4), absl::StatusCode::kInvalidArgument,
              "rank 4 is out of range: job 'train' deals to 4 consumers, ranks 0 to 3");
  ExpectError(Consumer(0, "train", 0, 4, 2, 1), absl::StatusCode::kInvalidArgument,
              "past the end of job 'train', which has 2 epochs");
  ExpectError(Consumer(0, "train", 0, 4, 0, 6), absl::StatusCode::kInvalidArgument,
              "job 'train' has 5 steps per epoch");
  EXPECT_TRUE(impl_->GetStatus({})->consumers().empty());
}

TEST_F(DispatcherConsumerHeartbeatTest, DuplicateRankOfALiveConsumer) {
  ASSERT_TRUE(Consumer(0, "train", 1, 4).ok());
  clock_->Advance(absl::Milliseconds(2500));
  ExpectError(Consumer(0, "train", 1, 4), absl::StatusCode::kAlreadyExists,
              "rank 1 of job 'train' is held by consumer 1 (last heartbeat 2.5 s ago); a rank is "
              "taken over after 3 s without a heartbeat, or at once when its consumer closes");
  ASSERT_TRUE(Consumer(1, "train", 1, 4).ok());
  clock_->Advance(absl::Seconds(2));
  ExpectError(Consumer(0, "train", 1, 4), absl::StatusCode::kAlreadyExists, "held by consumer 1");
}

TEST_F(DispatcherConsumerHeartbeatTest, ASilentHolderIsTakenOverAfterThreeHeartbeats) {
  ASSERT_TRUE(Consumer(0, "train", 1, 4).ok());
  clock_->Advance(absl::Milliseconds(3100));
  auto r = Consumer(0, "train", 1, 4);  // a restarted trainer, before any Tick
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consumer_id(), 2u);
  ExpectError(Consumer(1, "train", 1, 4), absl::StatusCode::kNotFound,
              "consumer 1 is unknown (replaced by consumer 2 after 3.1 s without a heartbeat); "
              "register again");
}

TEST_F(DispatcherConsumerHeartbeatTest, LeavingFreesTheRankAndResumeStartsWhereItWas) {
  ASSERT_TRUE(Consumer(0, "train", 2, 4).ok());
  ASSERT_TRUE(Consumer(1, "train", 2, 4, 1, 3).ok());
  v1::ConsumerHeartbeatRequest leave;
  leave.set_consumer_id(1);
  leave.set_lease(Lease(1));
  leave.set_epoch(1);
  leave.set_step(4);
  leave.set_leaving(true);
  auto left = impl_->ConsumerHeartbeat(leave);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(StatusOf(1), nullptr);  // gone at once
  v1::ConsumerHeartbeatRequest resume;
  resume.set_job("train");
  resume.set_rank(2);
  resume.set_world(4);
  resume.set_resume(true);
  auto r = impl_->ConsumerHeartbeat(resume);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consumer_id(), 2u);
  EXPECT_EQ(r->epoch(), 1u);  // the position it left at
  EXPECT_EQ(r->step(), 4u);
  resume.set_rank(3);  // a rank never seen resumes at the start
  r = impl_->ConsumerHeartbeat(resume);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch(), 0u);
  EXPECT_EQ(r->step(), 0u);
}

TEST_F(DispatcherConsumerHeartbeatTest, GoingBackMakesFinishedTasksAgain) {
  // One consumer per rank, all at step 4 of epoch 0: the tasks before are delivered.
  for (uint32_t rank = 0; rank < 4; ++rank) ASSERT_TRUE(Consumer(0, "train", rank, 4).ok());
  auto p = Producer(0, "h:1", 8);
  ASSERT_TRUE(p.ok()) << p.status();
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(Consumer(id, "train", id - 1, 4, 0, 4).ok());
  const std::string delivered = impl_->StateDebugString();
  EXPECT_THAT(delivered, ::testing::Not(HasSubstr("orphan")));
  // Rank 0 restores a checkpoint of step 1: the tasks holding its batches from step 1 on are
  // orphans again, for any producer to make anew.
  ASSERT_TRUE(Consumer(1, "train", 0, 4, 0, 1).ok());
  const std::string reopened = impl_->StateDebugString();
  EXPECT_THAT(reopened, HasSubstr("orphan 'train' epoch 0 batch 0"));
  auto again = Producer(1, "h:1", 1);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->new_tasks_size(), 1);
  EXPECT_EQ(again->new_tasks(0).first_batch(), 0u);
}

// A consumer goes back behind a task its producer has served but not yet reported finished:
// when the report comes, the task is made again instead of finished, or its batches would be
// lost (the producer no longer holds them, and nothing else would make them).
TEST_F(DispatcherConsumerHeartbeatTest, ABatchAskedForAfterItsTaskFinishedIsMadeAgain) {
  for (uint32_t rank = 0; rank < 4; ++rank) ASSERT_TRUE(Consumer(0, "train", rank, 4).ok());
  auto p = Producer(0, "h:1", 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->new_tasks_size(), 1);
  const uint64_t task = p->new_tasks(0).task_id();
  ASSERT_EQ(p->new_tasks(0).first_batch(), 0u);
  // Rank 0 reads on to step 2, then goes back to step 0 while the producer still holds the task:
  // nothing is made again yet (the producer may still have the batches).
  ASSERT_TRUE(Consumer(1, "train", 0, 4, 0, 2).ok());
  ASSERT_TRUE(Consumer(1, "train", 0, 4, 0, 0).ok());
  // The producer reports it finished (it served rank 0's batches before rank 0 went back).
  auto done = Producer(1, "h:1", 0, {task});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_THAT(impl_->StateDebugString(), ::testing::Not(HasSubstr("orphan 'train' epoch 0 batch 0")));
  // Rank 0 asks for global batch 0 as a consumer does: its task is made again.
  v1::LocateRequest need;
  need.set_job("train");
  need.set_epoch(0);
  need.set_first_batch(0);
  need.set_num_batches(1);
  auto plain = impl_->Locate(need);  // without remake_if_finished: only where it is
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->tasks_size(), 1);
  EXPECT_TRUE(plain->tasks(0).finished());
  need.set_remake_if_finished(true);
  auto located = impl_->Locate(need);
  ASSERT_TRUE(located.ok()) << located.status();
  ASSERT_EQ(located->tasks_size(), 1);
  EXPECT_FALSE(located->tasks(0).finished());
  EXPECT_TRUE(located->tasks(0).producer_address().empty());  // an orphan: not assigned yet
  EXPECT_THAT(impl_->StateDebugString(), HasSubstr("orphan 'train' epoch 0 batch 0"));
  auto again = Producer(1, "h:1", 1);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->new_tasks_size(), 1);
  EXPECT_EQ(again->new_tasks(0).first_batch(), 0u);
  EXPECT_NE(again->new_tasks(0).task_id(), task);
  // Asking again while a producer holds it changes nothing.
  const std::string assigned = impl_->StateDebugString();
  ASSERT_TRUE(impl_->Locate(need).ok());
  EXPECT_EQ(impl_->StateDebugString(), assigned);
}

TEST_F(DispatcherConsumerHeartbeatTest, TrainersRegisteringOneAfterAnotherMakeNothingAgain) {
  // Rank 3 starts the job; its producer takes a task; the other ranks register afterwards, at
  // (0, 0) like every trainer that starts, and read their batches: nothing is made again.
  ASSERT_TRUE(Consumer(0, "train", 3, 4).ok());
  auto p = Producer(0, "h:1", 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->new_tasks_size(), 1);
  const uint64_t task = p->new_tasks(0).task_id();
  for (uint32_t rank = 0; rank < 3; ++rank) ASSERT_TRUE(Consumer(0, "train", rank, 4).ok());
  auto done = Producer(1, "h:1", 1, {task});
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->new_tasks_size(), 1);
  EXPECT_NE(done->new_tasks(0).first_batch(), 0u);  // the next task, not the first made again
}

TEST_F(DispatcherConsumerHeartbeatTest, TickExpiresSilentConsumers) {
  ASSERT_TRUE(Consumer(0, "train", 0, 4).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 4).ok());
  for (int i = 0; i < 4; ++i) {
    clock_->Advance(absl::Seconds(20));
    ASSERT_TRUE(Consumer(2, "train", 1, 4).ok());
    impl_->Tick();
  }
  EXPECT_EQ(StatusOf(1), nullptr);
  EXPECT_NE(StatusOf(2), nullptr);
  ExpectError(Consumer(1, "train", 0, 4), absl::StatusCode::kNotFound,
              "consumer 1 is unknown (expired after 60 s without a heartbeat); register again");
  auto r = Consumer(0, "train", 0, 4);  // the rank is free
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->consumer_id(), 3u);
  ExpectError(Consumer(9, "train", 0, 4), absl::StatusCode::kNotFound, "consumer 9 is unknown");
}

TEST_F(DispatcherConsumerHeartbeatTest, PositionsAndStats) {
  ASSERT_TRUE(Consumer(0, "train", 3, 4).ok());
  v1::ConsumerHeartbeatRequest request;
  request.set_consumer_id(1);
  request.set_lease(Lease(1));
  request.set_job("train");
  request.set_rank(3);
  request.set_world(4);
  request.set_epoch(0);
  request.set_step(4);
  request.set_batches_received(4);
  request.set_bytes_received(1 << 20);
  request.set_wait_seconds(0.25);
  ASSERT_TRUE(impl_->ConsumerHeartbeat(request).ok());
  clock_->Advance(absl::Seconds(2));
  const v1::ConsumerStatus* c = StatusOf(1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->step(), 4u);
  EXPECT_EQ(c->batches_received(), 4u);
  EXPECT_EQ(c->bytes_received(), 1u << 20);
  EXPECT_DOUBLE_EQ(c->wait_seconds(), 0.25);
  EXPECT_DOUBLE_EQ(c->seconds_since_heartbeat(), 2.0);
  EXPECT_THAT(impl_->StateDebugString(), HasSubstr("consumer 1 'train' rank 3 at 0/4"));

  // The end of an epoch, then the end of the job.
  ASSERT_TRUE(Consumer(1, "train", 3, 4, 0, 5).ok());
  ASSERT_TRUE(Consumer(1, "train", 3, 4, 2, 0).ok());
  EXPECT_EQ(StatusOf(1)->epoch(), 2u);
  ExpectError(Consumer(1, "train", 3, 4, 1, 6), absl::StatusCode::kInvalidArgument,
              "5 steps per epoch");
  EXPECT_EQ(StatusOf(1)->epoch(), 2u);  // unchanged
  ExpectError(Consumer(1, "train", 2, 4, 1, 0), absl::StatusCode::kInvalidArgument,
              "consumer 1 registered as rank 3 of job 'train', but this heartbeat says rank 2");
  // A heartbeat that gives only the id and position is fine.
  v1::ConsumerHeartbeatRequest bare;
  bare.set_consumer_id(1);
  bare.set_lease(Lease(1));
  bare.set_epoch(1);
  ASSERT_TRUE(impl_->ConsumerHeartbeat(bare).ok());
  EXPECT_EQ(StatusOf(1)->epoch(), 1u);
}

// Registration returns a lease, a random secret; a heartbeat for a consumer that does not carry
// its lease (another holder of the token naming the consumer's id, which status shows) is refused
// naming the consumer, not the lease, and changes nothing: the rank is not freed, the position
// does not move.
TEST_F(DispatcherConsumerHeartbeatTest, AHeartbeatWithoutItsLeaseIsRefusedAndChangesNothing) {
  ASSERT_TRUE(Consumer(0, "train", 2, 4, 0, 1).ok());  // consumer 1, the victim
  ASSERT_TRUE(Consumer(0, "train", 1, 4).ok());        // consumer 2, the thief
  ASSERT_EQ(Lease(1).size(), 16u);
  EXPECT_NE(Lease(1), Lease(2));
  for (const std::string& lease : {std::string(), Lease(2), std::string(16, '\0')}) {
    v1::ConsumerHeartbeatRequest theft;
    theft.set_consumer_id(1);
    theft.set_lease(lease);
    theft.set_epoch(0);
    theft.set_step(4);
    theft.set_leaving(true);
    auto r = impl_->ConsumerHeartbeat(theft);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr(lease.empty() ? "consumer 1: the heartbeat carries no lease"
                                        : "consumer 1: the heartbeat carries another lease"));
    EXPECT_EQ(std::string(r.status().message()).find(Lease(1)), std::string::npos);
    const v1::ConsumerStatus* victim = StatusOf(1);
    ASSERT_NE(victim, nullptr) << "the rank was freed";
    EXPECT_EQ(victim->step(), 1u) << "the position moved";
  }
  // Taking the rank over still needs it to be free: it is held, by a live consumer.
  ExpectError(Consumer(0, "train", 2, 4), absl::StatusCode::kAlreadyExists, "held by consumer 1");
  // The consumer itself, with its lease, reports and leaves.
  ASSERT_TRUE(Consumer(1, "train", 2, 4, 0, 3).ok());
  EXPECT_EQ(StatusOf(1)->step(), 3u);
}

// The lease is journaled with the registration: a restarted dispatcher knows it. And consumers
// replayed from a journal written before leases (their ConsumerRegistered has none) are trusted
// as before: their heartbeats need no lease.
TEST_F(DispatcherConsumerHeartbeatTest, TheLeaseSurvivesARestartAndOldJournalsStillReplay) {
  DispatcherOptions options;
  options.journal_path = dir_.Join("journal");
  options.journal_sync = false;
  impl_.reset();
  Recreate(options);
  ASSERT_TRUE(Create(Spec("train", 2, 4, /*num_epochs=*/2)).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 4).ok());  // consumer 1
  impl_.reset();
  Recreate(options);
  v1::ConsumerHeartbeatRequest theft;
  theft.set_consumer_id(1);
  theft.set_leaving(true);
  EXPECT_EQ(impl_->ConsumerHeartbeat(theft).status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(Consumer(1, "train", 1, 4, 0, 2).ok());  // with the lease registration returned
  ASSERT_TRUE(Consumer(1, "train", 1, 4, 0, 2).ok());
  EXPECT_EQ(StatusOf(1)->step(), 2u);

  // A registration as a dispatcher before leases journaled it: consumer 2, rank 3, no lease.
  impl_.reset();
  {
    const uint64_t size = std::filesystem::file_size(options.journal_path);
    auto writer =
        JournalWriter::Open(*Env::Default(), options.journal_path, size, {.sync = false});
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append(testing::ConsumerRegistered(2, "train", 3)).ok());
  }
  Recreate(options);
  v1::ConsumerHeartbeatRequest old;
  old.set_consumer_id(2);
  old.set_step(1);
  auto r = impl_->ConsumerHeartbeat(old);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(StatusOf(2)->step(), 1u);
  EXPECT_EQ(impl_->ConsumerHeartbeat(theft).status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace croupier
