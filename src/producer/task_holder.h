// What a producer holds its tasks in: the side of the producer that the heartbeat loop (tasks
// given, revoked and finished) and the data server (BatchSource: batches asked for) talk to.
//
// Two kinds, one per kind of source:
//   - TaskRunner (task_runner.h): addressable sources. Any batch can be made on demand, and made
//     again identically, by the job's BatchMaker (TFRecord files, or a Python source's workers).
//   - SequentialSource (sequential_source.h): a stream (croupier.serve()). Batches come from the
//     outside in order and are served once; nothing can make one again.
#ifndef CROUPIER_SRC_PRODUCER_TASK_HOLDER_H_
#define CROUPIER_SRC_PRODUCER_TASK_HOLDER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/croupier.pb.h"
#include "src/transport/batch_source.h"

namespace croupier {

// The counters every holder reports, as the producer's heartbeat carries them.
struct HolderCounters {
  uint64_t buffered_bytes = 0;
  uint64_t buffer_capacity_bytes = 0;
  uint64_t batches_made = 0;
  uint64_t batches_served = 0;
  uint64_t bytes_served = 0;
};
inline v1::ProducerStats ToProducerStats(const HolderCounters& c) {
  v1::ProducerStats s;
  s.set_buffered_bytes(c.buffered_bytes);
  s.set_buffer_capacity_bytes(c.buffer_capacity_bytes);
  s.set_batches_made(c.batches_made);
  s.set_batches_served(c.batches_served);
  s.set_bytes_served(c.bytes_served);
  return s;
}

// Thread-safe.
class TaskHolder : public BatchSource {
 public:
  // Takes on `task` of `job`. ALREADY_EXISTS for a task held already; INVALID_ARGUMENT for a
  // task that does not fit the job or the held tasks; UNAVAILABLE after Shutdown; the job's
  // own errors (a TaskRunner that cannot open the job) naming the job.
  virtual absl::Status AddTask(const v1::Task& task, const v1::JobInfo& job) = 0;
  // Drops task `task_id` and its buffered batches; requests waiting for them get NOT_FOUND.
  // Returns whether the task was known.
  virtual bool RevokeTask(uint64_t task_id) = 0;
  // The tasks whose every batch has been served since the last call, each once.
  virtual std::vector<uint64_t> TakeFinishedTasks() = 0;
  // The tasks held and not finished, in the order added.
  virtual std::vector<uint64_t> HeldTasks() const = 0;
  // The held tasks whose every batch is made (in the buffer, handed out or served): what a
  // draining producer keeps to serve (ProducerNode::Drain).
  virtual std::vector<uint64_t> MadeTasks() const = 0;
  // How many more tasks it takes now.
  virtual uint32_t FreeTaskSlots() const = 0;
  // Buffer, batch and time counters as the producer reports them (cpu_seconds left 0).
  virtual v1::ProducerStats Report() const = 0;
  // Fails every waiting and later request with UNAVAILABLE. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_TASK_HOLDER_H_
