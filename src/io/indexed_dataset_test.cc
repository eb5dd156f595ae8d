#include "src/io/indexed_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;
using ::testing::HasSubstr;

std::vector<std::vector<int32_t>> Documents() {
  return {{5, 6, 7}, {}, {65535, 0, 1, 2}, {42}};
}

TEST(IndexedDatasetTest, ReadsWhatWasWrittenInEitherDtype) {
  ScopedTempDir dir;
  for (TokenDType dtype : {TokenDType::kUInt16, TokenDType::kInt32}) {
    SCOPED_TRACE(TokenDTypeName(dtype));
    const std::string prefix = dir.Join(std::string(TokenDTypeName(dtype)));
    ASSERT_TRUE(WriteIndexedDataset(prefix, dtype, Documents()).ok());
    auto data = IndexedDataset::Open(prefix);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ((*data)->dtype(), dtype);
    EXPECT_THAT((*data)->lengths(), ::testing::ElementsAre(3, 0, 4, 1));
    for (uint64_t d = 0; d < 4; ++d) {
      std::vector<int32_t> got(Documents()[d].size());
      ASSERT_TRUE((*data)->Read(d, 0, absl::MakeSpan(got)).ok());
      EXPECT_EQ(got, Documents()[d]) << d;
    }
    std::vector<int32_t> middle(2);
    ASSERT_TRUE((*data)->Read(2, 1, absl::MakeSpan(middle)).ok());
    EXPECT_EQ(middle, (std::vector<int32_t>{0, 1}));
    auto past = (*data)->Read(2, 3, absl::MakeSpan(middle));
    EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
    EXPECT_THAT(past.message(), HasSubstr("document 2, which has 4"));
  }
  EXPECT_THAT(WriteIndexedDataset(dir.Join("big"), TokenDType::kUInt16, {{1, 70000}}).message(),
              HasSubstr("document 0 token 1 is 70000"));
}

TEST(IndexedDatasetTest, ABrokenIndexIsNamedWithItsByteOffset) {
  TokenIndex index;
  index.dtype = TokenDType::kInt32;
  index.lengths = {3, 2};
  index.pointers = {0, 12};
  const std::string good = EncodeTokenIndex(index);
  ASSERT_TRUE(ParseTokenIndex(good, 20, "x.idx").ok());
  auto error = [](const std::string& bytes, uint64_t bin) {
    return ParseTokenIndex(bytes, bin, "x.idx").status();
  };
  std::string bad = good;
  bad[0] = 'N';
  EXPECT_THAT(error(bad, 20).message(), HasSubstr("x.idx at byte 0: not a Megatron"));
  bad = good;
  bad[9] = 2;
  EXPECT_THAT(error(bad, 20).message(), HasSubstr("at byte 9: index version 2"));
  bad = good;
  bad[17] = 7;  // float32
  EXPECT_TRUE(absl::IsInvalidArgument(error(bad, 20)));
  EXPECT_THAT(error(bad, 20).message(), HasSubstr("dtype code 7 (float32)"));
  EXPECT_THAT(error(good.substr(0, 20), 20).message(), HasSubstr("within its 34-byte header"));
  EXPECT_THAT(error(good.substr(0, good.size() - 1), 20).message(), HasSubstr("the index is"));
  bad = good;
  const int32_t negative = -1;
  std::memcpy(bad.data() + 34 + 4, &negative, 4);
  EXPECT_THAT(error(bad, 20).message(), HasSubstr("at byte 38: document 1 has length -1"));
  // The .bin is shorter than the second document needs.
  EXPECT_TRUE(absl::IsDataLoss(error(good, 19)));
  EXPECT_THAT(error(good, 19).message(), HasSubstr("at byte 50: document 1 (2 tokens at byte 12)"));
  // A count near 2^64 does not wrap into a small size.
  bad = good;
  const uint64_t huge = ~uint64_t{0} / 4;
  std::memcpy(bad.data() + 18, &huge, 8);
  EXPECT_TRUE(absl::IsDataLoss(error(bad, 20)));
}

// uint16 tokens are read a chunk at a time: a document many chunks long reads whole and from
// any offset, and a .bin cut within its second chunk is named with the byte where it ends.
TEST(IndexedDatasetTest, LongUint16DocumentsReadAcrossChunks) {
  ScopedTempDir dir;
  const std::string prefix = dir.Join("long");
  std::vector<int32_t> doc(10001);
  for (size_t t = 0; t < doc.size(); ++t) doc[t] = static_cast<int32_t>((t * 7919) % 65536);
  ASSERT_TRUE(WriteIndexedDataset(prefix, TokenDType::kUInt16, {{3, 4}, doc}).ok());
  auto data = IndexedDataset::Open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int32_t> whole(doc.size());
  ASSERT_TRUE((*data)->Read(1, 0, absl::MakeSpan(whole)).ok());
  EXPECT_EQ(whole, doc);
  std::vector<int32_t> across(4099);
  ASSERT_TRUE((*data)->Read(1, 4095, absl::MakeSpan(across)).ok());
  EXPECT_TRUE(std::equal(across.begin(), across.end(), doc.begin() + 4095));
  // Document 1 starts at byte 4; cut the .bin 5,000 tokens into it.
  ASSERT_EQ(::truncate((prefix + ".bin").c_str(), 4 + 2 * 5000), 0);
  const absl::Status cut = (*data)->Read(1, 0, absl::MakeSpan(whole));
  EXPECT_TRUE(absl::IsDataLoss(cut)) << cut;
  EXPECT_THAT(cut.message(), HasSubstr("long.bin at byte 10004"));
}

// ReadMany: several ranges of both dtypes in one call give what Read gives one at a time; a range
// past a document's end is OUT_OF_RANGE naming it; a .bin cut short is DATA_LOSS at its byte.
TEST(IndexedDatasetTest, ReadManyReadsWhatReadReads) {
  ScopedTempDir dir;
  std::vector<int32_t> doc(10001);
  for (size_t t = 0; t < doc.size(); ++t) doc[t] = static_cast<int32_t>((t * 7919) % 65536);
  for (TokenDType dtype : {TokenDType::kUInt16, TokenDType::kInt32}) {
    const std::string prefix = dir.Join(std::string(TokenDTypeName(dtype)));
    ASSERT_TRUE(WriteIndexedDataset(prefix, dtype, {{3, 4}, doc, {5}}).ok());
    auto data = IndexedDataset::Open(prefix);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_FALSE((*data)->remote());
    std::vector<int32_t> a(2), b(4099), c(1), none;
    const std::vector<IndexedDataset::TokenRange> ranges = {
        {0, 0, absl::MakeSpan(a)}, {1, 4095, absl::MakeSpan(b)}, {2, 0, absl::MakeSpan(c)},
        {1, 7, absl::MakeSpan(none)}};
    ASSERT_TRUE((*data)->ReadMany(ranges).ok());
    EXPECT_EQ(a, (std::vector<int32_t>{3, 4}));
    EXPECT_TRUE(std::equal(b.begin(), b.end(), doc.begin() + 4095));
    EXPECT_EQ(c, std::vector<int32_t>{5});
    std::vector<int32_t> past(3);
    const absl::Status out = (*data)->ReadMany({{{0, 0, absl::MakeSpan(a)},
                                                 {2, 0, absl::MakeSpan(past)}}});
    EXPECT_TRUE(absl::IsOutOfRange(out)) << out;
    EXPECT_THAT(out.message(), HasSubstr("tokens [0, 3) of document 2, which has 1"));
  }
  const std::string prefix = dir.Join("uint16");
  auto data = IndexedDataset::Open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(::truncate((prefix + ".bin").c_str(), 4 + 2 * 5000), 0);
  std::vector<int32_t> whole(doc.size());
  const absl::Status cut = (*data)->ReadMany({{{1, 0, absl::MakeSpan(whole)}}});
  EXPECT_TRUE(absl::IsDataLoss(cut)) << cut;
  EXPECT_THAT(cut.message(), HasSubstr("uint16.bin at byte 10004"));
}

TEST(IndexedDatasetTest, ABinCutShortAfterOpenIsDataLossNamingIt) {
  ScopedTempDir dir;
  const std::string prefix = dir.Join("cut");
  std::vector<std::vector<int32_t>> docs(64, std::vector<int32_t>(1024, 9));
  ASSERT_TRUE(WriteIndexedDataset(prefix, TokenDType::kInt32, docs).ok());
  auto data = IndexedDataset::Open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(::truncate((prefix + ".bin").c_str(), 4096), 0);
  std::vector<int32_t> got(1024);
  const absl::Status read = (*data)->Read(40, 0, absl::MakeSpan(got));
  EXPECT_TRUE(absl::IsDataLoss(read) || absl::IsOutOfRange(read)) << read;
  EXPECT_THAT(read.message(), HasSubstr("cut.bin"));
  EXPECT_TRUE(absl::IsNotFound(IndexedDataset::Open(dir.Join("missing")).status()));
}

TEST(IndexedDatasetTest, AWriterWritesADocumentAtATimeAndAnUnfinishedPairIsRefused) {
  ScopedTempDir dir;
  const std::string prefix = dir.Join("stream");
  ASSERT_TRUE(WriteIndexedDataset(prefix, TokenDType::kUInt16, {{1, 2}}).ok());
  auto writer = IndexedDatasetWriter::Create(prefix, TokenDType::kUInt16);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Add(std::vector<int32_t>{7, 8, 9}).ok());
  // A token uint16 cannot hold is named, and the document is not written.
  absl::Status bad = (*writer)->Add(std::vector<int32_t>{1, 70000});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("document 1 token 1 is 70000"));
  ASSERT_TRUE((*writer)->Add(std::vector<int32_t>{}).ok());
  // Before Finish the old index is gone: the pair is not read as the old dataset.
  EXPECT_EQ(IndexedDataset::Open(prefix).status().code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE((*writer)->Add(std::vector<int32_t>{65535}).ok());
  EXPECT_EQ((*writer)->num_documents(), 3u);
  EXPECT_EQ((*writer)->num_tokens(), 4u);
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->Add(std::vector<int32_t>{1}).code(), absl::StatusCode::kFailedPrecondition);
  auto data = IndexedDataset::Open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT((*data)->lengths(), ::testing::ElementsAre(3, 0, 1));
  std::vector<int32_t> got(3);
  ASSERT_TRUE((*data)->Read(0, 0, absl::MakeSpan(got)).ok());
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8, 9}));
  std::vector<int32_t> last(1);
  ASSERT_TRUE((*data)->Read(2, 0, absl::MakeSpan(last)).ok());
  EXPECT_EQ(last[0], 65535);
}

}  // namespace
}  // namespace croupier
