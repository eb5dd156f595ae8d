// A tokens job's vocabulary, shared by the dispatcher (which checks and fills in the spec) and
// the producers (which make its batches): the plan settings a JobSpec's TokenSpec stands for, the
// columns of its batches, and the step from a batch's records to global sequences
// (docs/protocol.md §7.2).
#ifndef CROUPIER_SRC_JOB_TOKEN_JOB_H_
#define CROUPIER_SRC_JOB_TOKEN_JOB_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/croupier.pb.h"
#include "src/common/env.h"
#include "src/io/indexed_dataset.h"
#include "src/plan/token_plan.h"

namespace croupier {

// The columns of every sequence of a tokens job's batch, each int32[sequence_length], in this
// order (docs/protocol.md §7.2).
inline constexpr const char* kTokenColumns[] = {"input_ids", "labels", "position_ids",
                                                "segment_ids", "loss_mask"};
// The label of a token that counts for nothing (padding, a document's last token with best_fit,
// the last real token of a source epoch with concat): PyTorch's ignore_index.
inline constexpr int32_t kIgnoredLabel = -100;

// The feature spec text of those columns for sequences of `sequence_length` tokens: what a
// tokens job's JobSpec.features holds once normalized.
std::string TokenFeatures(uint32_t sequence_length);

// The plan settings of a normalized tokens spec (NormalizeJobSpec): seed, L, packing, window,
// B and the weight schedule (equal weights from step 0 when the spec gives none).
TokenPlanSpec TokenPlanSpecOf(const v1::JobSpec& spec);

// The TextSource entry of source `k` of `tokens` (TokenSpec.text), or nullptr when source k is
// an indexed dataset.
const v1::TextSource* TextSourceOf(const v1::TokenSpec& tokens, int k);

// Opens source `k` of `tokens` through `env`: its indexed dataset, or a text source's lengths
// (IndexedDataset::OpenLengths). IndexedDataset's errors.
absl::StatusOr<std::unique_ptr<IndexedDataset>> OpenTokenSource(const v1::TokenSpec& tokens, int k,
                                                                Env& env);

// What the dispatcher keeps of a token source when it creates the job (JobInfo.token_sources);
// `text` (nullptr for an indexed dataset) adds the size of each of its files and the checksum of
// its tokenizer: NOT_FOUND naming a file that cannot be read.
absl::StatusOr<v1::TokenSourceInfo> TokenSourceInfoOf(const IndexedDataset& dataset,
                                                      const v1::TextSource* text, Env& env);
// OK if `dataset` (and `text`'s files and tokenizer) are the source `info` describes;
// FAILED_PRECONDITION naming the file and what differs otherwise (a source rewritten since the
// job was created would change every batch); NOT_FOUND naming a text file that is gone.
absl::Status CheckTokenSource(const IndexedDataset& dataset, const v1::TextSource* text,
                              const v1::TokenSourceInfo& info, Env& env);

// CheckTokenSource for every source of tokens job `job`, each opened through `env`
// (OpenTokenSource's errors too): what a producer checks before it makes the job's batches.
absl::Status CheckTokenSources(const v1::JobInfo& job, Env& env);

// Sets tokens.weights from the command line's text: entries separated by ';', each
// "[STEP:]W1,W2,..." (the weights from global step STEP on; 0 when omitted), e.g. "3,1" or
// "0:3,1;5000:1,1". INVALID_ARGUMENT naming the entry that is not numbers. The schedule's own
// rules (steps increasing, a weight per source, ...) are NormalizeJobSpec's.
absl::Status SetWeightsFromText(absl::string_view text, v1::TokenSpec& tokens);

// A tokens job's padding under its first weights: the sources' padding_fraction (JobInfo
// .token_sources), weighted by the first weight change's normalized weights; 0 for other jobs.
double TokenPaddingFraction(const v1::JobInfo& job);

// Global sequence of record `record` of `epoch` in a tokens job of `sequences_per_epoch`
// sequences an epoch (steps_per_epoch * global_batch = JobInfo.num_records): record p of epoch e
// is global sequence e * S + p, whatever the number of consumers.
inline uint64_t GlobalSequence(uint64_t epoch, uint64_t record, uint64_t sequences_per_epoch) {
  return epoch * sequences_per_epoch + record;
}

}  // namespace croupier

#endif  // CROUPIER_SRC_JOB_TOKEN_JOB_H_
