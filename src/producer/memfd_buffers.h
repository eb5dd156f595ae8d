// Batch buffers at the start of memfds of the producer's own, for the makers that lay batches out
// in this process (TFRecord, tokens): such a batch reaches a same-host consumer without the
// shared-memory data server's copy. Each buffer's deleter is a MemfdBytes
// (src/transport/memfd_bytes.h), so the server passes the memfd itself, holds the batch until the
// consumer releases it, and retires the memfd if the connection closes first; a retired memfd is
// freed, never written again. A consumer over TCP is sent the same bytes from the mapping.
//
// A buffer comes back for reuse when its last copy is gone: after the consumer released the
// batch (shared memory) or after it was sent (TCP). Each memfd is a descriptor for as long as it
// lives, so at most `max_memfds` live at once in the process, every pool's counted (and at most a
// quarter of the process's descriptor limit: a producer that makes hundreds of batches ahead must still open its files and accept
// its consumers). Past that, and for small batches (below `min_memfd_bytes`, where a copy costs
// less than a descriptor) or when no memfd can be made, buffers come from a BufferPool on the
// heap, and the shared-memory server copies them as before.
#ifndef CROUPIER_SRC_PRODUCER_MEMFD_BUFFERS_H_
#define CROUPIER_SRC_PRODUCER_MEMFD_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "src/io/buffer_pool.h"

namespace croupier {

// Thread-safe. Buffers it hands out may outlive it.
class MemfdBufferPool {
 public:
  static constexpr size_t kDefaultMaxMemfds = 1024;

  // Keeps at most `max_free_bytes` of unused memfds, and as much again of unused heap buffers.
  MemfdBufferPool(size_t max_free_bytes, size_t min_memfd_bytes,
                  size_t max_memfds = kDefaultMaxMemfds);
  ~MemfdBufferPool();
  MemfdBufferPool(const MemfdBufferPool&) = delete;
  MemfdBufferPool& operator=(const MemfdBufferPool&) = delete;

  // A kBatchAlignment-aligned, writable buffer of at least `size` bytes whose contents are
  // arbitrary: at the start of a memfd when `size` is at least `min_memfd_bytes` and one can be
  // made, else from the heap. nullptr when neither can be allocated.
  std::shared_ptr<uint8_t> Get(size_t size);

  // Memfds are made only while this process serves same-host consumers through shared memory
  // (a ProducerNode whose shared-memory server runs counts itself in, and out when it stops):
  // over TCP alone the bytes are copied into the socket anyway, and each memfd would hold a
  // descriptor for nothing. Thread-safe.
  static void ShmServerStarted();
  static void ShmServerStopped();

  // How many memfds of this process's pools may live at once when this pool makes one:
  // max_memfds, or a quarter of RLIMIT_NOFILE if less.
  size_t max_memfds() const;

 private:
  struct State;
  const size_t min_memfd_bytes_;
  const std::shared_ptr<State> state_;
  BufferPool heap_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_MEMFD_BUFFERS_H_
