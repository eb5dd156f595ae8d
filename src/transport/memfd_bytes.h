// Bytes of a Batch that lie at the start of a memfd, so that the same-host shared-memory data
// server can pass that memfd to its client as it is, instead of copying the batch into a segment
// of its own (shm_server.cc): a map job's worker lays a batch out in such a memfd
// (src/producer/batch_slots.h), and it then reaches the trainer without another copy.
//
// MemfdBytes is the deleter of the Batch's buffer (the shared_ptr Batch::buffer() holds):
// std::get_deleter<MemfdBytes>(batch.buffer()) finds it, whoever made the batch.
#ifndef CROUPIER_SRC_TRANSPORT_MEMFD_BYTES_H_
#define CROUPIER_SRC_TRANSPORT_MEMFD_BYTES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

namespace croupier {

// A new id for a shared-memory segment or memfd served by this process: unique in the process,
// so that a client's cache of mappings by id never confuses two of them. Thread-safe.
uint64_t NextShmSegmentId();

// Thread-safe: copies share their state.
struct MemfdBytes {
  uint64_t segment_id = 0;  // from NextShmSegmentId; always names this memfd
  int fd = -1;              // open while any copy of the buffer lives
  // Called once the last copy of the buffer is gone, with whether it was retired.
  std::function<void(bool retired)> give_back;
  std::shared_ptr<std::atomic<bool>> retired = std::make_shared<std::atomic<bool>>(false);

  // A client may still map these bytes after the buffer is gone (its connection closed while it
  // held the batch): the memfd must never be written again.
  void Retire() const { retired->store(true); }
  void operator()(const uint8_t*) const {
    if (give_back) give_back(retired->load());
  }
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_MEMFD_BYTES_H_
