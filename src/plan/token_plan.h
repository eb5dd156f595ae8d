// The token plan: which pieces of which documents make every packed sequence of a token job
// (docs/protocol.md §7). A pure function of the spec and the documents' lengths: nothing is read
// but lengths, nothing depends on the number of consumers, the producers or time, so any producer
// computes any sequence alone and a resume at any world size continues bit for bit.
//
//   global sequence i --mixture--> (source k, its sequence j) --epochs--> (source epoch e,
//   sequence s within it) --packing--> pieces (document, offset, length)
//
// Mixture: a deficit rule over the weights in force (a schedule by global step). Source epochs:
// each source is read in its own keyed permutation of documents per source epoch, every document
// once per source epoch. Packing, per source epoch: concat (the documents' tokens concatenated in
// permutation order, cut every L tokens, with one token more for the last label) or best_fit
// (windows of W documents in permutation order, pieces of at most L, packed best-fit decreasing).
#ifndef CROUPIER_SRC_PLAN_TOKEN_PLAN_H_
#define CROUPIER_SRC_PLAN_TOKEN_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace croupier {

enum class Packing {
  kConcat,   // Megatron's: concatenate, cut every L tokens
  kBestFit,  // no document split unless longer than L; best-fit decreasing over windows
};
absl::string_view PackingName(Packing packing);  // "concat", "best_fit"
absl::StatusOr<Packing> ParsePacking(absl::string_view name);

// Weights from global step `first_step` on (until the next change). Need not sum to 1: they are
// normalized. At least one must be above 0; none below.
struct WeightChange {
  uint64_t first_step = 0;
  std::vector<double> weights;  // one per source
};

struct TokenPlanSpec {
  uint64_t seed = 0;
  uint32_t sequence_length = 0;  // L
  Packing packing = Packing::kConcat;
  uint32_t window = 4096;      // best_fit: documents packed together (W)
  uint32_t global_batch = 0;   // B: sequences per global step; weight changes fall on steps
  // The first entry's first_step must be 0; steps strictly increasing.
  std::vector<WeightChange> schedule;
};

// One source: the length in tokens of each of its documents, owned by the caller (mapped from a
// Megatron .idx, or from a lengths file) and alive as long as the plan.
struct TokenSource {
  std::string name;  // for messages
  absl::Span<const uint32_t> lengths;
};

// Tokens [offset, offset + length) of document `document` of source `source`.
struct Piece {
  uint32_t source = 0;
  uint64_t document = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
  bool operator==(const Piece&) const = default;
};

// What one global sequence holds. With concat, the pieces hold L + 1 tokens at most (the last is
// the label of the L-th input, and begins the next sequence too); with best_fit, at most L. Fewer
// only at the end of a source epoch (concat) or when a bin is not full (best_fit): the rest is
// padding.
struct SequencePlan {
  uint32_t source = 0;
  uint64_t source_epoch = 0;
  uint64_t source_sequence = 0;  // within its source epoch
  std::vector<Piece> pieces;
  uint64_t tokens() const;
};

// Checks everything of `spec` that needs no lengths, for sources named `source_names` (their
// count is what matters; the names are for messages): TokenPlan::Create's errors but those about
// the sources' documents.
absl::Status ValidateTokenPlanSpec(const TokenPlanSpec& spec,
                                   absl::Span<const std::string> source_names);

// Thread-safe: the caches behind the const methods are locked.
class TokenPlan {
 public:
  // INVALID_ARGUMENT naming the setting: L of 0, a window of 0 (best_fit), a global batch of 0,
  // no source, a source with no document or whose tokens are all 0, an empty schedule, a first
  // change not at step 0, steps not increasing, a weight count that differs from the sources', a
  // negative or non-finite weight, or all weights 0.
  static absl::StatusOr<std::unique_ptr<TokenPlan>> Create(TokenPlanSpec spec,
                                                           std::vector<TokenSource> sources);
  ~TokenPlan();
  TokenPlan(const TokenPlan&) = delete;
  TokenPlan& operator=(const TokenPlan&) = delete;

  const TokenPlanSpec& spec() const;
  size_t num_sources() const;

  // Global sequence `i`: its source, source epoch and pieces. O(K * 4096) the first time a
  // region of the sequence stream is reached, then O(log) plus one window's packing (best_fit)
  // or a scan of at most 1,024 lengths (concat).
  SequencePlan Sequence(uint64_t i) const;
  // Global sequences [first, first + count), as Sequence() gives each: a batch's sequences, found
  // with one walk of the mixture instead of one per sequence.
  std::vector<SequencePlan> Sequences(uint64_t first, uint64_t count) const;

  // Source k's sequence of global sequence i, and how many of source k's sequences come before
  // global sequence i, for every k (the mixture alone).
  uint32_t SourceOf(uint64_t i) const;
  std::vector<uint64_t> CountsBefore(uint64_t i) const;

  // Source k's sequences in source epoch e (the packing alone).
  uint64_t SequencesInEpoch(uint32_t k, uint64_t e) const;
  // Source k's document at position p of source epoch e (its permutation).
  uint64_t DocumentAt(uint32_t k, uint64_t e, uint64_t p) const;
  // Padding over the L * sequences of source k's epoch e: what the packing leaves empty.
  double PaddingFraction(uint32_t k, uint64_t e) const;

 private:
  struct Impl;
  explicit TokenPlan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PLAN_TOKEN_PLAN_H_
