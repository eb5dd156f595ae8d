// Token sources for the tests of tokens jobs, and a check of what a tokens batch holds. Every
// token says where it comes from: token TokenAt(s, d, p) is position p of document d of source s,
// so a batch's columns can be checked against the documents without trusting the maker.
#ifndef CROUPIER_SRC_TESTING_TOKEN_DATA_H_
#define CROUPIER_SRC_TESTING_TOKEN_DATA_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "croupier/batch.h"
#include "gtest/gtest.h"
#include "proto/croupier.pb.h"
#include "src/io/indexed_dataset.h"
#include "src/job/token_job.h"

namespace croupier::testing {

// At most 299 documents of at most 99 tokens per source, and 2 sources as uint16.
inline int32_t TokenAt(uint32_t source, uint64_t document, uint32_t position) {
  return static_cast<int32_t>(source * 30000 + document * 100 + position);
}
struct TokenPlace {
  uint32_t source;
  uint64_t document;
  uint32_t position;
  auto operator<=>(const TokenPlace&) const = default;
};
inline TokenPlace PlaceOf(int32_t token) {
  return {static_cast<uint32_t>(token / 30000), static_cast<uint64_t>(token % 30000 / 100),
          static_cast<uint32_t>(token % 100)};
}
// Document d of source s: 1 to 97 tokens, varied.
inline uint32_t DocumentLength(uint32_t source, uint64_t document) {
  return 1 + static_cast<uint32_t>((document * 37 + source * 13 + document * document) % 97);
}
inline std::vector<std::vector<int32_t>> TokenDocuments(uint32_t source, uint64_t count) {
  std::vector<std::vector<int32_t>> documents(count);
  for (uint64_t d = 0; d < count; ++d) {
    for (uint32_t p = 0; p < DocumentLength(source, d); ++p) {
      documents[d].push_back(TokenAt(source, d, p));
    }
  }
  return documents;
}
// Writes source `source` of `count` documents at `prefix` (.idx and .bin); returns the prefix.
inline std::string WriteTokenSource(const std::string& prefix, uint32_t source, uint64_t count,
                                    TokenDType dtype = TokenDType::kInt32) {
  absl::Status written = WriteIndexedDataset(prefix, dtype, TokenDocuments(source, count));
  EXPECT_TRUE(written.ok()) << written;
  return prefix;
}

// A tokens job over `prefixes` (equal weights unless given), dealt to `consumers` ranks.
inline v1::JobSpec TokenJobSpec(const std::string& name, const std::vector<std::string>& prefixes,
                                uint32_t sequence_length, uint32_t global_batch,
                                uint64_t steps_per_epoch, uint32_t consumers,
                                v1::Packing packing = v1::PACKING_CONCAT) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_source(v1::SOURCE_KIND_TOKENS);
  spec.set_seed(7);
  spec.set_num_consumers(consumers);
  spec.set_num_epochs(1);
  v1::TokenSpec& tokens = *spec.mutable_tokens();
  for (const std::string& prefix : prefixes) tokens.add_sources(prefix);
  tokens.set_sequence_length(sequence_length);
  tokens.set_global_batch(global_batch);
  tokens.set_steps_per_epoch(steps_per_epoch);
  tokens.set_packing(packing);
  tokens.set_pad_id(-1);
  return spec;
}

// Checks every sequence of `batch` against the documents (TokenAt, DocumentLength), and appends
// the places of each sequence's input tokens to `places` (one entry per sequence): input_ids are
// consecutive positions of a document per segment, numbered 1, 2, ... in order, position_ids their
// positions, labels each input's next token (best_fit: in its document, else -100; concat: in its
// document, else the first token of another document or -100), loss_mask 1 exactly where the label
// is not -100, and padding (pad_id -1) everywhere after the inputs.
inline void CheckTokenBatch(const BatchView& batch, bool best_fit,
                            std::vector<std::vector<TokenPlace>>* places = nullptr) {
  const ColumnView* columns[5];
  for (int c = 0; c < 5; ++c) {
    columns[c] = batch.Find(kTokenColumns[c]);
    ASSERT_NE(columns[c], nullptr) << kTokenColumns[c];
    ASSERT_EQ(columns[c]->dtype, DType::kInt32);
  }
  const uint64_t length = columns[0]->dims.at(0);
  for (uint64_t r = 0; r < batch.num_records(); ++r) {
    auto at = [&](int c, uint64_t j) { return columns[c]->values_as<int32_t>()[r * length + j]; };
    if (places != nullptr) places->emplace_back();
    int32_t segment = 0;
    bool padding = false;
    TokenPlace previous{};
    for (uint64_t j = 0; j < length; ++j) {
      SCOPED_TRACE(absl::StrCat("sequence ", r, " token ", j));
      const int32_t input = at(0, j), label = at(1, j), position = at(2, j), seg = at(3, j),
                    mask = at(4, j);
      EXPECT_EQ(mask, label != kIgnoredLabel ? 1 : 0);
      if (seg == 0) {
        padding = true;
        EXPECT_EQ(input, -1);
        EXPECT_EQ(label, kIgnoredLabel);
        EXPECT_EQ(position, 0);
        continue;
      }
      ASSERT_FALSE(padding) << "input after padding";
      const TokenPlace place = PlaceOf(input);
      if (places != nullptr) places->back().push_back(place);
      EXPECT_EQ(position, static_cast<int32_t>(place.position));
      if (seg == segment) {
        EXPECT_EQ(place.source, previous.source);
        EXPECT_EQ(place.document, previous.document);
        EXPECT_EQ(place.position, previous.position + 1);
      } else {
        EXPECT_EQ(seg, segment + 1);
        segment = seg;
      }
      previous = place;
      const bool last = place.position + 1 == DocumentLength(place.source, place.document);
      if (!last) {
        EXPECT_EQ(label, TokenAt(place.source, place.document, place.position + 1));
      } else if (best_fit) {
        EXPECT_EQ(label, kIgnoredLabel);
      } else if (label != kIgnoredLabel) {
        EXPECT_EQ(PlaceOf(label).position, 0u);
        EXPECT_EQ(PlaceOf(label).source, place.source);
      }
    }
  }
}

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TESTING_TOKEN_DATA_H_
