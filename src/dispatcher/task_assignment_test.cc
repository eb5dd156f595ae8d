#include "src/dispatcher/task_assignment.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using namespace ::croupier::testing;                                // NOLINT: the update helpers
using Cut = std::tuple<std::string, uint64_t, uint64_t, uint64_t>;  // job, epoch, first, num

// Assigns NextTask to `producer` until there is none or `max` were assigned; returns them.
std::vector<Cut> AssignAll(DispatcherState& state, uint64_t producer, int max = 1000) {
  std::vector<Cut> out;
  for (int i = 0; i < max; ++i) {
    std::optional<v1::Task> task = NextTask(state, *state.FindProducer(producer));
    if (!task) break;
    EXPECT_EQ(task->task_id(), state.next_task_id());
    absl::Status status = state.Apply(TaskAssigned(*task, producer));
    EXPECT_TRUE(status.ok()) << status;
    out.emplace_back(task->job(), task->epoch(), task->first_batch(), task->num_batches());
  }
  return out;
}

TEST(DispatcherTaskAssignmentTest, NothingWithoutJobs) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  EXPECT_TRUE(AssignAll(state, 1).empty());
}

TEST(DispatcherTaskAssignmentTest, EpochsInBatchOrderWithAShortLastTaskAndAStop) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("a", 10, 2, 4, /*num_epochs=*/2))).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  EXPECT_EQ(AssignAll(state, 1), (std::vector<Cut>{{"a", 0, 0, 4},
                                                   {"a", 0, 4, 4},
                                                   {"a", 0, 8, 2},
                                                   {"a", 1, 0, 4},
                                                   {"a", 1, 4, 4},
                                                   {"a", 1, 8, 2}}));
  EXPECT_TRUE(AssignAll(state, 1).empty());
}

TEST(DispatcherTaskAssignmentTest, UnboundedJobNeverRunsOut) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("a", 4, 2, 4))).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  std::vector<Cut> cuts = AssignAll(state, 1, 50);
  ASSERT_EQ(cuts.size(), 50u);
  EXPECT_EQ(cuts.back(), Cut("a", 49, 0, 4));
}

TEST(DispatcherTaskAssignmentTest, JobsTakeTurns) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("a", 8, 2, 4))).ok());
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("b", 6, 3, 3))).ok());
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("c", 2, 2, 2, /*num_epochs=*/1))).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  EXPECT_EQ(AssignAll(state, 1, 7), (std::vector<Cut>{{"a", 0, 0, 4},
                                                      {"b", 0, 0, 3},
                                                      {"c", 0, 0, 2},
                                                      {"a", 0, 4, 4},
                                                      {"b", 0, 3, 3},
                                                      {"a", 1, 0, 4},  // c is done
                                                      {"b", 1, 0, 3}}));
  // A job created later joins the rotation after the last job served.
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("d", 2, 1, 2))).ok());
  EXPECT_EQ(AssignAll(state, 1, 3),
            (std::vector<Cut>{{"d", 0, 0, 2}, {"a", 1, 4, 4}, {"b", 1, 3, 3}}));
}

TEST(DispatcherTaskAssignmentTest, OrphansFirstLowestEpochAndBatchFirst) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("a", 8, 2, 4))).ok());
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("b", 8, 2, 4))).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(2, "h:2")).ok());
  // Producer 1 takes a/0/0, b/0/0, a/0/4, b/0/4, a/1/0; producer 2 takes b/1/0.
  AssignAll(state, 1, 5);
  EXPECT_EQ(AssignAll(state, 2, 1), (std::vector<Cut>{{"b", 1, 0, 4}}));
  ASSERT_TRUE(state.Apply(ProducerRemoved(1)).ok());
  EXPECT_EQ(state.orphans().size(), 5u);
  EXPECT_EQ(AssignAll(state, 2, 7), (std::vector<Cut>{{"a", 0, 0, 4},
                                                      {"b", 0, 0, 4},
                                                      {"a", 0, 4, 4},
                                                      {"b", 0, 4, 4},
                                                      {"a", 1, 0, 4},
                                                      // then new tasks, from the job after b
                                                      {"a", 1, 4, 4},
                                                      {"b", 1, 4, 4}}));
}

TEST(DispatcherTaskAssignmentTest, APythonJobGoesOnlyToItsSourceAndTheSourceOnlyToIt) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("files", 4, 2, 2, /*num_epochs=*/1))).ok());
  ASSERT_TRUE(state.Apply(JobCreated(FakePythonJob("py", 4, 2, 2, /*num_epochs=*/1))).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(2, "h:2", "py")).ok());
  EXPECT_EQ(AssignAll(state, 1), (std::vector<Cut>{{"files", 0, 0, 2}, {"files", 0, 2, 2}}));
  EXPECT_EQ(AssignAll(state, 2), (std::vector<Cut>{{"py", 0, 0, 2}, {"py", 0, 2, 2}}));
  // Only a Python job takes a source.
  EXPECT_EQ(state.Apply(ProducerRegistered(3, "h:3", "files")).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DispatcherTaskAssignmentTest, AJobResumingACheckpointStartsAtItsBatch) {
  DispatcherState state;
  // 10 batches for 2 consumers, tasks of 4; it resumes at global batch 5 of epoch 1: epoch 1
  // deals [5, 9) (two whole rounds; batch 9 would leave rank 1 short), epoch 2 all 10.
  v1::JobInfo job = FakeJob("a", 10, 2, 4, /*num_epochs=*/3);
  job.mutable_spec()->set_start_epoch(1);
  job.mutable_spec()->set_start_batch(5);
  ASSERT_TRUE(state.Apply(JobCreated(job)).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  EXPECT_EQ(AssignAll(state, 1), (std::vector<Cut>{{"a", 1, 5, 4},
                                                   {"a", 2, 0, 4},
                                                   {"a", 2, 4, 4},
                                                   {"a", 2, 8, 2}}));
  const DispatcherState::Job& j = *state.FindJob("a");
  EXPECT_TRUE(DispatcherState::CheckPosition(j, 1, 2).ok());
  EXPECT_EQ(DispatcherState::CheckPosition(j, 1, 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DispatcherState::CheckPosition(j, 2, 5).ok());
  EXPECT_EQ(DispatcherState::FirstUndeliveredTask(j, 1, 1), DispatcherState::TaskKey(1, 5));
  EXPECT_EQ(DispatcherState::FirstUndeliveredTask(j, 1, 2), DispatcherState::TaskKey(2, 0));
}

TEST(DispatcherTaskAssignmentTest, SeveralSourcesOfAPythonJobTakeItsTasksInTurn) {
  DispatcherState state;
  v1::JobInfo job = FakePythonJob("py", 8, 2, 2, /*num_epochs=*/1);
  job.mutable_spec()->set_source_count(2);
  ASSERT_TRUE(state.Apply(JobCreated(job)).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1", "py", 0)).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(2, "h:2", "py", 1)).ok());
  // Source 0 takes task 0 and must wait for source 1 to take task 1 before its task 2.
  EXPECT_EQ(AssignAll(state, 1), (std::vector<Cut>{{"py", 0, 0, 2}}));
  EXPECT_EQ(AssignAll(state, 2), (std::vector<Cut>{{"py", 0, 2, 2}}));
  EXPECT_EQ(AssignAll(state, 1), (std::vector<Cut>{{"py", 0, 4, 2}}));
  EXPECT_EQ(AssignAll(state, 2), (std::vector<Cut>{{"py", 0, 6, 2}}));
  EXPECT_EQ(state.Apply(ProducerRegistered(3, "h:3", "py", 2)).code(),
            absl::StatusCode::kFailedPrecondition);  // there are 2 sources
}

TEST(DispatcherTaskAssignmentTest, APythonJobsOrphansWaitForANewSource) {
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakePythonJob("py", 8, 2, 2, /*num_epochs=*/1))).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1", "py")).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(2, "h:2")).ok());
  AssignAll(state, 1, 2);
  ASSERT_TRUE(state.Apply(ProducerRemoved(1)).ok());
  EXPECT_TRUE(AssignAll(state, 2).empty());  // a TFRecord producer cannot make them
  ASSERT_TRUE(state.Apply(ProducerRegistered(3, "h:3", "py")).ok());
  EXPECT_EQ(AssignAll(state, 3, 3),
            (std::vector<Cut>{{"py", 0, 0, 2}, {"py", 0, 2, 2}, {"py", 0, 4, 2}}));
}

}  // namespace
}  // namespace croupier
