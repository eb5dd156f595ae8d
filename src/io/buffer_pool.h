// Recycles large batch buffers: the consumers' receive buffers, and the producer's batches.
//
// Why: a fresh multi-MiB buffer is fresh pages, and the kernel faults, zeroes and charges each
// 4 KiB page on first touch; freeing unmaps them again, with TLB shootdowns across the
// process's threads. Measured on 16 MiB batches, that was about a quarter of the receive cost
// and kept four consumers below 0.8x of plain TCP. A producer making 280 KiB batches on worker
// threads saw the same: malloc's per-thread heaps were unmapped whenever they emptied, and
// faulting their pages in again was about a sixth of the producer's CPU. Reusing buffers whose
// batches are gone removes it.
#ifndef CROUPIER_SRC_IO_BUFFER_POOL_H_
#define CROUPIER_SRC_IO_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace croupier {

// Thread-safe. Buffers it hands out may outlive it: each keeps the pool's state alive and
// returns to it when its last reference goes.
class BufferPool {
 public:
  // By default, buffers smaller than this come straight from Batch::AllocateBuffer: malloc
  // reuses small blocks of a busy heap without new pages.
  static constexpr size_t kDefaultMinPooledBytes = size_t{512} << 10;

  // Keeps at most `max_free_bytes` of unused buffers, dropping the least recently returned.
  // Buffers below `min_pooled_bytes` (at least 64) are not pooled.
  explicit BufferPool(size_t max_free_bytes, size_t min_pooled_bytes = kDefaultMinPooledBytes);

  // The pool the TCP data clients of this process share (256 MiB of free buffers at most).
  static BufferPool& Shared();

  // A kBatchAlignment-aligned buffer of at least `size` bytes, from Batch::AllocateBuffer or
  // reused; nullptr when it cannot be allocated. Its contents are arbitrary.
  std::shared_ptr<uint8_t> Get(size_t size);

  // Bytes of free buffers held now.
  size_t free_bytes() const;

  // The capacity Get(size) allocates: sizes within about 1/8 of each other share a capacity, so
  // that batches of one job, whose sizes vary a little, reuse each other's buffers. A size below
  // the pool's minimum is its own capacity.
  size_t CapacityFor(size_t size) const;

 private:
  struct Free {
    size_t capacity;
    std::shared_ptr<uint8_t> buffer;
  };
  struct State {
    explicit State(size_t max) : max_free_bytes(max) {}
    void Return(size_t capacity, std::shared_ptr<uint8_t> buffer);
    const size_t max_free_bytes;
    mutable absl::Mutex mu;
    std::deque<Free> free ABSL_GUARDED_BY(mu);  // oldest first
    size_t free_bytes ABSL_GUARDED_BY(mu) = 0;
  };

  const size_t min_pooled_bytes_;
  const std::shared_ptr<State> state_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_IO_BUFFER_POOL_H_
