#include "src/io/buffer_pool.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "croupier/batch.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(BufferPoolTest, ReusesAReturnedBufferOfTheSameClass) {
  BufferPool pool(64 * kMiB);
  uint8_t* first = nullptr;
  {
    std::shared_ptr<uint8_t> a = pool.Get(4 * kMiB);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % kBatchAlignment, 0u);
    first = a.get();
    a.get()[4 * kMiB - 1] = 7;  // the whole size is usable
    EXPECT_EQ(pool.free_bytes(), 0u);
  }
  EXPECT_EQ(pool.free_bytes(), 4 * kMiB);
  // A slightly different size of the same class gets the same memory back.
  std::shared_ptr<uint8_t> b = pool.Get(4 * kMiB - 1000);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(pool.free_bytes(), 0u);
  // A different class does not.
  std::shared_ptr<uint8_t> c = pool.Get(6 * kMiB);
  EXPECT_NE(c.get(), first);
}

TEST(BufferPoolTest, SmallBuffersAreNotPooled) {
  BufferPool pool(64 * kMiB);
  { std::shared_ptr<uint8_t> small = pool.Get(4096); }
  EXPECT_EQ(pool.free_bytes(), 0u);
}

TEST(BufferPoolTest, TheMinimumPooledSizeIsTheCallersChoice) {
  BufferPool pool(64 * kMiB, 64 << 10);
  uint8_t* first = nullptr;
  {
    std::shared_ptr<uint8_t> a = pool.Get(100 << 10);
    first = a.get();
  }
  EXPECT_EQ(pool.free_bytes(), pool.CapacityFor(100 << 10));
  EXPECT_EQ(pool.Get((100 << 10) - 100).get(), first);  // and back to the pool
  const size_t held = pool.free_bytes();
  { std::shared_ptr<uint8_t> small = pool.Get(60 << 10); }
  EXPECT_EQ(pool.free_bytes(), held);
}

TEST(BufferPoolTest, KeepsAtMostItsLimitDroppingTheOldest) {
  BufferPool pool(5 * kMiB);
  std::shared_ptr<uint8_t> a = pool.Get(2 * kMiB);
  std::shared_ptr<uint8_t> b = pool.Get(2 * kMiB);
  std::shared_ptr<uint8_t> c = pool.Get(2 * kMiB);
  uint8_t* const newest = c.get();
  a.reset();
  b.reset();
  c.reset();  // a is dropped to stay within 5 MiB
  EXPECT_EQ(pool.free_bytes(), 4 * kMiB);
  EXPECT_EQ(pool.Get(2 * kMiB).get(), newest);
}

TEST(BufferPoolTest, CapacitiesGroupSimilarSizes) {
  BufferPool pool(64 * kMiB);
  EXPECT_EQ(pool.CapacityFor(100), 100u);
  EXPECT_EQ(pool.CapacityFor(16 * kMiB), 16 * kMiB);
  EXPECT_EQ(pool.CapacityFor(16 * kMiB + 1), 18 * kMiB);
  for (size_t size = kMiB; size < 64 * kMiB; size += 777777) {
    const size_t capacity = pool.CapacityFor(size);
    EXPECT_GE(capacity, size);
    EXPECT_LE(capacity, size + size / 8);
  }
}

TEST(BufferPoolTest, BuffersMayOutliveThePoolAndCrossThreads) {
  std::shared_ptr<uint8_t> kept;
  {
    BufferPool pool(64 * kMiB);
    kept = pool.Get(2 * kMiB);
  }
  std::thread([b = std::move(kept)]() mutable { b.reset(); }).join();
}

}  // namespace
}  // namespace croupier
