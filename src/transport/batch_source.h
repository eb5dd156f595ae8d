// What a data server serves: the batches a producer holds. The producer implements it; every
// transport (TCP now, shared memory later) serves from it.
#ifndef CROUPIER_SRC_TRANSPORT_BATCH_SOURCE_H_
#define CROUPIER_SRC_TRANSPORT_BATCH_SOURCE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "src/job/batch_key.h"
#include "src/job/codec.h"

namespace croupier {

// Thread-safe: a server calls it from many connections at once.
class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // Batch `key` (dealt mode), blocking until it is made or `deadline`. Errors:
  //   NOT_FOUND           this source does not hold that batch (ask the dispatcher again);
  //   DEADLINE_EXCEEDED   not made by the deadline (retry);
  //   UNAVAILABLE         shutting down;
  //   anything else       making the batch failed (e.g. DATA_LOSS naming file and offset).
  virtual absl::StatusOr<Batch> GetBatch(const BatchKey& key, absl::Time deadline) = 0;

  // first_come mode: any made batch of (job, epoch) that has not been handed out yet, with its
  // global batch index. Each batch is handed out once. OUT_OF_RANGE when this source holds no
  // more batches of that epoch; DEADLINE_EXCEEDED when none became ready by the deadline.
  virtual absl::StatusOr<std::pair<uint64_t, Batch>> GetAnyBatch(absl::string_view job,
                                                                 uint64_t epoch,
                                                                 absl::Time deadline) = 0;

  // True when GetBatch(key) would answer at once (the batch is made, or its error is known),
  // without waiting or making anything. A data server then holds the answer before it back, to
  // write both together (pipelined requests, frame.h). False when unsure: the default.
  virtual bool Ready(const BatchKey& key) { return false; }

  // Called once a batch's bytes have all been written to the peer.
  virtual void OnServed(const BatchKey& key, uint64_t bytes) {}

  // How the TCP server compresses the batches of `job` it sends (JobSpec.compression); kNone
  // when the job is not known here. The shared-memory server never compresses.
  virtual Codec CompressionOf(absl::string_view job) { return Codec::kNone; }
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_BATCH_SOURCE_H_
