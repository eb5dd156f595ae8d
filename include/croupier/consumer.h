// The consumer: the library inside each trainer (rank r of N). It fetches its own batches of a
// job straight from the producers, in order, with a bounded prefetch window, and acknowledges its
// position to the dispatcher.
//
//   auto consumer = Consumer::Connect({.dispatcher = "host:5050", .job = "train",
//                                      .rank = r, .world = n});
//   for (uint64_t epoch = 0; epoch < 3; ++epoch) {
//     RETURN_IF_ERROR((*consumer)->StartEpoch(epoch));
//     while (true) {
//       ASSIGN_OR_RETURN(std::optional<Batch> batch, (*consumer)->Next());
//       if (!batch) break;  // the end of the epoch, at the same step for every rank (dealt)
//       ...
//     }
//   }
#ifndef CROUPIER_INCLUDE_CROUPIER_CONSUMER_H_
#define CROUPIER_INCLUDE_CROUPIER_CONSUMER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "croupier/deal_mode.h"

namespace croupier {

struct ConsumerOptions {
  std::string dispatcher;  // host:port
  std::string job;
  uint32_t rank = 0;
  uint32_t world = 0;      // must equal the job's number of consumers
  std::string auth_token;  // empty: $CROUPIER_AUTH_TOKEN, else none
  // TLS to the dispatcher and the producers: PEM files of this consumer's certificate and key
  // (needed when they require client certificates) and of the CA that signed theirs. All three
  // empty: $CROUPIER_TLS_CERT, $CROUPIER_TLS_KEY, $CROUPIER_TLS_CA; none set: plaintext. A
  // refused certificate fails with UNAUTHENTICATED naming the address and the cause.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // The prefetch window: at most this many batches, and about this many bytes, fetched ahead.
  // prefetch_batches 0 (the default): automatic, 4 batches, and for batches of 256 KiB or less
  // as many as hold about 1 MiB, up to 64 (a window of 4 costs small batches most of a round
  // trip each).
  uint32_t prefetch_batches = 0;
  uint64_t prefetch_bytes = uint64_t{256} << 20;
  // The longest wait for the dispatcher, or for one batch, before an error.
  absl::Duration timeout = absl::Seconds(60);
  // Register at the rank's last acknowledged position (of an earlier consumer of this rank that
  // crashed or closed), which registered_position() then gives; false: at (0, 0).
  bool resume = true;
  // Same-host shared memory for batches (docs/architecture.md): "auto" uses it with every
  // producer that offers it on this host and TCP with the others, "on" requires it, "off" never
  // uses it. Empty: $CROUPIER_SHM, else auto.
  std::string shm;
};

// What a consumer knows of its job.
struct JobSummary {
  std::string name;
  std::string features;        // the feature spec text
  DealMode mode = DealMode::kDealt;
  uint32_t num_consumers = 0;
  uint32_t batch_size = 0;
  uint64_t num_records = 0;
  uint64_t num_epochs = 0;     // 0: unbounded
  uint64_t steps_per_epoch = 0;  // dealt: every consumer's steps in each epoch
  // The dispatcher said, when this consumer registered, that the job was done: every epoch
  // delivered (a trainer resumed a finished job, e.g. from a saved state). Logged as a WARNING
  // then; reading an epoch again remakes its batches and makes the job running again.
  bool done_at_registration = false;
};

// Where a consumer is: the next step it will take in `epoch`.
struct ConsumerPosition {
  uint64_t epoch = 0;
  uint64_t step = 0;
};

// Thread-compatible: call StartEpoch and Next from one thread at a time. Close may be called from
// any thread and wakes a blocked Next with CANCELLED.
class Consumer {
 public:
  // Registers rank `rank` with the dispatcher. Errors: DEADLINE_EXCEEDED naming the address when
  // the dispatcher cannot be reached within `timeout`; NOT_FOUND for a job that does not exist
  // within `timeout` (a trainer may start before its job is created: it waits, logging once);
  // INVALID_ARGUMENT for a world size that differs from the job's; ALREADY_EXISTS when another
  // live consumer holds the rank until `timeout` (one silent for 3 heartbeats is taken over, so a
  // restarted trainer waits a few seconds for its dead predecessor's rank); UNAUTHENTICATED;
  // FAILED_PRECONDITION for a protocol mismatch.
  static absl::StatusOr<std::unique_ptr<Consumer>> Connect(ConsumerOptions options);
  virtual ~Consumer() = default;

  virtual const JobSummary& job() const = 0;

  // Where the dispatcher registered this consumer: the rank's last acknowledged position with
  // options.resume, else (0, 0). A trainer without a checkpoint of its own starts there.
  virtual ConsumerPosition registered_position() const = 0;

  // Starts epoch `epoch` at `step` (dealt mode; first_come accepts only step 0), dropping whatever
  // was prefetched. The dispatcher is told at once; batches it had finished (a position behind
  // what was acknowledged, as when a checkpoint is restored) are made again, identical.
  // OUT_OF_RANGE past a bounded job's last epoch or past the epoch's steps.
  virtual absl::Status StartEpoch(uint64_t epoch, uint64_t step = 0) = 0;

  // The next batch of the epoch, or nullopt at its end. Batches arrive in step order (dealt) and
  // share no memory with each other. DEADLINE_EXCEEDED naming the job, epoch, step and producer
  // when a batch does not come within `timeout`; other errors as the producer reported them (e.g.
  // DATA_LOSS naming the file and offset). ABORTED once another consumer has taken this rank over
  // (this one was silent too long). A batch is handed over only while the rank is surely this
  // consumer's: when its last heartbeat the dispatcher answered is older than the takeover time
  // (the process was frozen, or the dispatcher is unreachable), Next() first confirms the rank
  // with a heartbeat of its own, so a process frozen past its takeover delivers nothing more
  // (ABORTED); DEADLINE_EXCEEDED when the dispatcher does not answer within `timeout` (the batch
  // is kept for the next call). After an error, StartEpoch at position() retries.
  virtual absl::StatusOr<std::optional<Batch>> Next() = 0;

  // The next step Next() will return; the dispatcher is told it with every heartbeat.
  virtual ConsumerPosition position() const = 0;

  // Stops fetching and heartbeats, and frees the rank at the dispatcher (a last heartbeat says it
  // is leaving; the rank's position is kept for the next consumer of the rank). Idempotent.
  virtual void Close() = 0;
};

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_CONSUMER_H_
