#include "src/producer/text_tokens.h"

#include <utility>

#include "absl/strings/str_cat.h"

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
  std::vector<Document> out(documents.size());
  std::vector<uint64_t> missing;
  std::vector<size_t> missing_at;  // where each missing document goes in `out`
  for (uint64_t document : documents) {
    if (document >= lengths_.size()) {
      return absl::OutOfRangeError(absl::StrCat("text source ", name_, " has ", lengths_.size(),
                                                " documents; there is no document ", document));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < documents.size(); ++i) {
      auto it = cached_.find(documents[i]);
      if (it == cached_.end()) {
        missing.push_back(documents[i]);
        missing_at.push_back(i);
        continue;
      }
      order_.splice(order_.begin(), order_, it->second);  // now the most recently used
      out[i] = it->second->second;
    }
    stats_.cached += documents.size() - missing.size();
  }
  if (missing.empty()) return out;

  absl::StatusOr<TokenizedDocuments> made = tokenize_(source_, missing);
  if (!made.ok()) {
    return absl::Status(made.status().code(),
                        absl::StrCat("text source ", name_, ": ", made.status().message()));
  }
  if (made->lengths.size() != missing.size()) {
    return absl::InternalError(absl::StrCat("text source ", name_, ": the tokenizer gave ",
                                            made->lengths.size(), " documents for ",
                                            missing.size()));
  }
  size_t at = 0;
  std::vector<Document> fresh(missing.size());
  for (size_t i = 0; i < missing.size(); ++i) {
    const uint64_t length = made->lengths[i];
    const uint32_t expected = lengths_[missing[i]];
    if (length != expected) {
      return absl::DataLossError(
          absl::StrCat("text source ", name_, ": document ", missing[i], " tokenizes to ", length,
                       " tokens, not ", expected,
                       " as when the job was created: its text or the tokenizer "
                       "changed since"));
    }
    if (at + length > made->tokens.size()) {
      return absl::InternalError(absl::StrCat("text source ", name_, ": the tokenizer gave ",
                                              made->tokens.size(),
                                              " tokens for lengths summing "
                                              "past them"));
    }
    fresh[i] = std::make_shared<const std::vector<int32_t>>(made->tokens.begin() + at,
                                                            made->tokens.begin() + at + length);
    at += length;
    out[missing_at[i]] = fresh[i];
  }
  absl::MutexLock lock(&mu_);
  stats_.tokenized += missing.size();
  ++stats_.tokenizer_calls;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (!cached_.contains(missing[i])) Put(missing[i], fresh[i]);
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
