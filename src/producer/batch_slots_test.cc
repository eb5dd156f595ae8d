#include "src/producer/batch_slots.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// What a worker process does with a slot: maps its descriptor read-write (growing it first when
// the batch is larger) and lays a batch of `num_records` uint8 values of `fill` out at its start.
// Returns the batch's size and content hash.
struct Written {
  size_t size = 0;
  uint64_t hash = 0;
};
Written WriteAsWorker(const BatchSlots::Lease& lease, uint64_t num_records, uint8_t fill) {
  const std::vector<uint8_t> values(num_records, fill);
  ColumnData column;
  column.name = "x";
  column.dtype = DType::kUInt8;
  column.num_values = num_records;
  column.values =
      absl::string_view(reinterpret_cast<const char*>(values.data()), values.size());
  void* mapped = nullptr;
  size_t mapped_size = 0;
  auto in_slot = [&](size_t size) -> std::shared_ptr<uint8_t> {
    size_t capacity = lease.capacity;
    if (size > capacity) {
      capacity = size;
      EXPECT_EQ(::ftruncate(lease.fd, static_cast<off_t>(capacity)), 0);
    }
    mapped = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, lease.fd, 0);
    EXPECT_NE(mapped, MAP_FAILED);
    mapped_size = capacity;
    return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(mapped), [](uint8_t*) {});
  };
  absl::StatusOr<Batch> batch = Batch::FromColumns(num_records, {&column, 1}, in_slot);
  EXPECT_TRUE(batch.ok()) << batch.status();
  Written out{.size = batch->bytes().size(), .hash = batch->ContentHash()};
  ::munmap(mapped, mapped_size);
  return out;
}

TEST(ProducerBatchSlotsTest, AWorkersBatchIsAdoptedWithoutACopyAndItsSlotReusedOnceDropped) {
  BatchSlots slots(/*max_idle=*/4);
  absl::StatusOr<BatchSlots::Lease> lease = slots.Acquire(1000);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(lease->fresh);
  EXPECT_GE(lease->capacity, size_t{1} << 20);
  const Written written = WriteAsWorker(*lease, 100, 7);

  absl::StatusOr<Batch> batch = slots.Adopt(lease->id, written.size);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ContentHash(), written.hash);
  EXPECT_EQ(batch->num_records(), 100u);

  // Held by the batch: a second batch gets another slot.
  absl::StatusOr<BatchSlots::Lease> other = slots.Acquire(1000);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->id, lease->id);
  EXPECT_TRUE(other->fresh);
  slots.Release(other->id);

  // The batch's bytes stay as written while it is held; once every copy is gone the slot is
  // idle and handed out again, as a descriptor the worker already has.
  std::optional<Batch> copy = *batch;
  batch = absl::UnknownError("dropped");
  EXPECT_EQ(copy->ContentHash(), written.hash);
  EXPECT_EQ(slots.stats().idle, 1u);  // `other` only: the copy holds the slot
  copy.reset();
  EXPECT_EQ(slots.stats().idle, 2u);
}

TEST(ProducerBatchSlotsTest, ASlotComesBackIdleWhenTheLastCopyOfItsBatchGoes) {
  BatchSlots slots(4);
  absl::StatusOr<BatchSlots::Lease> lease = slots.Acquire(0);
  ASSERT_TRUE(lease.ok());
  const Written written = WriteAsWorker(*lease, 10, 1);
  {
    absl::StatusOr<Batch> batch = slots.Adopt(lease->id, written.size);
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(slots.stats().idle, 0u);
  }
  EXPECT_EQ(slots.stats().idle, 1u);
  absl::StatusOr<BatchSlots::Lease> again = slots.Acquire(0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, lease->id);
  EXPECT_FALSE(again->fresh);
  EXPECT_EQ(slots.stats().created, 1u);
}

TEST(ProducerBatchSlotsTest, ASlotTheWorkerGrewIsMappedWhole) {
  BatchSlots slots(4);
  absl::StatusOr<BatchSlots::Lease> lease = slots.Acquire(0);
  ASSERT_TRUE(lease.ok());
  const uint64_t records = 3 << 20;  // 3 MiB of values: more than the slot's 1 MiB
  const Written written = WriteAsWorker(*lease, records, 9);
  ASSERT_GT(written.size, lease->capacity);
  absl::StatusOr<Batch> batch = slots.Adopt(lease->id, written.size);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ContentHash(), written.hash);
  const auto values = batch->view().columns()[0].values_as<uint8_t>();
  ASSERT_EQ(values.size(), records);
  EXPECT_EQ(values[records - 1], 9);
  EXPECT_GE(slots.stats().bytes, written.size);
}

TEST(ProducerBatchSlotsTest, BytesThatAreNoBatchAreDataLossAndTheSlotGoesBackIdle) {
  BatchSlots slots(4);
  absl::StatusOr<BatchSlots::Lease> lease = slots.Acquire(0);
  ASSERT_TRUE(lease.ok());
  void* p = ::mmap(nullptr, lease->capacity, PROT_WRITE, MAP_SHARED, lease->fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memcpy(p, "garbage, not a batch", 20);
  ::munmap(p, lease->capacity);
  absl::StatusOr<Batch> batch = slots.Adopt(lease->id, 64);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(batch.status().message(), HasSubstr("a worker's batch is inconsistent"));
  EXPECT_EQ(slots.stats().idle, 1u);
}

TEST(ProducerBatchSlotsTest, ASizeBeyondTheSlotOrASlotNotLeasedIsRefused) {
  BatchSlots slots(4);
  absl::StatusOr<BatchSlots::Lease> lease = slots.Acquire(0);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(slots.Adopt(lease->id, lease->capacity + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // That gave it back: adopting it again, or an id never leased, is refused.
  EXPECT_EQ(slots.Adopt(lease->id, 64).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(slots.Adopt(12345, 64).status().code(), absl::StatusCode::kInvalidArgument);
  slots.Release(12345);  // nothing to give back: no effect
  EXPECT_EQ(slots.stats().idle, 1u);
}

TEST(ProducerBatchSlotsTest, IdleSlotsBeyondTheBoundAreFreed) {
  BatchSlots slots(/*max_idle=*/2);
  std::vector<uint64_t> ids;
  for (int k = 0; k < 5; ++k) {
    absl::StatusOr<BatchSlots::Lease> lease = slots.Acquire(0);
    ASSERT_TRUE(lease.ok());
    ids.push_back(lease->id);
  }
  for (uint64_t id : ids) slots.Release(id);
  EXPECT_EQ(slots.stats().idle, 2u);
  EXPECT_EQ(slots.stats().slots, 2u);
  // The worker learns which to unmap, once.
  EXPECT_THAT(slots.TakeFreed(), ::testing::ElementsAre(ids[2], ids[3], ids[4]));
  EXPECT_TRUE(slots.TakeFreed().empty());
  slots.Close();
  EXPECT_THAT(slots.TakeFreed(), ::testing::UnorderedElementsAre(ids[0], ids[1]));
}

TEST(ProducerBatchSlotsTest, AnIdleSlotThatFitsIsPreferredToALargerOne) {
  BatchSlots slots(4);
  absl::StatusOr<BatchSlots::Lease> small = slots.Acquire(0);
  absl::StatusOr<BatchSlots::Lease> large = slots.Acquire(8 << 20);
  ASSERT_TRUE(small.ok() && large.ok());
  slots.Release(large->id);
  slots.Release(small->id);
  absl::StatusOr<BatchSlots::Lease> got = slots.Acquire(1000);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->id, small->id);
  absl::StatusOr<BatchSlots::Lease> next = slots.Acquire(16 << 20);  // none fits: the largest
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id, large->id);
}

TEST(ProducerBatchSlotsTest, ABatchOutlivesItsClosedPoolAndFreesItsSlotWhenDropped) {
  auto slots = std::make_unique<BatchSlots>(4);
  absl::StatusOr<BatchSlots::Lease> lease = slots->Acquire(0);
  ASSERT_TRUE(lease.ok());
  const Written written = WriteAsWorker(*lease, 50, 3);
  absl::StatusOr<Batch> batch = slots->Adopt(lease->id, written.size);
  ASSERT_TRUE(batch.ok());
  slots->Close();
  EXPECT_EQ(slots->Acquire(0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(slots->stats().slots, 1u);  // held by the batch
  slots.reset();
  EXPECT_EQ(batch->ContentHash(), written.hash);
}

}  // namespace
}  // namespace croupier
