// Makes any batch of a tokens job (docs/protocol.md §7): the packed sequences the token plan
// names for the batch's records, read from the job's Megatron-LM indexed datasets or tokenized
// from its text sources (text_tokens.h), as the five int32[L] columns of src/job/token_job.h (a
// BatchMaker, batch_maker.h).
#ifndef CROUPIER_SRC_PRODUCER_TOKEN_MAKER_H_
#define CROUPIER_SRC_PRODUCER_TOKEN_MAKER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "proto/croupier.pb.h"
#include "src/io/indexed_dataset.h"
#include "src/plan/token_plan.h"
#include "src/producer/batch_maker.h"
#include "src/producer/memfd_buffers.h"
#include "src/producer/text_tokens.h"

namespace croupier {

class Env;

// Record p of epoch e is global sequence e * S + p (S = JobInfo.num_records, the sequences of an
// epoch); its columns, for pieces (document, offset, length) from the plan:
//   input_ids     the pieces' tokens, in order, at most L; pad_id after them;
//   labels        each input's next token: with concat, the next token of the stream (the pieces
//                 hold one token more than the inputs: the last input's label), with best_fit,
//                 the next token of the same document (read past the piece when the document
//                 goes on in another sequence), kIgnoredLabel at a document's last token; and
//                 kIgnoredLabel where no next token exists and at padding;
//   position_ids  offset + j within each piece (a split document's positions continue); 0 at
//                 padding;
//   segment_ids   1, 2, ... one per piece holding inputs; 0 at padding;
//   loss_mask     1 where the label counts, else 0.
//
// Thread-safe: Make may run on many threads at once (the plan and the datasets are).
class TokenBatchMaker final : public BatchMaker {
 public:
  // Opens the job's sources (JobInfo.token_sources) through `env` (nullptr: Env::Default(),
  // which must outlive the maker) and makes the token plan from their lengths. Errors:
  // IndexedDataset::Open's (NOT_FOUND naming a missing file, DATA_LOSS naming the byte offset
  // of a bad index); FAILED_PRECONDITION naming the file of a source that changed since the job
  // was created (CheckTokenSource), or a plan that disagrees with the job's batches per epoch;
  // INVALID_ARGUMENT naming the job for a job that is not a tokens job or a bad setting.
  //
  // A text source (TokenSpec.text) is opened as its lengths index, and its documents are made by
  // `tokenize` (text_tokens.h), with up to `text_cache_bytes` of tokens cached per source; a job
  // with a text source and no `tokenize` is FAILED_PRECONDITION naming the source.
  static absl::StatusOr<std::unique_ptr<TokenBatchMaker>> Create(
      const v1::JobInfo& job, Env* env = nullptr, DocumentTokenizer tokenize = nullptr,
      size_t text_cache_bytes = kDefaultTextCacheBytes);
  ~TokenBatchMaker() override;

  // Enough for the documents a few tasks cut over their sequences, far from a source epoch.
  static constexpr size_t kDefaultTextCacheBytes = size_t{8} << 20;

  const TokenPlan& plan() const { return *plan_; }
  // Source k's text tokens, or nullptr for an indexed dataset.
  const TextTokens* text(size_t k) const { return texts_[k].get(); }

 private:
  // One batch's tokens of the sources that are not read where they lie: a text source's
  // documents, tokenized whole, and the documents of an indexed dataset in an object store,
  // fetched together (the tokens [first, first + size) that the batch's pieces need). Per
  // source: document -> its tokens; empty for a local indexed dataset, read in place.
  struct Window {
    uint32_t first = 0;
    TextTokens::Document tokens;
  };
  using BatchTokens = std::vector<absl::flat_hash_map<uint64_t, Window>>;

  TokenBatchMaker(v1::JobInfo job, JobConfig config,
                  std::vector<std::unique_ptr<IndexedDataset>> datasets,
                  std::vector<std::unique_ptr<TextTokens>> texts, std::unique_ptr<TokenPlan> plan);
  // The tokens of the text sources' documents that `sequences` hold, and those of remote
  // indexed datasets (one IndexedDataset::ReadMany a source: few requests, run at once).
  absl::StatusOr<BatchTokens> GatherTokens(const std::vector<SequencePlan>& sequences) const;
  // Errors name the global sequence and the source's document (Read's errors name the file and
  // byte offset).
  absl::StatusOr<Batch> MakeRecords(uint64_t epoch, uint64_t batch,
                                    absl::Span<const uint64_t> ids) const override;

  // Writes the columns of `sequences` (the plan of records `ids` of `epoch`) into `arrays`, one
  // per column of kTokenColumns, each [ids.size(), L].
  absl::Status WriteSequences(const std::vector<SequencePlan>& sequences, const BatchTokens& text,
                              uint64_t epoch, absl::Span<const uint64_t> ids,
                              const std::array<int32_t*, 5>& arrays) const;

  // Batches of 64 KiB and more are laid out in recycled memfds (MemfdBufferPool: a same-host
  // consumer maps them without a copy): at most 16 MiB of those whose batches are gone are kept
  // for the next ones (as TfrecordBatchMaker's).
  static constexpr size_t kFreeBatchBytes = size_t{16} << 20;
  static constexpr size_t kMinPooledBatchBytes = size_t{64} << 10;

  const std::vector<std::unique_ptr<IndexedDataset>> datasets_;  // text: lengths only
  const std::vector<std::unique_ptr<TextTokens>> texts_;         // nullptr: indexed dataset
  const std::unique_ptr<TokenPlan> plan_;
  mutable MemfdBufferPool batch_buffers_{kFreeBatchBytes, kMinPooledBatchBytes};  // thread-safe
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_TOKEN_MAKER_H_
