#include "src/job/token_job.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/crc32c.h"
#include "src/common/status_macros.h"
#include "src/job/job_settings.h"

namespace croupier {

std::string TokenFeatures(uint32_t sequence_length) {
  std::vector<std::string> items;
  for (const char* column : kTokenColumns) {
    items.push_back(absl::StrCat(column, ":int32[", sequence_length, "]"));
  }
  return absl::StrJoin(items, ",");
}

const v1::TextSource* TextSourceOf(const v1::TokenSpec& tokens, int k) {
  for (const v1::TextSource& text : tokens.text()) {
    if (text.source() == static_cast<uint32_t>(k)) return &text;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> OpenTokenSource(const v1::TokenSpec& tokens, int k,
                                                                Env& env) {
  if (TextSourceOf(tokens, k) != nullptr) {
    return IndexedDataset::OpenLengths(tokens.sources(k), &env);
  }
  return IndexedDataset::Open(tokens.sources(k), &env);
}

namespace {

// The sizes of a text source's files and the CRC-32C of its tokenizer.json.
absl::Status TextFingerprint(const v1::TextSource& text, Env& env, std::vector<uint64_t>& sizes,
                             uint32_t& tokenizer_crc) {
  for (const std::string& file : text.files()) {
    ASSIGN_OR_RETURN(FileStat stat, env.Stat(file));
    sizes.push_back(stat.size);
  }
  ASSIGN_OR_RETURN(std::string tokenizer, ReadFileToString(env, text.tokenizer()));
  tokenizer_crc = crc32c::Value(tokenizer);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::TokenSourceInfo> TokenSourceInfoOf(const IndexedDataset& dataset,
                                                      const v1::TextSource* text, Env& env) {
  v1::TokenSourceInfo info;
  info.set_prefix(dataset.prefix());
  info.set_dtype(text != nullptr ? "text" : std::string(TokenDTypeName(dataset.dtype())));
  info.set_num_documents(dataset.num_documents());
  info.set_num_tokens(dataset.num_tokens());
  info.set_idx_bytes(dataset.fingerprint().idx_bytes);
  info.set_bin_bytes(dataset.fingerprint().bin_bytes);
  info.set_idx_crc32c(dataset.fingerprint().idx_crc32c);
  if (text != nullptr) {
    std::vector<uint64_t> sizes;
    uint32_t crc = 0;
    RETURN_IF_ERROR(TextFingerprint(*text, env, sizes, crc));
    info.mutable_text_bytes()->Add(sizes.begin(), sizes.end());
    info.set_tokenizer_crc32c(crc);
  }
  return info;
}

absl::Status CheckTokenSource(const IndexedDataset& dataset, const v1::TextSource* text,
                              const v1::TokenSourceInfo& info, Env& env) {
  const IndexedDatasetFingerprint& found = dataset.fingerprint();
  std::string what;
  if (found.bin_bytes != info.bin_bytes()) {
    what = absl::StrCat(dataset.prefix(), ".bin is ", found.bin_bytes, " bytes, not ",
                        info.bin_bytes());
  } else if (found.idx_bytes != info.idx_bytes() || found.idx_crc32c != info.idx_crc32c()) {
    what = absl::StrCat(dataset.prefix(), ".idx is ", found.idx_bytes, " bytes with CRC-32C ",
                        found.idx_crc32c, ", not ", info.idx_bytes(), " bytes with ",
                        info.idx_crc32c());
  } else if (text != nullptr) {
    std::vector<uint64_t> sizes;
    uint32_t crc = 0;
    RETURN_IF_ERROR(TextFingerprint(*text, env, sizes, crc));
    if (sizes.size() != static_cast<size_t>(info.text_bytes_size())) {
      what = absl::StrCat("it has ", sizes.size(), " files, not ", info.text_bytes_size());
    }
    for (size_t f = 0; what.empty() && f < sizes.size(); ++f) {
      if (sizes[f] != info.text_bytes(static_cast<int>(f))) {
        what = absl::StrCat(text->files(static_cast<int>(f)), " is ", sizes[f], " bytes, not ",
                            info.text_bytes(static_cast<int>(f)));
      }
    }
    if (what.empty() && crc != info.tokenizer_crc32c()) {
      what = absl::StrCat("the tokenizer ", text->tokenizer(), " has CRC-32C ", crc, ", not ",
                          info.tokenizer_crc32c());
    }
    if (what.empty()) return absl::OkStatus();
  } else {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("token source ", dataset.prefix(),
                                                    " changed since the job was created: ", what));
}

absl::Status CheckTokenSources(const v1::JobInfo& job, Env& env) {
  const v1::TokenSpec& tokens = job.spec().tokens();
  if (job.token_sources_size() != tokens.sources_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", job.spec().name(), "' names ", tokens.sources_size(),
                     " token sources but describes ", job.token_sources_size()));
  }
  for (int k = 0; k < tokens.sources_size(); ++k) {
    ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> dataset, OpenTokenSource(tokens, k, env));
    RETURN_IF_ERROR(CheckTokenSource(*dataset, TextSourceOf(tokens, k), job.token_sources(k), env));
  }
  return absl::OkStatus();
}

absl::Status SetWeightsFromText(absl::string_view text, v1::TokenSpec& tokens) {
  tokens.clear_weights();
  for (absl::string_view entry : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    v1::WeightChange* change = tokens.add_weights();
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights entry '", entry, "': ", what, " (write [STEP:]W1,W2,...)"));
    };
    absl::string_view weights = entry;
    if (const size_t colon = entry.find(':'); colon != absl::string_view::npos) {
      uint64_t step = 0;
      if (!absl::SimpleAtoi(entry.substr(0, colon), &step)) return bad("the step is not a number");
      change->set_first_step(step);
      weights = entry.substr(colon + 1);
    }
    for (absl::string_view w : absl::StrSplit(weights, ',')) {
      double value = 0;
      if (!absl::SimpleAtod(w, &value)) return bad(absl::StrCat("'", w, "' is not a number"));
      change->add_weights(value);
    }
  }
  return absl::OkStatus();
}

double TokenPaddingFraction(const v1::JobInfo& job) {
  if (job.spec().source() != v1::SOURCE_KIND_TOKENS || job.spec().tokens().weights().empty()) {
    return 0;
  }
  const v1::WeightChange& first = job.spec().tokens().weights(0);
  double total = 0, padding = 0;
  for (int k = 0; k < first.weights_size() && k < job.token_sources_size(); ++k) {
    total += first.weights(k);
    padding += first.weights(k) * job.token_sources(k).padding_fraction();
  }
  return total > 0 ? padding / total : 0;
}

TokenPlanSpec TokenPlanSpecOf(const v1::JobSpec& spec) {
  const v1::TokenSpec& tokens = spec.tokens();
  TokenPlanSpec plan;
  plan.seed = spec.seed();
  plan.sequence_length = tokens.sequence_length();
  // A normalized spec holds a valid value; the fallback only keeps this total.
  plan.packing = FromProto(tokens.packing()).value_or(Packing::kConcat);
  plan.window = tokens.packing_window();
  plan.global_batch = tokens.global_batch();
  for (const v1::WeightChange& change : tokens.weights()) {
    plan.schedule.push_back(
        WeightChange{change.first_step(), {change.weights().begin(), change.weights().end()}});
  }
  if (plan.schedule.empty()) {
    plan.schedule.push_back(WeightChange{0, std::vector<double>(tokens.sources_size(), 1.0)});
  }
  return plan;
}

}  // namespace croupier
