#include "src/producer/memfd_buffers.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>

#include "gtest/gtest.h"
#include "src/transport/memfd_bytes.h"
#include "src/transport/transport.h"
#include "src/transport/transport_testing.h"

namespace croupier {
namespace {

constexpr size_t kMin = size_t{64} << 10;

// Counts a shared-memory server in for the test's lifetime (memfds are made only then).
class ShmServing {
 public:
  ShmServing() { MemfdBufferPool::ShmServerStarted(); }
  ~ShmServing() { MemfdBufferPool::ShmServerStopped(); }
};

// The memfd behind a pool buffer, or nullptr for a heap one.
const MemfdBytes* MemfdOf(const std::shared_ptr<uint8_t>& buffer) {
  return std::get_deleter<MemfdBytes>(buffer);
}

// A batch laid out in `buffer` (a copy of MakeBatch(bytes, seed)'s bytes).
Batch BatchIn(std::shared_ptr<uint8_t> buffer, size_t bytes, uint64_t seed) {
  const Batch made = testing::MakeBatch(bytes, seed);
  std::memcpy(buffer.get(), made.bytes().data(), made.bytes().size());
  absl::StatusOr<Batch> batch = Batch::FromBuffer(std::move(buffer), made.bytes().size());
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *std::move(batch);
}

TEST(ProducerMemfdBuffersTest, ALargeBufferIsTheStartOfAMemfdReusedOnceItsLastCopyGoes) {
  ShmServing serving;
  MemfdBufferPool pool(size_t{16} << 20, kMin);
  std::shared_ptr<uint8_t> buffer = pool.Get(300 << 10);
  ASSERT_NE(buffer, nullptr);
  const MemfdBytes* memfd = MemfdOf(buffer);
  ASSERT_NE(memfd, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.get()) % ::getpagesize(), 0u);
  struct stat st;
  ASSERT_EQ(::fstat(memfd->fd, &st), 0);
  EXPECT_GE(static_cast<size_t>(st.st_size), size_t{300} << 10);
  // What the maker writes is what a mapping of the descriptor (a consumer's) reads.
  std::memset(buffer.get(), 0x5a, 300 << 10);
  void* view = ::mmap(nullptr, 300 << 10, PROT_READ, MAP_SHARED, memfd->fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(static_cast<const uint8_t*>(view)[(300 << 10) - 1], 0x5a);
  ::munmap(view, 300 << 10);

  const uint64_t id = memfd->segment_id;
  std::shared_ptr<uint8_t> copy = buffer;
  buffer.reset();
  std::shared_ptr<uint8_t> other = pool.Get(300 << 10);  // `copy` still holds the first
  ASSERT_NE(MemfdOf(other), nullptr);
  EXPECT_NE(MemfdOf(other)->segment_id, id);
  copy.reset();
  std::shared_ptr<uint8_t> again = pool.Get(290 << 10);
  ASSERT_NE(MemfdOf(again), nullptr);
  EXPECT_EQ(MemfdOf(again)->segment_id, id);
}

TEST(ProducerMemfdBuffersTest, ARetiredMemfdIsNeverHandedOutAgain) {
  ShmServing serving;
  MemfdBufferPool pool(size_t{16} << 20, kMin);
  std::shared_ptr<uint8_t> buffer = pool.Get(100 << 10);
  ASSERT_NE(MemfdOf(buffer), nullptr);
  const uint64_t id = MemfdOf(buffer)->segment_id;
  MemfdOf(buffer)->Retire();  // a connection that passed it closed: its client may still map it
  buffer.reset();
  for (int i = 0; i < 4; ++i) {
    std::shared_ptr<uint8_t> next = pool.Get(100 << 10);
    ASSERT_NE(MemfdOf(next), nullptr);
    EXPECT_NE(MemfdOf(next)->segment_id, id);
  }
}

// Each live memfd is a descriptor: past the bound, buffers come from the heap until one is
// given back; the bound is at most a quarter of the process's descriptor limit.
TEST(ProducerMemfdBuffersTest, AtMostMaxMemfdsLiveAndTheRestComeFromTheHeap) {
  ShmServing serving;
  MemfdBufferPool pool(size_t{16} << 20, kMin, /*max_memfds=*/2);
  ASSERT_EQ(pool.max_memfds(), 2u);
  std::shared_ptr<uint8_t> a = pool.Get(100 << 10);
  std::shared_ptr<uint8_t> b = pool.Get(100 << 10);
  std::shared_ptr<uint8_t> c = pool.Get(100 << 10);
  ASSERT_NE(MemfdOf(a), nullptr);
  ASSERT_NE(MemfdOf(b), nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(MemfdOf(c), nullptr);
  // A retired memfd is freed, and leaves room for a new one.
  MemfdOf(a)->Retire();
  a.reset();
  std::shared_ptr<uint8_t> d = pool.Get(100 << 10);
  ASSERT_NE(MemfdOf(d), nullptr);

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  const size_t bounded = MemfdBufferPool(size_t{16} << 20, kMin).max_memfds();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(bounded, 16u);
}

TEST(ProducerMemfdBuffersTest, SmallBuffersAndThoseOfAProcessServingNoSharedMemoryAreOnTheHeap) {
  MemfdBufferPool pool(size_t{16} << 20, kMin);
  std::shared_ptr<uint8_t> large = pool.Get(kMin * 4);  // no shared-memory server: the heap
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(MemfdOf(large), nullptr);
  ShmServing serving;
  std::shared_ptr<uint8_t> small = pool.Get(kMin - 1);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(MemfdOf(small), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % kBatchAlignment, 0u);
  EXPECT_NE(MemfdOf(pool.Get(kMin * 4)), nullptr);
}

// The point of the pool: the shared-memory data server passes the memfd itself, so the consumer's
// batch is the producer's bytes, not a copy of them (a write the producer makes shows in it).
TEST(ProducerMemfdBuffersTest, ASameHostConsumerMapsTheProducersOwnBuffer) {
  testing::TestGuard guard(absl::Seconds(60));
  testing::FakeBatchSource source;
  ShmServing serving;
  MemfdBufferPool pool(size_t{16} << 20, kMin);
  std::shared_ptr<uint8_t> buffer = pool.Get(256 << 10);
  ASSERT_NE(MemfdOf(buffer), nullptr);
  uint8_t* writable = buffer.get();
  const Batch made = BatchIn(buffer, 200 << 10, 3);
  source.Put({"j", 0, 1}, made);
  auto server = Transport::Shm()->StartServer({}, &source);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Transport::Shm()->Connect((*server)->address(), {});
  ASSERT_TRUE(client.ok()) << client.status();
  std::optional<Batch> got;
  {
    absl::StatusOr<Batch> fetched = (*client)->Fetch({"j", 0, 1}, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(fetched.ok()) << fetched.status();
    got = *std::move(fetched);
  }
  EXPECT_EQ(got->ContentHash(), made.ContentHash());
  const size_t last = made.bytes().size() - 1;
  const uint8_t before = static_cast<uint8_t>(got->bytes()[last]);
  writable[last] = static_cast<uint8_t>(before + 1);
  EXPECT_EQ(static_cast<uint8_t>(got->bytes()[last]), static_cast<uint8_t>(before + 1));
  got.reset();
  client->reset();
  (*server)->Shutdown();
}

}  // namespace
}  // namespace croupier
