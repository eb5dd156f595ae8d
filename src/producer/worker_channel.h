// The producer's side of the channel to one worker process of a map job: the request for a
// batch (its record ids and a shared-memory slot to lay it out in, batch_slots.h) and the worker's
// answer. The worker's side is Python (python/croupier/map/zygote.py, _worker_main): the batch
// touches Python only inside the worker process, and the producer adopts the slot's bytes as the
// Batch it serves, without a copy.
//
// The channel is a SOCK_STREAM socket pair. Each message is its length and then its bytes;
// requests and answers alternate. Every number is a uint64 in the machine's own byte order (both
// ends are on one machine).
//   request: epoch, batch, slot id, slot capacity, F, then the ids of F slots the worker may
//            unmap (freed since the last request), then the batch's record ids. A slot's memfd goes along (SCM_RIGHTS) with the first request that
//            names it, on the message's first byte.
//   answer:  code, size, then a message: code 0 says the batch is the slot's first
//            `size` bytes; another code (absl::StatusCode) says why there is no batch, the
//            message saying what failed.
#ifndef CROUPIER_SRC_PRODUCER_WORKER_CHANNEL_H_
#define CROUPIER_SRC_PRODUCER_WORKER_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "src/producer/batch_slots.h"

namespace croupier {

// One Make at a time (a worker makes one batch at a time); CloseChannel and Close may come from
// any thread, also while a Make waits.
class WorkerChannel {
 public:
  // The channel closed: the worker is gone. `before`: the request could not be sent (the worker
  // had died before it was asked); else it died while making the batch. `stuck`: it is alive but
  // gave no answer within the time Make allowed (the channel is then out of step: the worker is
  // to be killed and buried, as a dead one is).
  struct Died {
    bool before = false;
    bool stuck = false;
  };
  // What Make gives: the batch, the worker's error, or its death.
  using Made = std::variant<absl::StatusOr<Batch>, Died>;

  // Takes `fd`, this side of the socket pair (closed with the channel). `pid` names the worker
  // in errors. Keeps up to `max_idle_slots` idle slots.
  WorkerChannel(int fd, int pid, size_t max_idle_slots);
  ~WorkerChannel();
  WorkerChannel(const WorkerChannel&) = delete;
  WorkerChannel& operator=(const WorkerChannel&) = delete;

  // Batch `batch` of `epoch`, of records `ids`, made by the worker in one of this channel's
  // slots. A slot is asked for at least the size of the worker's last batch. Bytes that are no
  // batch are DATA_LOSS naming the worker; no slot (no memfd can be made) RESOURCE_EXHAUSTED.
  // An answer that has not begun within `timeout` is Died{.stuck = true}.
  Made Make(uint64_t epoch, uint64_t batch, absl::Span<const uint64_t> ids,
            absl::Duration timeout = absl::InfiniteDuration());

  // Shuts the channel down: a live worker exits when it reads its end, and a Make waiting for
  // an answer ends with Died. Idempotent.
  void CloseChannel();
  // CloseChannel, and closes the slots (those batches still hold are freed with them).
  void Close();

  int pid() const { return pid_; }
  BatchSlots::Stats slot_stats() const { return slots_.stats(); }

 private:
  const int fd_;
  const int pid_;
  BatchSlots slots_;
  size_t last_size_ = 0;  // Make's only
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_WORKER_CHANNEL_H_
