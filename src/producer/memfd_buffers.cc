#include "src/producer/memfd_buffers.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/transport/memfd_bytes.h"
#include "src/transport/shm_transport.h"

namespace croupier {
namespace {

// A quarter of this process's descriptors (its soft RLIMIT_NOFILE), at most `cap`.
size_t QuarterOfTheDescriptors(size_t cap) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return cap;
  return std::min<size_t>(cap, limit.rlim_cur / 4);
}

// Memfds of every pool of this process that live (free, or held by a buffer): the bound is the
// process's, since every one is a descriptor of the process.
std::atomic<size_t> live_memfds{0};
// Shared-memory data servers running in this process (ShmServerStarted).
std::atomic<int> shm_servers{0};

}  // namespace

struct MemfdBufferPool::State {
  State(size_t max_free, size_t max_live) : max_free_bytes(max_free), max_memfds(max_live) {}
  ~State() {
    absl::MutexLock lock(&mu);
    live_memfds -= free.size();
  }

  // A free memfd of at least `size` bytes (and not more than four times that), or a new one
  // while fewer than max_memfds live; else nullptr.
  std::unique_ptr<ShmSegment> Get(size_t size) {
    {
      absl::MutexLock lock(&mu);
      auto it = free.lower_bound(size);
      if (it != free.end() && it->first <= 4 * size) {
        std::unique_ptr<ShmSegment> segment = std::move(it->second);
        free_bytes -= it->first;
        free.erase(it);
        return segment;
      }
    }
    if (live_memfds.fetch_add(1) >= max_memfds) {
      --live_memfds;
      return nullptr;
    }
    absl::StatusOr<std::unique_ptr<ShmSegment>> made = ShmSegment::Create(size);
    if (made.ok()) return *std::move(made);
    --live_memfds;
    return nullptr;
  }

  // Takes back a memfd whose buffer's last copy is gone: kept for reuse unless it was retired
  // (a client may still map it: never written again) or the free ones are full (the largest
  // free ones go first, which keeps the sizes in use).
  void Return(std::unique_ptr<ShmSegment> segment, bool retired) {
    std::vector<std::unique_ptr<ShmSegment>> dropped;  // unmapped outside the lock
    absl::MutexLock lock(&mu);
    if (retired) {
      dropped.push_back(std::move(segment));
    } else {
      while (!free.empty() && free_bytes + segment->capacity() > max_free_bytes) {
        auto last = std::prev(free.end());
        free_bytes -= last->first;
        dropped.push_back(std::move(last->second));
        free.erase(last);
      }
      if (free_bytes + segment->capacity() > max_free_bytes) {
        dropped.push_back(std::move(segment));
      } else {
        free_bytes += segment->capacity();
        free.emplace(segment->capacity(), std::move(segment));
      }
    }
    live_memfds -= dropped.size();
  }

  const size_t max_free_bytes;
  const size_t max_memfds;
  absl::Mutex mu;
  std::multimap<size_t, std::unique_ptr<ShmSegment>> free ABSL_GUARDED_BY(mu);
  size_t free_bytes ABSL_GUARDED_BY(mu) = 0;
};

MemfdBufferPool::MemfdBufferPool(size_t max_free_bytes, size_t min_memfd_bytes, size_t max_memfds)
    : min_memfd_bytes_(min_memfd_bytes),
      state_(std::make_shared<State>(max_free_bytes, QuarterOfTheDescriptors(max_memfds))),
      heap_(max_free_bytes, min_memfd_bytes) {}

MemfdBufferPool::~MemfdBufferPool() = default;

size_t MemfdBufferPool::max_memfds() const { return state_->max_memfds; }

void MemfdBufferPool::ShmServerStarted() { ++shm_servers; }
void MemfdBufferPool::ShmServerStopped() { --shm_servers; }

std::shared_ptr<uint8_t> MemfdBufferPool::Get(size_t size) {
  if (size < min_memfd_bytes_ || shm_servers.load() <= 0) return heap_.Get(size);
  std::unique_ptr<ShmSegment> got = state_->Get(size);
  if (got == nullptr) return heap_.Get(size);  // as many memfds as allowed, or none to be made
  // The memfd lives in the deleter until the buffer's last copy is gone; then it goes back to
  // the pool, or is freed if a connection that passed it closed first (retired). A reused memfd
  // keeps its id, so that a consumer's mapping of it is reused too.
  auto segment = std::make_shared<std::unique_ptr<ShmSegment>>(std::move(got));
  ShmSegment& s = **segment;
  MemfdBytes backing{.segment_id = s.id(),
                     .fd = s.fd(),
                     .give_back = [state = state_, segment](bool retired) {
                       state->Return(std::move(*segment), retired);
                     }};
  return std::shared_ptr<uint8_t>(s.data(), std::move(backing));
}

}  // namespace croupier
