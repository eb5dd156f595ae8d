#include "src/producer/held_task.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using State = HeldTask::State;

v1::Task Task(uint64_t id, uint64_t first, uint64_t num, uint64_t epoch = 1) {
  v1::Task task;
  task.set_task_id(id);
  task.set_job("train");
  task.set_epoch(epoch);
  task.set_first_batch(first);
  task.set_num_batches(num);
  return task;
}

TEST(ProducerHeldTaskTest, CoversItsBatchesOnly) {
  const HeldTask held(Task(3, 10, 5), nullptr);
  EXPECT_EQ(held.size(), 5u);
  EXPECT_TRUE(held.Covers(BatchKey{"train", 1, 10}));
  EXPECT_TRUE(held.Covers(BatchKey{"train", 1, 14}));
  EXPECT_FALSE(held.Covers(BatchKey{"train", 1, 15}));
  EXPECT_FALSE(held.Covers(BatchKey{"train", 1, 9}));
  EXPECT_FALSE(held.Covers(BatchKey{"train", 2, 12}));
  EXPECT_FALSE(held.Covers(BatchKey{"eval", 1, 12}));
  EXPECT_EQ(held.Key(2), (BatchKey{"train", 1, 12}));
  EXPECT_TRUE(held.Overlaps(Task(4, 14, 3)));
  EXPECT_FALSE(held.Overlaps(Task(4, 15, 3)));
  EXPECT_FALSE(held.Overlaps(Task(4, 10, 5, /*epoch=*/2)));
  EXPECT_EQ(held.Describe(), "task 3 (batches [10, 15) of job 'train' epoch 1)");
}

TEST(ProducerHeldTaskTest, BatchesMoveForwardAndFinishOnce) {
  HeldTask held(Task(3, 0, 3), nullptr);
  EXPECT_EQ(held.NextPending(), 0u);
  held.SetMaking(0);
  EXPECT_EQ(held.NextPending(), 1u);
  EXPECT_TRUE(held.Hand(1));  // a request took batch 1 before any worker
  EXPECT_FALSE(held.Hand(1));
  EXPECT_EQ(held.NextPending(), 2u);
  held.SetReady(0, absl::UnixEpoch());
  EXPECT_TRUE(held.HasUnhanded());
  EXPECT_TRUE(held.Hand(0));
  EXPECT_TRUE(held.Hand(2));
  EXPECT_FALSE(held.HasUnhanded());
  EXPECT_EQ(held.NextPending(), std::nullopt);
  EXPECT_FALSE(held.Serve(0));
  EXPECT_FALSE(held.Serve(0));  // twice counts once
  EXPECT_FALSE(held.Serve(2));
  EXPECT_TRUE(held.Serve(1));
  EXPECT_EQ(held.state(1), State::kServed);
  EXPECT_FALSE(held.dropped());
}

TEST(ProducerHeldTaskTest, AMadeTaskHoldsNoSlotAndIsDoneOnceNothingIsOwedToARequester) {
  HeldTask held(Task(3, 0, 4), nullptr);
  EXPECT_EQ(held.Unmade(), 4u);
  held.SetMaking(0);
  held.SetMaking(1);
  EXPECT_EQ(held.Unmade(), 4u);  // being made still holds the slot
  held.SetReady(0, absl::UnixEpoch());
  held.SetReady(1, absl::UnixEpoch() + absl::Seconds(1));
  EXPECT_EQ(held.ready_since(1), absl::UnixEpoch() + absl::Seconds(1));
  EXPECT_TRUE(held.Hand(2));  // a request makes batch 2 itself
  held.SetMaking(3);
  held.SetReady(3, absl::UnixEpoch());
  EXPECT_EQ(held.Unmade(), 0u);  // every batch made: no slot, though none is served yet
  EXPECT_FALSE(held.Done());
  EXPECT_FALSE(held.Serve(0));
  EXPECT_FALSE(held.Evict(2));   // only a ready batch can be evicted
  EXPECT_FALSE(held.Evict(1));   // batch 1 evicted: its rank did not come
  EXPECT_EQ(held.state(1), State::kEvicted);
  EXPECT_FALSE(held.Fail(2));    // batch 2's make failed, and its requester was told
  EXPECT_FALSE(held.Fail(2));    // once
  EXPECT_TRUE(held.Hand(1));     // the rank came after all: made again, and served
  EXPECT_FALSE(held.Serve(1));   // counted done once
  EXPECT_TRUE(held.Serve(3));
  EXPECT_TRUE(held.Done());
}

}  // namespace
}  // namespace croupier
