#include "src/dispatcher/locate.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using namespace ::croupier::testing;  // NOLINT: the update helpers

// first, num, task_id, address, finished
using Loc = std::tuple<uint64_t, uint64_t, uint64_t, std::string, bool>;

absl::StatusOr<v1::LocateResponse> Locate(const DispatcherState& state, const std::string& job,
                                          uint64_t epoch, uint64_t first, uint64_t num) {
  v1::LocateRequest request;
  request.set_job(job);
  request.set_epoch(epoch);
  request.set_first_batch(first);
  request.set_num_batches(num);
  return LocateTasks(state, request);
}

std::vector<Loc> Locs(const absl::StatusOr<v1::LocateResponse>& response) {
  EXPECT_TRUE(response.ok()) << response.status();
  std::vector<Loc> out;
  if (!response.ok()) return out;
  for (const v1::TaskLocation& t : response->tasks()) {
    out.emplace_back(t.task().first_batch(), t.task().num_batches(), t.task().task_id(),
                     t.producer_address(), t.finished());
  }
  return out;
}

class DispatcherLocateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 12 batches per epoch in tasks of 4, two epochs; a first_come job likewise.
    Apply(JobCreated(FakeJob("a", 12, 2, 4, 2)));
    Apply(JobCreated(FakeJob("f", 12, 2, 4, 2, "first_come")));
    Apply(ProducerRegistered(1, "h:1"));
    Apply(ProducerRegistered(2, "h:2"));
  }
  void Apply(const journal::Update& u) {
    absl::Status status = state_.Apply(u);
    ASSERT_TRUE(status.ok()) << status << " applying " << u.ShortDebugString();
  }
  DispatcherState state_;
};

TEST_F(DispatcherLocateTest, Errors) {
  auto unknown = Locate(state_, "zz", 0, 0, 1);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("job 'zz' is unknown (jobs: a, f)"));
  auto epoch = Locate(state_, "a", 2, 0, 1);
  EXPECT_EQ(epoch.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(epoch.status().message()), HasSubstr("job 'a' has 2 epochs"));
  auto past = Locate(state_, "a", 0, 10, 3);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.status().message()),
              HasSubstr("batches [10, 13) of epoch 0 are past the end of the epoch: job 'a' has "
                        "12 batches per epoch"));
  EXPECT_EQ(Locate(state_, "a", 0, 12, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Locate(state_, "a", 0, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DispatcherLocateTest, NothingCutIsOneUnassignedRun) {
  EXPECT_EQ(Locs(Locate(state_, "a", 0, 0, 12)), (std::vector<Loc>{{0, 12, 0, "", false}}));
  // A range inside a task is answered with the whole task.
  EXPECT_EQ(Locs(Locate(state_, "a", 1, 5, 2)), (std::vector<Loc>{{4, 4, 0, "", false}}));
  EXPECT_EQ(Locs(Locate(state_, "a", 1, 3, 2)), (std::vector<Loc>{{0, 8, 0, "", false}}));
}

TEST_F(DispatcherLocateTest, AssignedTasksHaveTheirProducersAddress) {
  Apply(TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  Apply(TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  EXPECT_EQ(
      Locs(Locate(state_, "a", 0, 0, 12)),
      (std::vector<Loc>{{0, 4, 1, "h:1", false}, {4, 4, 2, "h:2", false}, {8, 4, 0, "", false}}));
  EXPECT_EQ(Locs(Locate(state_, "a", 0, 5, 1)), (std::vector<Loc>{{4, 4, 2, "h:2", false}}));
  auto response = Locate(state_, "a", 0, 5, 1);
  EXPECT_EQ(response->tasks(0).task().job(), "a");
  EXPECT_EQ(response->tasks(0).task().epoch(), 0u);
}

TEST_F(DispatcherLocateTest, FinishedRunsStopAtTheCursorAndAtOutstandingTasks) {
  Apply(TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  Apply(TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  Apply(TaskAssigned(MakeTask(3, "a", 0, 8, 4), 1));
  Apply(TaskAssigned(MakeTask(4, "a", 1, 0, 4), 1));
  Apply(TaskFinished(1, 1));
  Apply(TaskFinished(3, 1));
  EXPECT_EQ(Locs(Locate(state_, "a", 0, 0, 12)),
            (std::vector<Loc>{{0, 4, 0, "", true}, {4, 4, 2, "h:2", false}, {8, 4, 0, "", true}}));
  Apply(TaskFinished(2, 2));
  EXPECT_EQ(Locs(Locate(state_, "a", 0, 0, 12)), (std::vector<Loc>{{0, 12, 0, "", true}}));
  Apply(TaskFinished(4, 1));
  EXPECT_EQ(Locs(Locate(state_, "a", 1, 0, 12)),
            (std::vector<Loc>{{0, 4, 0, "", true}, {4, 8, 0, "", false}}));
}

TEST_F(DispatcherLocateTest, OrphansHaveNoAddress) {
  Apply(TaskAssigned(MakeTask(1, "a", 0, 0, 4), 1));
  Apply(TaskAssigned(MakeTask(2, "a", 0, 4, 4), 2));
  Apply(ProducerRemoved(2));
  EXPECT_EQ(
      Locs(Locate(state_, "a", 0, 0, 12)),
      (std::vector<Loc>{{0, 4, 1, "h:1", false}, {4, 4, 0, "", false}, {8, 4, 0, "", false}}));
  Apply(TaskAssigned(MakeTask(3, "a", 0, 4, 4), 1));
  EXPECT_EQ(Locs(Locate(state_, "a", 0, 4, 4)), (std::vector<Loc>{{4, 4, 3, "h:1", false}}));
}

TEST_F(DispatcherLocateTest, EpochFinishedOnceEveryTaskIsFinished) {
  Apply(TaskAssigned(MakeTask(1, "f", 0, 0, 4), 1));
  Apply(TaskAssigned(MakeTask(2, "f", 0, 4, 4), 2));
  Apply(TaskFinished(1, 1));
  Apply(TaskFinished(2, 2));
  // Two of three tasks finished; the third is not even cut.
  EXPECT_FALSE(Locate(state_, "f", 0, 0, 12)->epoch_finished());
  Apply(TaskAssigned(MakeTask(3, "f", 0, 8, 4), 1));
  EXPECT_FALSE(Locate(state_, "f", 0, 0, 12)->epoch_finished());
  Apply(TaskAssigned(MakeTask(4, "f", 1, 0, 4), 2));
  EXPECT_FALSE(Locate(state_, "f", 0, 0, 12)->epoch_finished());
  Apply(TaskFinished(3, 1));
  EXPECT_TRUE(Locate(state_, "f", 0, 0, 12)->epoch_finished());
  EXPECT_TRUE(Locate(state_, "f", 0, 4, 1)->epoch_finished());
  EXPECT_FALSE(Locate(state_, "f", 1, 0, 12)->epoch_finished());
}

}  // namespace
}  // namespace croupier
