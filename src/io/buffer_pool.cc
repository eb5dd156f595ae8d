#include "src/io/buffer_pool.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "croupier/batch.h"

namespace croupier {

BufferPool::BufferPool(size_t max_free_bytes, size_t min_pooled_bytes)
    : min_pooled_bytes_(std::max<size_t>(min_pooled_bytes, 64)),
      state_(std::make_shared<State>(max_free_bytes)) {}

BufferPool& BufferPool::Shared() {
  static BufferPool* const pool = new BufferPool(size_t{256} << 20);
  return *pool;
}

size_t BufferPool::CapacityFor(size_t size) const {
  if (size < min_pooled_bytes_) return size;
  const size_t step = std::bit_floor(size) / 8;
  return (size + step - 1) / step * step;
}

std::shared_ptr<uint8_t> BufferPool::Get(size_t size) {
  if (size < min_pooled_bytes_) return Batch::AllocateBuffer(size);
  const size_t capacity = CapacityFor(size);
  std::shared_ptr<uint8_t> buffer;
  {
    absl::MutexLock lock(&state_->mu);
    auto& free = state_->free;
    for (auto it = free.rbegin(); it != free.rend(); ++it) {  // the warmest first
      if (it->capacity == capacity) {
        buffer = std::move(it->buffer);
        state_->free_bytes -= capacity;
        free.erase(std::next(it).base());
        break;
      }
    }
  }
  if (buffer == nullptr) buffer = Batch::AllocateBuffer(capacity);
  if (buffer == nullptr) return nullptr;
  uint8_t* const data = buffer.get();
  // The handed-out pointer's deleter gives the underlying buffer back instead of freeing it.
  return std::shared_ptr<uint8_t>(
      data, [state = state_, capacity, buffer = std::move(buffer)](uint8_t*) mutable {
        state->Return(capacity, std::move(buffer));
      });
}

void BufferPool::State::Return(size_t capacity, std::shared_ptr<uint8_t> buffer) {
  std::deque<Free> dropped;  // freed after the lock is released
  absl::MutexLock lock(&mu);
  free.push_back(Free{capacity, std::move(buffer)});
  free_bytes += capacity;
  while (free_bytes > max_free_bytes && !free.empty()) {
    free_bytes -= free.front().capacity;
    dropped.push_back(std::move(free.front()));
    free.pop_front();
  }
}

size_t BufferPool::free_bytes() const {
  absl::MutexLock lock(&state_->mu);
  return state_->free_bytes;
}

}  // namespace croupier
