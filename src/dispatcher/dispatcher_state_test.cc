#include "src/dispatcher/dispatcher_state.h"

#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dispatcher/task_assignment.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using namespace ::croupier::testing;  // NOLINT: the update helpers

// Applies `update`, expects it refused with `code` and `substring`, and the state unchanged.
void ExpectRefused(DispatcherState& state, const journal::Update& update, absl::StatusCode code,
                   const std::string& substring) {
  const std::string before = state.DebugString();
  absl::Status status = state.Apply(update);
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(substring));
  EXPECT_EQ(state.DebugString(), before);
}

void MustApply(DispatcherState& state, const journal::Update& update) {
  absl::Status status = state.Apply(update);
  ASSERT_TRUE(status.ok()) << status << " applying " << update.ShortDebugString();
}

// Job "a" of `batches` batches an epoch (2 consumers, tasks of 4), and producers 1 at h:1 and 2
// at h:2.
DispatcherState JobAndTwoProducers(uint64_t batches) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", batches, 2, 4)));
  MustApply(state, ProducerRegistered(1, "h:1"));
  MustApply(state, ProducerRegistered(2, "h:2"));
  return state;
}

TEST(DispatcherStateTest, JobCreated) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 12, 2, 4)));
  MustApply(state, JobCreated(FakeJob("b", 6, 3, 3, 2, "first_come")));
  const DispatcherState::Job* a = state.FindJob("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->sequence, 0u);
  EXPECT_EQ(a->config.mode, DealMode::kDealt);
  EXPECT_EQ(a->next_epoch, 0u);
  EXPECT_EQ(a->next_batch, 0u);
  EXPECT_EQ(state.FindJob("b")->config.mode, DealMode::kFirstCome);
  EXPECT_EQ(state.FindJob("b")->sequence, 1u);
  EXPECT_EQ(state.job_order(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(state.FindJob("c"), nullptr);
}

TEST(DispatcherStateTest, BadJobCreatedRefused) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 12, 2, 4)));
  ExpectRefused(state, JobCreated(FakeJob("a", 12, 2, 4)), absl::StatusCode::kFailedPrecondition,
                "job 'a' exists already");
  ExpectRefused(state, JobCreated(FakeJob("", 12, 2, 4)), absl::StatusCode::kInvalidArgument,
                "without a job name");
  ExpectRefused(state, JobCreated(FakeJob("b", 12, 2, 4), kPlanVersion + 1),
                absl::StatusCode::kFailedPrecondition, "plan version");
  v1::JobInfo unknown_mode = FakeJob("b", 12, 2, 4);
  unknown_mode.mutable_spec()->set_mode(static_cast<v1::DealMode>(9));
  ExpectRefused(state, JobCreated(unknown_mode), absl::StatusCode::kInvalidArgument,
                "mode 9 is not a value this croupier knows");
  ExpectRefused(state, JobCreated(FakeJob("b", 12, 0, 4)), absl::StatusCode::kInvalidArgument,
                "inconsistent counts");
  ExpectRefused(state, JobCreated(FakeJob("b", 13, 2, 4)), absl::StatusCode::kInvalidArgument,
                "inconsistent counts");
  ExpectRefused(state, JobCreated(FakeJob("b", 12, 2, 0)), absl::StatusCode::kInvalidArgument,
                "inconsistent counts");
}

TEST(DispatcherStateTest, ProducerRegisteredInIdOrder) {
  DispatcherState state;
  EXPECT_EQ(state.next_producer_id(), 1u);
  MustApply(state, ProducerRegistered(1, "h:1"));
  EXPECT_EQ(state.next_producer_id(), 2u);
  EXPECT_EQ(state.FindProducer(1)->data_address, "h:1");
  EXPECT_EQ(state.ProducerAt("h:1")->id, 1u);
  ExpectRefused(state, ProducerRegistered(3, "h:3"), absl::StatusCode::kFailedPrecondition,
                "producer id 3 out of order; expected 2");
  ExpectRefused(state, ProducerRegistered(1, "h:3"), absl::StatusCode::kFailedPrecondition,
                "out of order");
  ExpectRefused(state, ProducerRegistered(2, ""), absl::StatusCode::kInvalidArgument,
                "without a data address");
  ExpectRefused(state, ProducerRegistered(2, "h:1"), absl::StatusCode::kFailedPrecondition,
                "address h:1 is held by producer 1");
}

TEST(DispatcherStateTest, TaskAssignedCutsAtTheCursor) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 10, 2, 4, 2)));
  MustApply(state, ProducerRegistered(1, "h:1"));
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  MustApply(state, TaskAssigned(MakeTask(2, "a", 0, 4, 4), 1));
  const DispatcherState::Job& a = *state.FindJob("a");
  EXPECT_EQ(a.next_epoch, 0u);
  EXPECT_EQ(a.next_batch, 8u);
  // The last task of the epoch is short: [8, 10).
  ExpectRefused(
      state, TaskAssigned(MakeTask(3, "a", 0, 8, 4), 1), absl::StatusCode::kFailedPrecondition,
      "covers epoch 0 batches [8, 12), which is neither an orphan nor the job's next task "
      "(epoch 0 batch 8)");
  MustApply(state, TaskAssigned(MakeTask(3, "a", 0, 8, 2), 1));
  EXPECT_EQ(a.next_epoch, 1u);
  EXPECT_EQ(a.next_batch, 0u);
  EXPECT_EQ(state.last_cut_job(), "a");
  EXPECT_EQ(state.FindProducer(1)->tasks, (std::set<uint64_t>{1, 2, 3}));
  EXPECT_EQ(state.FindTask(3)->num_batches(), 2u);
  EXPECT_EQ(state.next_task_id(), 4u);
}

TEST(DispatcherStateTest, BadTaskAssignedRefused) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 4, 2, 4, 1)));
  MustApply(state, ProducerRegistered(1, "h:1"));
  ExpectRefused(state, TaskAssigned(MakeTask(2, "a", 0, 0, 4), 1),
                absl::StatusCode::kFailedPrecondition, "task id 2 out of order; expected 1");
  ExpectRefused(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 9),
                absl::StatusCode::kFailedPrecondition, "producer 9, which is unknown");
  ExpectRefused(state, TaskAssigned(MakeTask(1, "z", 0, 0, 4), 1),
                absl::StatusCode::kFailedPrecondition, "job 'z', which is unknown");
  ExpectRefused(state, TaskAssigned(MakeTask(1, "a", 0, 0, 0), 1),
                absl::StatusCode::kInvalidArgument, "task 1 is empty");
  ExpectRefused(state, TaskAssigned(MakeTask(1, "a", 0, 4, 4), 1),
                absl::StatusCode::kFailedPrecondition, "neither an orphan nor");
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  EXPECT_TRUE(state.FindJob("a")->exhausted());
  // The job has one epoch: nothing more to cut.
  ExpectRefused(state, TaskAssigned(MakeTask(2, "a", 1, 0, 4), 1),
                absl::StatusCode::kFailedPrecondition, "every epoch is cut already");
}

TEST(DispatcherStateTest, TaskFinished) {
  DispatcherState state = JobAndTwoProducers(8);
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  MustApply(state, TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  ExpectRefused(state, TaskFinished(1, 2), absl::StatusCode::kFailedPrecondition,
                "task 1 is owned by producer 1, not 2");
  ExpectRefused(state, TaskFinished(7, 1), absl::StatusCode::kFailedPrecondition,
                "task 7 is not outstanding");
  MustApply(state, TaskFinished(1, 1));
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_TRUE(state.FindProducer(1)->tasks.empty());
  EXPECT_EQ(state.FindJob("a")->tasks_finished, 1u);
  EXPECT_EQ(state.FindJob("a")->batches_finished, 4u);
  EXPECT_EQ(state.FindJob("a")->outstanding.size(), 1u);
  ExpectRefused(state, TaskFinished(1, 1), absl::StatusCode::kFailedPrecondition,
                "not outstanding");
}

TEST(DispatcherStateTest, TaskRemadeMakesAFinishedTaskAnOrphan) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 8, 2, 4)));
  MustApply(state, JobCreated(FakeJob("b", 8, 2, 4, 0, "first_come")));
  MustApply(state, ProducerRegistered(1, "h:1"));
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  ExpectRefused(state, TaskRemade("a", 0, 0), absl::StatusCode::kFailedPrecondition,
                "not the start of a finished task");  // held
  ExpectRefused(state, TaskRemade("a", 0, 4), absl::StatusCode::kFailedPrecondition,
                "not the start of a finished task");  // not cut yet
  ExpectRefused(state, TaskRemade("c", 0, 0), absl::StatusCode::kFailedPrecondition, "unknown");
  MustApply(state, TaskFinished(1, 1));
  ExpectRefused(state, TaskRemade("a", 0, 2), absl::StatusCode::kFailedPrecondition,
                "not the start of a finished task");  // inside it, not its start
  MustApply(state, TaskRemade("a", 0, 0));
  EXPECT_THAT(state.DebugString(), HasSubstr("orphan 'a' epoch 0 batch 0"));
  EXPECT_EQ(state.FindJob("a")->outstanding.size(), 1u);
  ExpectRefused(state, TaskRemade("a", 0, 0), absl::StatusCode::kFailedPrecondition,
                "not the start of a finished task");  // an orphan already
  MustApply(state, TaskAssigned(MakeTask(2, "a", 0, 0, 4), 1));  // reassigned whole
  MustApply(state, TaskAssigned(MakeTask(3, "b", 0, 0, 4), 1));
  MustApply(state, TaskFinished(3, 1));
  ExpectRefused(state, TaskRemade("b", 0, 0), absl::StatusCode::kFailedPrecondition,
                "not the start of a finished task");  // first_come: nothing is a rank's own
}

TEST(DispatcherStateTest, ProducerRemovedOrphansItsTasks) {
  DispatcherState state = JobAndTwoProducers(12);
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  MustApply(state, TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  MustApply(state, TaskAssigned(MakeTask(3, "a", 0, 8, 4), 1));
  MustApply(state, ProducerRemoved(1));
  EXPECT_EQ(state.FindProducer(1), nullptr);
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_EQ(state.FindTask(3), nullptr);
  ASSERT_EQ(state.orphans().size(), 2u);
  EXPECT_EQ(state.orphans().begin()->first_batch, 0u);
  EXPECT_EQ(state.FindJob("a")->outstanding.at({0, 8}).producer_id, 0u);
  // The address is free again.
  MustApply(state, ProducerRegistered(3, "h:1"));
  ExpectRefused(state, ProducerRemoved(1), absl::StatusCode::kFailedPrecondition,
                "producer 1 is unknown");
  // An orphan goes again under a new id, with its exact range only.
  ExpectRefused(state, TaskAssigned(MakeTask(4, "a", 0, 8, 2), 3),
                absl::StatusCode::kFailedPrecondition, "neither an orphan nor");
  MustApply(state, TaskAssigned(MakeTask(4, "a", 0, 8, 4), 3));
  EXPECT_EQ(state.orphans().size(), 1u);
  EXPECT_EQ(state.FindTask(4)->first_batch(), 8u);
  EXPECT_EQ(state.FindJob("a")->outstanding.at({0, 8}).task_id, 4u);
  // Reassigning an orphan does not move the cursor.
  EXPECT_EQ(state.FindJob("a")->next_epoch, 1u);
  EXPECT_EQ(state.FindJob("a")->next_batch, 0u);
}

TEST(DispatcherStateTest, ADrainingProducerKeepsItsMadeTasksAndGetsNoOther) {
  DispatcherState state = JobAndTwoProducers(12);
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  MustApply(state, TaskAssigned(MakeTask(2, "a", 0, 4, 4), 1));
  ExpectRefused(state, ProducerDraining(1, {1, 3}), absl::StatusCode::kFailedPrecondition,
                "keeps task 3, which it does not own");
  ExpectRefused(state, ProducerDraining(7, {}), absl::StatusCode::kFailedPrecondition,
                "producer 7 is unknown");
  MustApply(state, ProducerDraining(1, {1}));
  EXPECT_TRUE(state.FindProducer(1)->draining);
  EXPECT_EQ(state.FindProducer(1)->tasks, std::set<uint64_t>{1});
  EXPECT_EQ(state.FindJob("a")->outstanding.at({0, 0}).producer_id, 1u);  // Locate sends there
  ASSERT_EQ(state.orphans().size(), 1u);
  EXPECT_EQ(state.orphans().begin()->first_batch, 4u);
  ExpectRefused(state, ProducerDraining(1, {1}), absl::StatusCode::kFailedPrecondition,
                "drains already");
  // Nothing new goes to it, neither the orphan nor the next task; the other producer takes both.
  EXPECT_FALSE(NextTask(state, *state.FindProducer(1)).has_value());
  ExpectRefused(state, TaskAssigned(MakeTask(3, "a", 0, 4, 4), 1),
                absl::StatusCode::kFailedPrecondition, "which drains");
  MustApply(state, TaskAssigned(MakeTask(3, "a", 0, 4, 4), 2));
  // It finishes what it kept, and leaves.
  MustApply(state, TaskFinished(1, 1));
  MustApply(state, ProducerRemoved(1));
  EXPECT_TRUE(state.orphans().empty());
  // A registration cannot say it drains (only a snapshot can).
  journal::Update draining = ProducerRegistered(3, "h:3");
  draining.mutable_producer_registered()->set_draining(true);
  ExpectRefused(state, draining, absl::StatusCode::kInvalidArgument, "outside a snapshot");
}

TEST(DispatcherStateTest, Consumers) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 12, 3, 3, 2)));
  MustApply(state, ConsumerRegistered(1, "a", 0));
  MustApply(state, ConsumerRegistered(2, "a", 2, 1, 3));
  EXPECT_EQ(state.ConsumerAt("a", 2)->id, 2u);
  EXPECT_EQ(state.FindConsumer(2)->epoch, 1u);
  EXPECT_EQ(state.FindConsumer(2)->step, 3u);
  ExpectRefused(state, ConsumerRegistered(3, "a", 0), absl::StatusCode::kFailedPrecondition,
                "rank 0 of job 'a' is held by consumer 1");
  ExpectRefused(state, ConsumerRegistered(3, "a", 3), absl::StatusCode::kInvalidArgument,
                "rank 3 of job 'a', which has 3 consumers");
  ExpectRefused(state, ConsumerRegistered(3, "b", 0), absl::StatusCode::kFailedPrecondition,
                "job 'b', which is unknown");
  ExpectRefused(state, ConsumerRegistered(5, "a", 1), absl::StatusCode::kFailedPrecondition,
                "consumer id 5 out of order; expected 3");
  ExpectRefused(state, ConsumerRegistered(3, "a", 1, 2, 1), absl::StatusCode::kInvalidArgument,
                "job 'a', which has 2 epochs");
  ExpectRefused(state, ConsumerRegistered(3, "a", 1, 0, 5), absl::StatusCode::kInvalidArgument,
                "has 4 steps per epoch");

  MustApply(state, ConsumerAcknowledged(1, 1, 4));
  EXPECT_EQ(state.FindConsumer(1)->epoch, 1u);
  EXPECT_EQ(state.FindConsumer(1)->step, 4u);
  MustApply(state, ConsumerAcknowledged(1, 2, 0));  // done with both epochs
  ExpectRefused(state, ConsumerAcknowledged(1, 2, 1), absl::StatusCode::kInvalidArgument,
                "past the end of job 'a'");
  ExpectRefused(state, ConsumerAcknowledged(9, 0, 0), absl::StatusCode::kFailedPrecondition,
                "consumer 9 is unknown");

  MustApply(state, ConsumerRemoved(1));
  EXPECT_EQ(state.ConsumerAt("a", 0), nullptr);
  ExpectRefused(state, ConsumerRemoved(1), absl::StatusCode::kFailedPrecondition,
                "consumer 1 is unknown");
  MustApply(state, ConsumerRegistered(3, "a", 0));  // the rank is free again
}

// The indexes behind ConsumerAt, HasConsumers, ProducerAt and the delivered frontier agree with
// the maps they index through registrations, acknowledgements (moving positions back and forth),
// removals, and a state rebuilt from a copy.
TEST(DispatcherStateTest, TheIndexesFollowEveryChange) {
  constexpr uint32_t kRanks = 40;
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 4 * kRanks, kRanks, kRanks, 3)));
  MustApply(state, ProducerRegistered(1, "h:1"));
  MustApply(state, ProducerRegistered(2, "h:2"));
  EXPECT_EQ(state.ProducerAt("h:2")->id, 2u);
  MustApply(state, ProducerRemoved(2));
  EXPECT_EQ(state.ProducerAt("h:2"), nullptr);
  EXPECT_FALSE(state.HasConsumers("a"));
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_FALSE(state.DeliveredFrontier(*state.FindJob("a")).has_value());
    MustApply(state, ConsumerRegistered(r + 1, "a", r));
  }
  EXPECT_TRUE(state.HasConsumers("a"));
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t id = 1 + rng() % kRanks;
    MustApply(state, ConsumerAcknowledged(id, rng() % 3, rng() % 5));
    if (i % 97 == 0) {
      DispatcherState copy = state;
      state = copy;
    }
    std::optional<DispatcherState::TaskKey> brute;
    for (const auto& [rank, p] : state.FindJob("a")->rank_positions) {
      if (!brute || p < *brute) brute = p;
    }
    ASSERT_EQ(state.DeliveredFrontier(*state.FindJob("a")), brute) << i;
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_EQ(state.ConsumerAt("a", r)->id, r + 1);
    MustApply(state, ConsumerRemoved(r + 1));
    ASSERT_EQ(state.ConsumerAt("a", r), nullptr);
    ASSERT_EQ(state.HasConsumers("a"), r + 1 < kRanks);
  }
  EXPECT_EQ(state.ProducerAt("h:1")->id, 1u);
}

TEST(DispatcherStateTest, FirstComePositionsCountBatches) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("f", 12, 3, 3, 0, "first_come")));
  MustApply(state, ConsumerRegistered(1, "f", 0, 5, 12));  // unbounded; up to 12 batches
  ExpectRefused(state, ConsumerAcknowledged(1, 0, 13), absl::StatusCode::kInvalidArgument,
                "has 12 batches per epoch");
}

TEST(DispatcherStateTest, TasksDeliveredFinishesEverythingBeforeTheFrontier) {
  DispatcherState state;
  // 12 batches per epoch for 2 consumers (6 steps), tasks of 4 batches (2 steps).
  MustApply(state, JobCreated(FakeJob("a", 12, 2, 4)));
  MustApply(state, ProducerRegistered(1, "h:1"));
  MustApply(state, ProducerRegistered(2, "h:2"));
  MustApply(state, TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  MustApply(state, TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  MustApply(state, TaskAssigned(MakeTask(3, "a", 0, 8, 4), 2));
  MustApply(state, ProducerRemoved(2));  // [4, 8) and [8, 12) are orphans
  MustApply(state, ConsumerRegistered(1, "a", 0, 0, 5));
  EXPECT_FALSE(state.DeliveredFrontier(*state.FindJob("a")).has_value());  // rank 1 missing
  ExpectRefused(state, TasksDelivered("a", 0, 1), absl::StatusCode::kFailedPrecondition,
                "no frontier");
  MustApply(state, ConsumerRegistered(2, "a", 1, 0, 4));
  EXPECT_EQ(state.DeliveredFrontier(*state.FindJob("a")), DispatcherState::TaskKey(0, 4));
  ExpectRefused(state, TasksDelivered("a", 0, 5), absl::StatusCode::kFailedPrecondition,
                "the frontier is epoch 0 step 4");
  ExpectRefused(state, TasksDelivered("z", 0, 0), absl::StatusCode::kFailedPrecondition,
                "job 'z', which is unknown");
  EXPECT_EQ(DispatcherState::TasksBefore(*state.FindJob("a"), 0, 4).size(), 2u);
  MustApply(state, TasksDelivered("a", 0, 4));
  // The owned task and the orphan before step 4 are finished; [8, 12) is still an orphan.
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_TRUE(state.FindProducer(1)->tasks.empty());
  ASSERT_EQ(state.orphans().size(), 1u);
  EXPECT_EQ(state.orphans().begin()->first_batch, 8u);
  EXPECT_EQ(state.FindJob("a")->tasks_finished, 2u);
  EXPECT_EQ(state.FindJob("a")->batches_finished, 8u);
  MustApply(state, TasksDelivered("a", 0, 4));  // nothing left before it: a no-op
  EXPECT_EQ(state.FindJob("a")->tasks_finished, 2u);
}

TEST(DispatcherStateTest, TasksDeliveredMovesTheCursorPastUnneededTasks) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("a", 12, 2, 4, 2)));  // tasks of 2 steps
  MustApply(state, ConsumerRegistered(1, "a", 0, 0, 3));
  MustApply(state, ConsumerRegistered(2, "a", 1, 0, 5));
  // Step 3 is batch 6, in the task [4, 8): the cursor skips [0, 4) only.
  EXPECT_EQ(DispatcherState::FirstUndeliveredTask(*state.FindJob("a"), 0, 3),
            DispatcherState::TaskKey(0, 4));
  MustApply(state, TasksDelivered("a", 0, 3));
  EXPECT_EQ(state.FindJob("a")->next_batch, 4u);
  EXPECT_EQ(state.FindJob("a")->tasks_finished, 0u);  // skipped, never cut
  MustApply(state, ConsumerAcknowledged(1, 1, 6));
  MustApply(state, ConsumerAcknowledged(2, 2, 0));
  MustApply(state, TasksDelivered("a", 1, 6));  // the end of epoch 1: the job is done
  EXPECT_TRUE(state.FindJob("a")->exhausted());
  // A frontier behind the cursor leaves it alone.
  MustApply(state, TasksDelivered("a", 0, 0));
  EXPECT_EQ(state.FindJob("a")->next_epoch, 2u);
}

// TasksToReopen against its definition, on jobs resumed or not, with cursors and outstanding
// tasks drawn at random: the tasks cut (before the cursor), from the one holding the position's
// first batch on, that are not outstanding; in order, and never a position that is no task.
TEST(DispatcherStateTest, TasksToReopenAreTheFinishedTasksFromThePositionToTheCursor) {
  std::mt19937_64 random(7);
  int fast = 0;  // draws where every task in range was outstanding
  for (int trial = 0; trial < 3000; ++trial) {
    const uint32_t consumers = 1 + random() % 4;
    const uint64_t batches = consumers * (1 + random() % 6) + random() % consumers;
    const uint64_t per_task = 1 + random() % 5;
    v1::JobInfo info = FakeJob("a", batches, consumers, per_task);
    const uint64_t start_epoch = random() % 3;
    info.mutable_spec()->set_start_epoch(start_epoch);
    info.mutable_spec()->set_start_batch(random() % (batches + 1));
    DispatcherState::Job job;
    job.info = std::make_shared<const v1::JobInfo>(info);
    job.config = *ParseJobConfig(info);
    const JobConfig& config = job.config;
    // Every task of the first epochs, in order.
    std::vector<DispatcherState::TaskKey> tasks;
    for (uint64_t e = 0; e < start_epoch + 3; ++e) {
      for (uint64_t b = config.FirstBatch(e); b < config.EndBatch(e); b += per_task) {
        tasks.emplace_back(e, b);
      }
    }
    // The cursor after some of them; each cut one outstanding or not.
    const size_t cut = random() % (tasks.size() + 1);
    DispatcherState::TaskKey cursor = cut < tasks.size()
                                          ? tasks[cut]
                                          : DispatcherState::TaskKey(start_epoch + 3, 0);
    job.next_epoch = cursor.first;
    job.next_batch = cursor.second;
    const bool all_outstanding = random() % 2 == 0;
    for (size_t i = 0; i < cut; ++i) {
      if (all_outstanding || random() % 3 != 0) job.outstanding[tasks[i]].num_batches = 1;
    }
    const uint64_t epoch = random() % (start_epoch + 3);
    const uint64_t step = random() % (config.StepsInEpoch(epoch) + 1);
    const DispatcherState::TaskKey from = DispatcherState::FirstUndeliveredTask(job, epoch, step);
    std::vector<DispatcherState::TaskKey> expected;
    for (size_t i = 0; i < cut; ++i) {
      if (tasks[i] >= from && !job.outstanding.contains(tasks[i])) expected.push_back(tasks[i]);
    }
    if (expected.empty()) ++fast;
    EXPECT_EQ(DispatcherState::TasksToReopen(job, epoch, step), expected)
        << "trial " << trial << ": " << consumers << " consumers, " << batches
        << " batches, tasks of " << per_task << ", from epoch " << start_epoch << " batch "
        << info.spec().start_batch() << ", cursor (" << cursor.first << ", " << cursor.second
        << "), position epoch " << epoch << " step " << step;
  }
  EXPECT_GT(fast, 500);
}

TEST(DispatcherStateTest, FirstComeJobsHaveNoDeliveredFrontier) {
  DispatcherState state;
  MustApply(state, JobCreated(FakeJob("f", 4, 1, 4, 0, "first_come")));
  MustApply(state, ConsumerRegistered(1, "f", 0, 3, 0));
  EXPECT_FALSE(state.DeliveredFrontier(*state.FindJob("f")).has_value());
  ExpectRefused(state, TasksDelivered("f", 0, 0), absl::StatusCode::kFailedPrecondition,
                "first_come");
}

TEST(DispatcherStateTest, UpdateWithoutKindRefused) {
  DispatcherState state;
  ExpectRefused(state, journal::Update(), absl::StatusCode::kInvalidArgument, "no kind set");
}

TEST(DispatcherStateTest, ReplayRebuildsTheStateExactly) {
  // Every kind of update, with refused ones in between (which a journal never holds).
  std::vector<journal::Update> updates = {
      JobCreated(FakeJob("a", 10, 2, 4, 2)),
      JobCreated(FakeJob("b", 6, 3, 3, 0, "first_come")),
      ProducerRegistered(1, "h:1"),
      ProducerRegistered(2, "h:2"),
      TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1),
      TaskAssigned(MakeTask(2, "b", 0, 0, 3), 2),
      TaskAssigned(MakeTask(3, "a", 0, 4, 4), 2),
      TaskAssigned(MakeTask(9, "a", 0, 8, 2), 2),  // refused: out of order
      TaskFinished(2, 2),
      ConsumerRegistered(1, "a", 0),
      ConsumerRegistered(2, "a", 1),
      ConsumerRegistered(3, "b", 2, 3, 1),
      ConsumerAcknowledged(1, 0, 2),
      ProducerRemoved(1),
      ProducerRegistered(3, "h:1"),
      TaskAssigned(MakeTask(4, "a", 0, 0, 4), 3),
      TaskAssigned(MakeTask(5, "a", 0, 8, 2), 3),
      TaskFinished(4, 2),  // refused: owned by 3
      TaskFinished(4, 3),
      ConsumerRemoved(2),
      ConsumerRegistered(4, "a", 1, 0, 1),
      ConsumerAcknowledged(1, 0, 4),
      ConsumerAcknowledged(4, 0, 4),
      TasksDelivered("a", 0, 5),  // refused: past the frontier
      TasksDelivered("a", 0, 4),  // finishes task 3: [4, 8)
      ProducerRemoved(3),         // task 5 becomes an orphan
      ProducerRegistered(4, "h:3"),
      TaskAssigned(MakeTask(6, "a", 0, 8, 2), 4),
      TaskAssigned(MakeTask(7, "a", 1, 0, 4), 4),
      ProducerDraining(4, {7}),  // task 6 becomes an orphan again
  };
  DispatcherState live;
  std::vector<journal::Update> journal;
  for (const journal::Update& u : updates) {
    if (live.Apply(u).ok()) journal.push_back(u);
  }
  EXPECT_EQ(journal.size(), updates.size() - 3);

  DispatcherState replayed;
  for (const journal::Update& u : journal) {
    // Through the wire format, as a journal file would hold it.
    journal::Update parsed;
    ASSERT_TRUE(parsed.ParseFromString(u.SerializeAsString()));
    MustApply(replayed, parsed);
  }
  EXPECT_EQ(replayed.DebugString(), live.DebugString());
  EXPECT_THAT(live.DebugString(), HasSubstr("orphan"));
  EXPECT_THAT(live.DebugString(), HasSubstr("consumer 4 'a' rank 1 at 0/4"));
  EXPECT_THAT(live.DebugString(), HasSubstr("finished 2/8"));

  // A prefix of the journal gives a different state.
  DispatcherState prefix;
  for (size_t i = 0; i + 1 < journal.size(); ++i) MustApply(prefix, journal[i]);
  EXPECT_NE(prefix.DebugString(), live.DebugString());
}

}  // namespace
}  // namespace croupier
