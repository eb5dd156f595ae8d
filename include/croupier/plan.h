// The epoch plan: which records make up each batch of an epoch, and which consumer gets it.
//
// A plan is a pure function of (PlanSpec, epoch): the records are put in the epoch's shuffled
// order, cut into batches of batch_size, and global batch g goes to consumer g mod N as its step g
// div N. Any producer can therefore compute any batch alone, and a position is just (epoch, batch).
// No permutation is ever materialized: construction is O(1) in time and memory, and the record at
// any position is computed in O(1), so 1e9-record datasets cost nothing to plan.
// docs/formats.md ("Epoch plan") gives the algorithm exactly enough to reimplement it bit-for-bit.
#ifndef CROUPIER_INCLUDE_CROUPIER_PLAN_H_
#define CROUPIER_INCLUDE_CROUPIER_PLAN_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace croupier {

// The version of the plan algorithm described in docs/formats.md. Any change to the order a spec
// produces must bump it, so that a journaled job can refuse to resume under a different order.
inline constexpr int kPlanVersion = 1;

// How an epoch's records are ordered. Every mode is reshuffled each epoch from (seed, epoch).
enum class ShuffleMode {
  kNone,    // record order: position p holds record p
  kGlobal,  // a pseudo-random permutation of all records (random reads)
  kBlocks,  // permuted blocks of consecutive records, shuffled within windows of blocks
};

// What happens to the records that do not fill a whole round of N batches.
enum class Remainder {
  kDrop,  // drop them: fewer than batch_size * num_consumers records go unread each epoch
  kPad,   // fill the last round with the epoch's first records again, so none is skipped
};

// "none", "global", "blocks" and "drop", "pad": the names used in job specs and on the command
// line.
absl::string_view ShuffleModeName(ShuffleMode mode);
absl::string_view RemainderName(Remainder remainder);
// Inverses of the above. INVALID_ARGUMENT, listing the accepted names, for anything else.
absl::StatusOr<ShuffleMode> ParseShuffleMode(absl::string_view name);
absl::StatusOr<Remainder> ParseRemainder(absl::string_view name);

// Everything a plan depends on besides the epoch.
struct PlanSpec {
  // The largest num_records accepted: keeps every position and padded count inside uint64.
  static constexpr uint64_t kMaxRecords = uint64_t{1} << 62;

  uint64_t num_records = 0;  // records in the dataset, numbered [0, num_records)
  uint64_t seed = 0;
  uint32_t batch_size = 0;     // B
  uint32_t num_consumers = 0;  // N
  ShuffleMode shuffle = ShuffleMode::kGlobal;
  Remainder remainder = Remainder::kDrop;
  uint32_t block_size = 1024;   // blocks mode: consecutive records per block (S)
  uint32_t window_blocks = 16;  // blocks mode: blocks shuffled together (W); more is better mixed
};

// OK, or INVALID_ARGUMENT naming the first bad setting and its allowed range:
// num_records in [1, 2^62]; batch_size, num_consumers, block_size, window_blocks >= 1 (all are
// checked whatever the mode); shuffle and remainder one of the enumerators; and with remainder
// drop, num_records >= batch_size * num_consumers, since otherwise every epoch would be empty.
absl::Status ValidatePlanSpec(const PlanSpec& spec);

// The plan of one epoch.
//
// Immutable, so thread-safe; cheap to copy (copies share one immutable state).
class EpochPlan {
 public:
  // INVALID_ARGUMENT as ValidatePlanSpec. Any epoch is valid. O(1) time and memory.
  static absl::StatusOr<EpochPlan> Create(const PlanSpec& spec, uint64_t epoch);

  const PlanSpec& spec() const;
  uint64_t epoch() const;
  uint32_t batch_size() const;
  uint32_t num_consumers() const;

  // Global batches this epoch, always a multiple of N:
  // drop: floor(n / (N*B)) * N; pad: ceil(n / (N*B)) * N.
  uint64_t num_batches() const;
  // num_batches() / N: every consumer gets exactly this many steps.
  uint64_t steps_per_consumer() const;
  // num_batches() * B: the positions the batches cover.
  uint64_t num_positions() const;

  // The record at `position` of the epoch order. The order is a permutation of [0, n) over
  // positions [0, n); a position p >= n (the padding) holds the record of p mod n. Defined for
  // every position, including the tail that remainder drop leaves unread. The order does not depend
  // on batch_size, num_consumers or remainder, so a job resumed with another N at the same position
  // neither repeats nor skips a record.
  uint64_t RecordAt(uint64_t position) const;

  // Writes the B records of global batch g, in order, to `out`: those at positions [g*B, (g+1)*B).
  // Faster than B calls of RecordAt. Preconditions: g < num_batches(), out.size() == batch_size().
  void BatchRecords(uint64_t g, absl::Span<uint64_t> out) const;
  std::vector<uint64_t> BatchRecords(uint64_t g) const;

  // The deal: global batch g goes to consumer g mod N as its step g div N.
  uint32_t ConsumerOf(uint64_t g) const;
  uint64_t StepOf(uint64_t g) const;
  // The inverse: the global batch that consumer `consumer` takes at `step`, step * N + consumer.
  uint64_t GlobalBatch(uint32_t consumer, uint64_t step) const;

 private:
  struct State;
  explicit EpochPlan(std::shared_ptr<const State> state) : state_(std::move(state)) {}

  std::shared_ptr<const State> state_;  // never null
};

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_PLAN_H_
