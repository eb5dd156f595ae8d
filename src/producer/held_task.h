// The bookkeeping of one task a producer holds: what has become of each of its batches.
#ifndef CROUPIER_SRC_PRODUCER_HELD_TASK_H_
#define CROUPIER_SRC_PRODUCER_HELD_TASK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/croupier.pb.h"
#include "src/producer/batch_maker.h"
#include "src/job/batch_key.h"

namespace croupier {

// One task and the state of each of its batches, which only move forward:
//   pending -> making -> ready -> handed -> served, where a request may hand out a batch from
//   any state before handed (it then makes the batch itself, waits for it, or takes it), and
//   OnServed may mark any batch served.
// Batches are numbered by their index in the task, 0 to size() - 1.
//
// Thread-compatible: TaskRunner guards every HeldTask with its mutex.
class HeldTask {
 public:
  enum class State : uint8_t {
    kPending,  // nobody has started it
    kMaking,   // a worker is making it, with buffer room reserved
    kReady,    // made, in the buffer
    kHanded,   // handed to a requester (or being made by one), not yet served
    kServed,   // its bytes were written to a consumer
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
  void SetMaking(uint64_t index) { state_[index] = State::kMaking; }
  void SetReady(uint64_t index) { state_[index] = State::kReady; }
  // Marks a batch handed out; returns false if it had been handed out before.
  bool Hand(uint64_t index);
  // Marks a batch served; returns true when that makes every batch served (the task finished).
  bool Serve(uint64_t index);
  // Whether some batch is pending, being made or ready: not yet handed out.
  bool HasUnhanded() const { return unhanded_ > 0; }

  // Set once the task is revoked or finished: its batches must no longer enter the buffer.
  bool dropped() const { return dropped_; }
  void Drop() { dropped_ = true; }

 private:
  const v1::Task task_;
  const std::shared_ptr<const BatchMaker> maker_;
  std::vector<State> state_;
  uint64_t next_pending_ = 0;  // every batch before it has left kPending
  uint64_t unhanded_ = 0;
  uint64_t served_ = 0;
  bool dropped_ = false;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_HELD_TASK_H_
