// The documents of a tokens job's text source (TokenSpec.text, docs/protocol.md §7.6): tokenized
// when a batch needs them by a function the producer is given (croupier.tokens' tokenizer, in
// Python), checked against the lengths the plan was made from, and kept in a cache bounded in
// bytes that the maker's threads share, so that a document cut over several sequences (concat,
// or longer than L with best_fit) is tokenized once while it stays cached.
#ifndef CROUPIER_SRC_PRODUCER_TEXT_TOKENS_H_
#define CROUPIER_SRC_PRODUCER_TEXT_TOKENS_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace croupier {

// What a DocumentTokenizer returns for the documents it was asked for.
struct TokenizedDocuments {
  std::vector<int32_t> tokens;    // the documents' tokens, one document after another
  std::vector<uint64_t> lengths;  // each document's token count, in the order asked
};

// Tokenizes documents `documents` (distinct, any order) of the text source that is source
// `source` of the job (its index in TokenSpec.sources). The same documents must give the same
// tokens every time, on any producer. Called on many threads at once. Its errors should name the
// file and the document.
using DocumentTokenizer = std::function<absl::StatusOr<TokenizedDocuments>(
    uint32_t source, absl::Span<const uint64_t> documents)>;

// Thread-safe.
class TextTokens {
 public:
  using Document = std::shared_ptr<const std::vector<int32_t>>;
  struct Stats {
    uint64_t cached = 0;           // documents found in the cache
    uint64_t tokenized = 0;        // documents tokenized
    uint64_t tokenizer_calls = 0;  // calls of the tokenizer
  };

  // `lengths` (which must outlive this) are the source's document lengths, from its lengths
  // index; `name` names the source in errors; at most `cache_bytes` of tokens stay cached.
  TextTokens(uint32_t source, std::string name, absl::Span<const uint32_t> lengths,
             DocumentTokenizer tokenize, size_t cache_bytes);

  // The tokens of each of `documents` (distinct), in that order: from the cache, the others
  // from one call of the tokenizer. OUT_OF_RANGE for a document the source does not have;
  // DATA_LOSS naming the source and the document whose tokens are not as many as its length
  // (its text or the tokenizer changed since the job was created); the tokenizer's errors,
  // with the source named.
  absl::StatusOr<std::vector<Document>> Get(absl::Span<const uint64_t> documents) const;

  Stats stats() const;

 private:
  // Caches `document` and drops the least recently used ones over the bound.
  void Put(uint64_t document, const Document& tokens) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t source_;
  const std::string name_;
  const absl::Span<const uint32_t> lengths_;
  const DocumentTokenizer tokenize_;
  const size_t cache_bytes_;

  // A document one call is tokenizing: the others that need it wait for it (a document cut
  // over the sequences of batches made at once is tokenized once).
  struct Pending {
    bool done = false;
    Document tokens;      // set when done, unless that call failed
    absl::Status status;  // that call's error
  };

  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<uint64_t, std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  // Most recently used first.
  mutable std::list<std::pair<uint64_t, Document>> order_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<uint64_t, std::list<std::pair<uint64_t, Document>>::iterator> cached_
      ABSL_GUARDED_BY(mu_);
  mutable size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_TEXT_TOKENS_H_
