// The bookkeeping of one task a producer holds: what has become of each of its batches.
#ifndef CROUPIER_SRC_PRODUCER_HELD_TASK_H_
#define CROUPIER_SRC_PRODUCER_HELD_TASK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/croupier.pb.h"
#include "src/job/batch_key.h"
#include "src/producer/batch_maker.h"

namespace croupier {

// One task and the state of each of its batches:
//   pending -> making -> ready -> handed -> served
// where a request may hand out a batch from any state before handed (it then makes the batch
// itself, waits for it, or takes it), OnServed may mark any batch served, and a ready batch nobody
// asks for may be evicted (dropped from the buffer unserved, and made again if it is asked for
// later: evicted -> handed -> served).
//
// Two questions the producer asks of a task, and their answers:
// - Does it hold a slot? While some batch is still to be made (pending or making): a slot is the
//   producer's making capacity, not what it keeps for consumers (Unmade()).
// - Is it done? When every batch is served, evicted, or failed and handed to its requester
//   (Done()): the producer then holds nothing of it a consumer could need that it could not make
//   again, and reports it finished.
// Batches are numbered by their index in the task, 0 to size() - 1.
//
// Thread-compatible: TaskRunner guards every HeldTask with its mutex.
class HeldTask {
 public:
  enum class State : uint8_t {
    kPending,  // nobody has started it
    kMaking,   // a worker is making it, with buffer room reserved
    kReady,    // made, in the buffer (a batch, or the error making it gave)
    kHanded,   // handed to a requester (or being made by one), not yet served
    kServed,   // its bytes were written to a consumer
    kEvicted,  // made, then dropped from the buffer unserved; made again if asked for
  };

  HeldTask(const v1::Task& task, std::shared_ptr<const BatchMaker> maker);

  const v1::Task& task() const { return task_; }
  uint64_t id() const { return task_.task_id(); }
  const std::shared_ptr<const BatchMaker>& maker() const { return maker_; }
  uint64_t first() const { return task_.first_batch(); }
  uint64_t end() const { return task_.first_batch() + task_.num_batches(); }
  uint64_t size() const { return state_.size(); }
  BatchKey Key(uint64_t index) const;
  // Whether the task holds global batch `key` (and then it is Key(key.batch - first())).
  bool Covers(const BatchKey& key) const;
  bool Overlaps(const v1::Task& other) const;
  // "task 3 (batches [0, 10) of job 'train' epoch 1)".
  std::string Describe() const;

  State state(uint64_t index) const { return state_[index]; }
  // The first batch still pending, if any. Amortized O(1).
  std::optional<uint64_t> NextPending();
  void SetMaking(uint64_t index) { Set(index, State::kMaking); }
  // Made (a batch or an error) and buffered at `now`.
  void SetReady(uint64_t index, absl::Time now);
  // When a ready batch entered the buffer.
  absl::Time ready_since(uint64_t index) const { return ready_since_[index]; }
  // Marks a batch handed out; returns false if it had been handed out before.
  bool Hand(uint64_t index);
  // Marks a batch served; returns true when that makes the task done.
  bool Serve(uint64_t index);
  // Marks a ready batch evicted; returns true when that makes the task done.
  bool Evict(uint64_t index);
  // Records that making batch `index` failed and the requester was told: the batch is done. A
  // batch that fails stays failed until served (a later make may succeed). Returns true when that
  // makes the task done.
  bool Fail(uint64_t index);
  // Whether some batch is pending, being made or ready: not yet handed out.
  bool HasUnhanded() const { return unhanded_ > 0; }
  // Batches pending or being made: while there are any, the task holds one of the producer's slots.
  uint64_t Unmade() const { return unmade_; }
  // Batches ready in the buffer.
  uint64_t Ready() const { return ready_; }
  // Every batch served, evicted, or failed and told.
  bool Done() const { return done_ == state_.size(); }

  // Set once the task is revoked or finished: its batches must no longer enter the buffer.
  bool dropped() const { return dropped_; }
  void Drop() { dropped_ = true; }
  // Set once the task is revoked: no batch of it may be handed out any more, even one a request
  // was making when the revocation came.
  bool revoked() const { return revoked_; }
  void Revoke() {
    dropped_ = true;
    revoked_ = true;
  }

 private:
  // Moves batch `index` to `to`, keeping the counters.
  void Set(uint64_t index, State to);
  // Counts batch `index` done, once; returns true when that makes the task done.
  bool MarkDone(uint64_t index);

  const v1::Task task_;
  const std::shared_ptr<const BatchMaker> maker_;
  std::vector<State> state_;
  std::vector<absl::Time> ready_since_;
  std::vector<bool> done_flag_;
  uint64_t next_pending_ = 0;  // every batch before it has left kPending
  uint64_t unhanded_ = 0;      // pending, making or ready
  uint64_t unmade_ = 0;        // pending or making
  uint64_t ready_ = 0;
  uint64_t done_ = 0;
  bool dropped_ = false;
  bool revoked_ = false;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_HELD_TASK_H_
