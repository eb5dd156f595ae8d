#include "src/producer/token_maker.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/job/token_job.h"

namespace croupier {
namespace {

constexpr size_t kColumns = std::size(kTokenColumns);
enum Column { kInputIds, kLabels, kPositionIds, kSegmentIds, kLossMask };

}  // namespace

absl::StatusOr<std::unique_ptr<TokenBatchMaker>> TokenBatchMaker::Create(const v1::JobInfo& job,
                                                                         Env* env,
                                                                         DocumentTokenizer tokenize,
                                                                         size_t text_cache_bytes) {
  if (env == nullptr) env = Env::Default();
  const std::string& name = job.spec().name();
  if (job.spec().source() != v1::SOURCE_KIND_TOKENS) {
    return absl::InvalidArgumentError(absl::StrCat("job '", name, "' is not a tokens job"));
  }
  ASSIGN_OR_RETURN(JobConfig config, CheckedConfig(job));
  const v1::TokenSpec& spec = job.spec().tokens();
  if (job.token_sources_size() != spec.sources_size()) {
    return absl::InvalidArgumentError(absl::StrCat("job '", name, "' names ", spec.sources_size(),
                                                   " token sources but describes ",
                                                   job.token_sources_size()));
  }
  std::vector<std::unique_ptr<IndexedDataset>> datasets;
  std::vector<std::unique_ptr<TextTokens>> texts;
  std::vector<TokenSource> sources;
  for (int k = 0; k < spec.sources_size(); ++k) {
    const v1::TextSource* text = TextSourceOf(spec, k);
    if (text != nullptr && !tokenize) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", name, "': source ", k, " (", text->files(0),
          text->files_size() > 1 ? absl::StrCat(" and ", text->files_size() - 1, " more") : "",
          ") is text, made only by the job's own producers, which tokenize it "
          "(croupier produce --job ",
          name, ")"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> dataset, OpenTokenSource(spec, k, *env));
    RETURN_IF_ERROR(CheckTokenSource(*dataset, text, job.token_sources(k), *env));
    sources.push_back(TokenSource{spec.sources(k), dataset->lengths()});
    texts.push_back(text == nullptr ? nullptr
                                    : std::make_unique<TextTokens>(
                                          static_cast<uint32_t>(k), text->files(0),
                                          dataset->lengths(), tokenize, text_cache_bytes));
    datasets.push_back(std::move(dataset));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TokenPlan> plan,
                   TokenPlan::Create(TokenPlanSpecOf(job.spec()), std::move(sources)));
  return std::unique_ptr<TokenBatchMaker>(new TokenBatchMaker(
      job, std::move(config), std::move(datasets), std::move(texts), std::move(plan)));
}

TokenBatchMaker::TokenBatchMaker(v1::JobInfo job, JobConfig config,
                                 std::vector<std::unique_ptr<IndexedDataset>> datasets,
                                 std::vector<std::unique_ptr<TextTokens>> texts,
                                 std::unique_ptr<TokenPlan> plan)
    : BatchMaker(std::move(job), std::move(config)),
      datasets_(std::move(datasets)),
      texts_(std::move(texts)),
      plan_(std::move(plan)) {}

absl::StatusOr<TokenBatchMaker::BatchTokens> TokenBatchMaker::GatherTokens(
    const std::vector<SequencePlan>& sequences) const {
  BatchTokens text(texts_.size());
  for (size_t k = 0; k < texts_.size(); ++k) {
    if (texts_[k] == nullptr && datasets_[k]->remote()) {
      // Each document's span that the pieces read: their tokens, and the next one (a best_fit
      // piece's last label), within the document.
      const IndexedDataset& dataset = *datasets_[k];
      absl::flat_hash_map<uint64_t, std::pair<uint32_t, uint32_t>> spans;
      for (const SequencePlan& sequence : sequences) {
        for (const Piece& piece : sequence.pieces) {
          if (piece.source != k) continue;
          const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(
              uint64_t{piece.offset} + piece.length + 1, dataset.lengths()[piece.document]));
          auto [it, added] = spans.try_emplace(piece.document, piece.offset, end);
          if (!added) {
            it->second.first = std::min(it->second.first, piece.offset);
            it->second.second = std::max(it->second.second, end);
          }
        }
      }
      std::vector<IndexedDataset::TokenRange> ranges;
      ranges.reserve(spans.size());
      text[k].reserve(spans.size());
      for (const auto& [document, span] : spans) {
        auto tokens = std::make_shared<std::vector<int32_t>>(span.second - span.first);
        ranges.push_back({document, span.first, absl::MakeSpan(*tokens)});
        text[k].emplace(document, Window{span.first, std::move(tokens)});
      }
      RETURN_IF_ERROR(dataset.ReadMany(ranges));
      continue;
    }
    if (texts_[k] == nullptr) continue;
    std::vector<uint64_t> documents;
    for (const SequencePlan& sequence : sequences) {
      for (const Piece& piece : sequence.pieces) {
        if (piece.source == k) documents.push_back(piece.document);
      }
    }
    std::sort(documents.begin(), documents.end());
    documents.erase(std::unique(documents.begin(), documents.end()), documents.end());
    if (documents.empty()) continue;
    ASSIGN_OR_RETURN(std::vector<TextTokens::Document> tokens, texts_[k]->Get(documents));
    text[k].reserve(documents.size());
    for (size_t i = 0; i < documents.size(); ++i) {
      text[k].emplace(documents[i], Window{0, tokens[i]});
    }
  }
  return text;
}

TokenBatchMaker::~TokenBatchMaker() = default;

absl::StatusOr<Batch> TokenBatchMaker::MakeRecords(uint64_t epoch, uint64_t /*batch*/,
                                                   absl::Span<const uint64_t> ids) const {
  const uint32_t length = plan_->spec().sequence_length;
  const uint64_t per_epoch = job().num_records();
  const size_t count = ids.size();

  // The batch's sequences: one walk of the mixture when the records are consecutive (a tokens
  // job's plan does not shuffle records, so they are).
  std::vector<SequencePlan> sequences;
  bool consecutive = true;
  for (size_t r = 1; r < count; ++r) consecutive = consecutive && ids[r] == ids[0] + r;
  if (consecutive && count > 0) {
    sequences = plan_->Sequences(GlobalSequence(epoch, ids[0], per_epoch), count);
  } else {
    for (uint64_t id : ids) {
      sequences.push_back(plan_->Sequence(GlobalSequence(epoch, id, per_epoch)));
    }
  }

  ASSIGN_OR_RETURN(BatchTokens text, GatherTokens(sequences));

  // The five columns are written straight into the batch's buffer (from the maker's pool, so
  // their pages are not faulted in again for every batch): Batch::FromColumns hands each
  // column's values to `fill` in column order once the buffer is laid out, and the last call
  // writes all five.
  const std::array<int64_t, 1> dims = {length};
  std::array<ColumnData, kColumns> columns;
  for (size_t c = 0; c < kColumns; ++c) {
    columns[c].name = kTokenColumns[c];
    columns[c].dtype = DType::kInt32;
    columns[c].dims = dims;
    columns[c].num_values = count * length;
    columns[c].values = absl::string_view(nullptr, count * length * sizeof(int32_t));
  }
  std::array<int32_t*, kColumns> arrays{};
  auto fill = [&](size_t c, absl::Span<uint8_t> values) -> absl::Status {
    arrays[c] = reinterpret_cast<int32_t*>(values.data());
    if (c + 1 < kColumns) return absl::OkStatus();
    return WriteSequences(sequences, text, epoch, ids, arrays);
  };
  return Batch::FromColumns(
      count, columns, [this](size_t size) { return batch_buffers_.Get(size); }, fill);
}

absl::Status TokenBatchMaker::WriteSequences(const std::vector<SequencePlan>& sequences,
                                             const BatchTokens& text, uint64_t epoch,
                                             absl::Span<const uint64_t> ids,
                                             const std::array<int32_t*, 5>& arrays) const {
  const uint32_t length = plan_->spec().sequence_length;
  const int32_t pad = job().spec().tokens().pad_id();
  const bool concat = plan_->spec().packing == Packing::kConcat;
  const uint64_t per_epoch = job().num_records();
  const size_t count = ids.size();
  std::vector<int32_t> past;  // a piece's tokens past L (concat: the last input's label)
  // Each column's value at every position is written once: the pieces' tokens straight into
  // input_ids, the other columns from them, and only the padding after the last piece filled.
  for (size_t r = 0; r < count; ++r) {
    const SequencePlan& sequence = sequences[r];
    const uint64_t global = GlobalSequence(epoch, ids[r], per_epoch);
    int32_t* input = arrays[kInputIds] + r * length;
    int32_t* label = arrays[kLabels] + r * length;
    int32_t* position = arrays[kPositionIds] + r * length;
    int32_t* segment = arrays[kSegmentIds] + r * length;
    int32_t* mask = arrays[kLossMask] + r * length;
    size_t at = 0;    // where the piece starts in the sequence
    int32_t seg = 0;  // the piece's segment id
    bool has_past = false;
    int32_t first_past = 0;
    for (const Piece& piece : sequence.pieces) {
      const IndexedDataset& dataset = *datasets_[piece.source];
      auto read = [&](uint32_t offset, absl::Span<int32_t> out) -> absl::Status {
        absl::Status s;
        if (texts_[piece.source] != nullptr || dataset.remote()) {
          // Tokenized (whose lengths were checked against the plan's) or fetched by
          // GatherTokens.
          const Window& window = text[piece.source].at(piece.document);
          const std::vector<int32_t>& tokens = *window.tokens;
          if (offset < window.first || offset - window.first + out.size() > tokens.size()) {
            return absl::InternalError(absl::StrCat(
                "sequence ", global, ": tokens [", offset, ", ", offset + out.size(),
                ") of document ", piece.document, " of source ", piece.source, ", of which [",
                window.first, ", ", window.first + tokens.size(), ") were gathered"));
          }
          std::copy_n(tokens.begin() + (offset - window.first), out.size(), out.begin());
          return s;
        }
        s = dataset.Read(piece.document, offset, out);
        if (s.ok()) return s;
        return absl::Status(s.code(),
                            absl::StrCat("sequence ", global, " (document ", piece.document, " of ",
                                         dataset.prefix(), "): ", s.message()));
      };
      // The piece's inputs: its tokens below L, read into input_ids where they go.
      const size_t inputs = at < length ? std::min<size_t>(piece.length, length - at) : 0;
      RETURN_IF_ERROR(read(piece.offset, absl::MakeSpan(input + at, inputs)));
      if (inputs < piece.length && !has_past) {
        past.resize(piece.length - inputs);
        RETURN_IF_ERROR(read(piece.offset + inputs, absl::MakeSpan(past)));
        has_past = true;
        first_past = past[0];
      }
      if (inputs > 0) {
        ++seg;
        // Counted in 32 bits, so that the loop runs on 32-bit lanes (a size_t counter made the
        // compiler add 64-bit lanes and shuffle them down: most of this function's time).
        int32_t* piece_positions = position + at;
        const int32_t first_position = static_cast<int32_t>(piece.offset);
        const int32_t n = static_cast<int32_t>(inputs);
        for (int32_t t = 0; t < n; ++t) piece_positions[t] = first_position + t;
        std::fill(segment + at, segment + at + inputs, seg);
        if (!concat) {
          // best_fit: each input's label is the next token of its document; after the piece's
          // last, the document's next token if it goes on in another sequence.
          const size_t end = at + inputs;
          for (size_t j = at; j + 1 < end; ++j) label[j] = input[j + 1];
          std::fill(mask + at, mask + end - 1, 1);
          label[end - 1] = kIgnoredLabel;
          mask[end - 1] = 0;
          const uint64_t doc_length = dataset.lengths()[piece.document];
          if (piece.offset + piece.length < doc_length) {
            RETURN_IF_ERROR(read(piece.offset + piece.length, absl::MakeSpan(&label[end - 1], 1)));
            mask[end - 1] = 1;
          }
        }
      }
      at += piece.length;
    }
    const size_t inputs = std::min<size_t>(at, length);
    if (concat && inputs > 0) {
      // The stream's next token: the input after each, and past the last the first token past L
      // (none at the end of a source epoch).
      for (size_t j = 0; j + 1 < inputs; ++j) label[j] = input[j + 1];
      std::fill(mask, mask + inputs - 1, 1);
      label[inputs - 1] = has_past ? first_past : kIgnoredLabel;
      mask[inputs - 1] = has_past ? 1 : 0;
    }
    // The loss mask is 1 exactly where the label is a token (token ids are never
    // kIgnoredLabel): written beside each label above, and 0 over the padding.
    std::fill(input + inputs, input + length, pad);
    std::fill(label + inputs, label + length, kIgnoredLabel);
    std::fill(position + inputs, position + length, 0);
    std::fill(segment + inputs, segment + length, 0);
    std::fill(mask + inputs, mask + length, 0);
  }

  return absl::OkStatus();
}

}  // namespace croupier
