#include "src/producer/text_tokens.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier {

TextTokens::TextTokens(uint32_t source, std::string name, absl::Span<const uint32_t> lengths,
                       DocumentTokenizer tokenize, size_t cache_bytes)
    : source_(source),
      name_(std::move(name)),
      lengths_(lengths),
      tokenize_(std::move(tokenize)),
      cache_bytes_(cache_bytes) {}

absl::StatusOr<std::vector<TextTokens::Document>> TextTokens::Get(
    absl::Span<const uint64_t> documents) const {
  for (uint64_t document : documents) {
    if (document >= lengths_.size()) {
      return absl::OutOfRangeError(absl::StrCat("text source ", name_, " has ", lengths_.size(),
                                                " documents; there is no document ", document));
    }
  }
  std::vector<Document> out(documents.size());
  std::vector<uint64_t> missing;   // the documents this call tokenizes
  std::vector<size_t> missing_at;  // where each goes in `out`
  std::vector<std::shared_ptr<Pending>> mine;
  std::vector<std::pair<size_t, std::shared_ptr<Pending>>> theirs;  // tokenized by another call
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < documents.size(); ++i) {
      if (auto it = cached_.find(documents[i]); it != cached_.end()) {
        order_.splice(order_.begin(), order_, it->second);  // now the most recently used
        out[i] = it->second->second;
        ++stats_.cached;
      } else if (auto p = pending_.find(documents[i]); p != pending_.end()) {
        theirs.emplace_back(i, p->second);
      } else {
        auto pending = std::make_shared<Pending>();
        pending_.emplace(documents[i], pending);
        mine.push_back(std::move(pending));
        missing.push_back(documents[i]);
        missing_at.push_back(i);
      }
    }
  }
  absl::Status status = absl::OkStatus();
  std::vector<Document> fresh(missing.size());
  if (!missing.empty()) {
    absl::StatusOr<TokenizedDocuments> made = tokenize_(source_, missing);
    if (!made.ok()) {
      status = absl::Status(made.status().code(),
                            absl::StrCat("text source ", name_, ": ", made.status().message()));
    } else if (made->lengths.size() != missing.size()) {
      status = absl::InternalError(absl::StrCat("text source ", name_, ": the tokenizer gave ",
                                                made->lengths.size(), " documents for ",
                                                missing.size()));
    }
    size_t at = 0;
    for (size_t i = 0; status.ok() && i < missing.size(); ++i) {
      const uint64_t length = made->lengths[i];
      const uint32_t expected = lengths_[missing[i]];
      if (length != expected) {
        status = absl::DataLossError(
            absl::StrCat("text source ", name_, ": document ", missing[i], " tokenizes to ", length,
                         " tokens, not ", expected,
                         " as when the job was created: its text or the tokenizer changed since"));
      } else if (at + length > made->tokens.size()) {
        status = absl::InternalError(absl::StrCat("text source ", name_, ": the tokenizer gave ",
                                                  made->tokens.size(),
                                                  " tokens for lengths summing past them"));
      } else {
        fresh[i] = std::make_shared<const std::vector<int32_t>>(made->tokens.begin() + at,
                                                                made->tokens.begin() + at + length);
        out[missing_at[i]] = fresh[i];
        at += length;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  if (!missing.empty()) {
    stats_.tokenized += missing.size();
    ++stats_.tokenizer_calls;
    for (size_t i = 0; i < missing.size(); ++i) {
      // A failed call leaves its documents to the next call that needs them.
      mine[i]->tokens = status.ok() ? fresh[i] : nullptr;
      mine[i]->status = status;
      mine[i]->done = true;
      pending_.erase(missing[i]);
      if (status.ok() && !cached_.contains(missing[i])) Put(missing[i], fresh[i]);
    }
  }
  RETURN_IF_ERROR(status);
  for (auto& [i, pending] : theirs) {
    mu_.Await(absl::Condition(&pending->done));
    RETURN_IF_ERROR(pending->status);
    out[i] = pending->tokens;
    ++stats_.cached;
  }
  return out;
}

void TextTokens::Put(uint64_t document, const Document& tokens) const {
  const size_t bytes = tokens->size() * sizeof(int32_t);
  if (bytes > cache_bytes_) return;
  order_.emplace_front(document, tokens);
  cached_[document] = order_.begin();
  bytes_ += bytes;
  while (bytes_ > cache_bytes_) {
    bytes_ -= order_.back().second->size() * sizeof(int32_t);
    cached_.erase(order_.back().first);
    order_.pop_back();
  }
}

TextTokens::Stats TextTokens::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace croupier
