#include "src/common/memory.h"

#include <malloc.h>

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace croupier {
namespace {

// Bytes of the process's mapped blocks (glibc counts them apart from the heap arenas).
size_t MappedBytes() { return mallinfo2().hblkhd; }

// Keeps the compiler from eliding an allocation the test only looks at through mallinfo2.
void* Touch(void* p, size_t size) {
  std::memset(p, 1, size);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

// A block of `size` touched and freed, then another of the same size: is the second mapped?
bool SecondBlockIsMapped(size_t size) {
  void* first = Touch(std::malloc(size), size);
  std::free(first);  // With glibc's dynamic threshold, this raises the threshold above `size`.
  const size_t before = MappedBytes();
  void* second = Touch(std::malloc(size), size);
  const bool mapped = MappedBytes() >= before + size;
  std::free(second);
  return mapped;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif
#else
constexpr bool kSanitizerAllocator = false;
#endif

TEST(MemoryTest, LargeBlocksStayMappedAfterOneIsFreed) {
  if (kSanitizerAllocator) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc";
  ASSERT_TRUE(KeepLargeAllocationsMapped().ok());
  EXPECT_TRUE(SecondBlockIsMapped(size_t{1} << 20));
  EXPECT_TRUE(SecondBlockIsMapped(kLargeAllocationBytes * 2));
  // Below the threshold blocks come from the heap as usual.
  const size_t before = MappedBytes();
  void* small = Touch(std::malloc(kLargeAllocationBytes / 4), kLargeAllocationBytes / 4);
  EXPECT_EQ(MappedBytes(), before);
  std::free(small);
}

TEST(MemoryTest, RefusesAThresholdOutOfRange) {
  EXPECT_EQ(KeepLargeAllocationsMapped(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KeepLargeAllocationsMapped(size_t{1} << 40).code(),
            absl::StatusCode::kInvalidArgument);
}

// Minor page faults of this process so far.
long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A worker's round: 64 blocks of 600 KB touched, held together, then freed. The page faults of
// the second round.
long FaultsOfASecondBatch() {
  constexpr size_t kBlock = 600 << 10;
  long faults = 0;
  for (int round = 0; round < 2; ++round) {
    const long before = MinorFaults();
    std::vector<void*> blocks;
    for (int k = 0; k < 64; ++k) blocks.push_back(Touch(std::malloc(kBlock), kBlock));
    for (void* p : blocks) std::free(p);
    faults = MinorFaults() - before;
  }
  return faults;
}

TEST(MemoryTest, AWorkersSecondBatchReusesTheMemoryOfTheFirst) {
  if (kSanitizerAllocator) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc";
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    GTEST_SKIP() << "the environment sets glibc's thresholds";
  }
  // In child processes (a death test's fork), so that the settings stay out of the other tests.
  // glibc's defaults give the memory back: the second batch faults its 9,600 pages in again.
  EXPECT_EXIT(
      {
        const long faults = FaultsOfASecondBatch();
        std::exit(faults > 4000 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        if (!KeepFreedMemoryForReuse().ok()) std::exit(2);
        const long faults = FaultsOfASecondBatch();
        std::exit(faults < 100 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MemoryTest, RefusesAKeptSizeOutOfRange) {
  EXPECT_EQ(KeepFreedMemoryForReuse(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KeepFreedMemoryForReuse(size_t{1} << 40).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace croupier
