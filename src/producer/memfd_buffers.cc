#include "src/producer/memfd_buffers.h"

#include <utility>

#include "absl/status/statusor.h"
#include "src/transport/memfd_bytes.h"
#include "src/transport/shm_transport.h"

namespace croupier {

struct MemfdBufferPool::State {
  explicit State(size_t max_free_bytes) : segments(max_free_bytes) {}
  ShmSegmentPool segments;
};

MemfdBufferPool::MemfdBufferPool(size_t max_free_bytes, size_t min_memfd_bytes)
    : min_memfd_bytes_(min_memfd_bytes),
      state_(std::make_shared<State>(max_free_bytes)),
      heap_(max_free_bytes, min_memfd_bytes) {}

MemfdBufferPool::~MemfdBufferPool() = default;

std::shared_ptr<uint8_t> MemfdBufferPool::Get(size_t size) {
  if (size < min_memfd_bytes_) return heap_.Get(size);
  absl::StatusOr<std::unique_ptr<ShmSegment>> got = state_->segments.Get(size);
  if (!got.ok()) return heap_.Get(size);  // out of descriptors or memory: the heap, copied later
  // The segment lives in the deleter until the buffer's last copy is gone; then it goes back to
  // the pool, or is freed if a connection that passed it closed first (retired).
  auto segment = std::make_shared<std::unique_ptr<ShmSegment>>(*std::move(got));
  // A reused segment keeps its id, so that a consumer's mapping of it is reused too.
  ShmSegment& s = **segment;
  MemfdBytes backing{.segment_id = s.id(),
                     .fd = s.fd(),
                     .give_back = [state = state_, segment](bool retired) {
                       if (retired) {
                         segment->reset();
                       } else {
                         state->segments.Put(std::move(*segment));
                       }
                     }};
  return std::shared_ptr<uint8_t>(s.data(), std::move(backing));
}

}  // namespace croupier
