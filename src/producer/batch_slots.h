// Shared-memory slots in which a worker process lays out a batch that its producer then holds
// and serves as it is: the one copy between a map job's worker and the data plane
// (python/croupier/map/zygote.py). The worker writes the batch format (croupier/batch.h) straight
// from its columns into a slot; the producer adopts the slot's bytes as a Batch without copying or
// rebuilding them, and the slot is reused once every copy of that Batch is gone (served and
// dropped).
//
// A slot is a memfd (no file, no name: a crash leaves nothing behind) mapped read-only by the
// producer and read-write by the one worker it belongs to. The protocol, per batch:
//   1. the producer Acquires an idle slot (or a new one, `fresh`: its descriptor goes to the
//      worker with the request, once);
//   2. the worker lays the batch out at the slot's start, growing the memfd first (ftruncate)
//      when the batch is larger than the slot;
//   3. the producer Adopts the slot with the batch's size (validated as received batches are,
//      BatchView::Parse), or Releases it when the worker made no batch.
// While a slot is leased (between Acquire and Adopt/Release) or held by a Batch, the producer
// never hands it out again, so the worker's writes never touch bytes that a Batch holds.
//
// One pool per worker process: a slot's descriptor goes to one worker only, and when that worker
// dies its pool is closed: the idle slots are unmapped at once, and those still held by batches
// when the last copy of each goes.
//
// An adopted Batch's buffer has a MemfdBytes deleter (src/transport/memfd_bytes.h): the
// shared-memory data server passes the slot itself to a same-host consumer instead of copying
// the batch again, holds the Batch until the consumer releases it, and retires the slot if the
// consumer's connection closes first (a retired slot is freed, never written again). Slot ids
// are shared-memory segment ids (NextShmSegmentId), unique in the process.
#ifndef CROUPIER_SRC_PRODUCER_BATCH_SLOTS_H_
#define CROUPIER_SRC_PRODUCER_BATCH_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "croupier/batch.h"

namespace croupier {

// Thread-safe. Batches adopted from the pool may outlive it.
class BatchSlots {
 public:
  // A slot handed to a worker for one batch.
  struct Lease {
    uint64_t id = 0;
    int fd = -1;          // the memfd; the pool owns it (the worker gets a copy, once)
    size_t capacity = 0;  // bytes the slot has now (whole pages)
    bool fresh = false;   // new: the worker has not got its descriptor yet
  };
  struct Stats {
    uint64_t slots = 0;       // alive: idle, leased or held by batches
    uint64_t idle = 0;
    uint64_t bytes = 0;       // the capacity of the alive slots
    uint64_t created = 0;     // slots made since the start
  };

  // Keeps at most `max_idle` idle slots; a slot released beyond that is freed.
  explicit BatchSlots(size_t max_idle);
  ~BatchSlots();
  BatchSlots(const BatchSlots&) = delete;
  BatchSlots& operator=(const BatchSlots&) = delete;

  // An idle slot of at least `min_capacity` bytes if there is one (the smallest such), else the
  // largest idle one (the worker grows it), else a new slot of max(min_capacity, 1 MiB) bytes.
  // RESOURCE_EXHAUSTED naming the size if no memfd can be made; FAILED_PRECONDITION once
  // closed.
  absl::StatusOr<Lease> Acquire(size_t min_capacity);

  // The first `size` bytes of leased slot `id` as a Batch (the slot is remapped first if the
  // worker grew it). The slot stays out of use until every copy of the Batch is gone.
  // DATA_LOSS naming the inconsistency if the bytes are not a valid batch (the slot goes back
  // idle); INVALID_ARGUMENT if `id` is not leased or `size` exceeds the memfd.
  absl::StatusOr<Batch> Adopt(uint64_t id, size_t size);

  // Gives back leased slot `id` without a batch (the worker failed, or died).
  void Release(uint64_t id);

  // Frees the idle slots; a slot leased or held is freed when given back. Acquire fails from now.
  void Close();

  // The ids of the slots freed since the last call: the worker may unmap them (it keeps a mapping
  // of every slot it was given until told so).
  std::vector<uint64_t> TakeFreed();

  Stats stats() const;

 private:
  struct Slot;  // one memfd and its mapping
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_BATCH_SLOTS_H_
