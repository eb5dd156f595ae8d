// The batch buffer: its layout, and a reader that survives any corruption.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/batch_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

template <typename T>
T At(absl::string_view bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

Batch SampleBatch() {
  auto builder = *BatchBuilder::Create(
      *ParseFeatureSpecs("img:bytes,label:int64,emb:float32[3],tok:int64[*],tags:bytes[*]"));
  for (int i = 0; i < 5; ++i) {
    Example e = {{"img", Feature::Bytes({std::string(i * 3, 'x')})},
                 {"label", Feature::Ints({i})},
                 {"emb", Feature::Floats({0.5f * i, 1, 2})},
                 {"tok", Feature::Ints(std::vector<int64_t>(i, 42))},
                 {"tags", Feature::Bytes(std::vector<std::string>(i % 3, "tag"))}};
    EXPECT_TRUE(builder->AddRecord(EncodeExample(e)).ok());
  }
  return *builder->Finish();
}

// Reads every value a view exposes (ASan flags any read outside the buffer) and expects its
// sizes to add up.
uint64_t TouchEverything(const BatchView& view) {
  absl::StatusOr<uint64_t> sum = ReadEveryValue(view);
  EXPECT_TRUE(sum.ok()) << sum.status();
  return sum.value_or(0);
}

// Flips 1 to 3 random bits of `good`, most of them within its first `header` bytes (the header
// and column descriptors, where the offsets live), `rounds` times: each result must be refused as
// DATA_LOSS or give a view whose every value can be read. Returns how many were accepted.
int AcceptedOfRandomFlips(const std::string& good, size_t header, int rounds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int round = 0; round < rounds; ++round) {
    std::string bytes = good;
    for (int i = 0, flips = 1 + static_cast<int>(rng() % 3); i < flips; ++i) {
      size_t limit = rng() % 4 == 0 ? bytes.size() : header;
      bytes[rng() % limit] ^= static_cast<char>(1 << (rng() % 8));
    }
    auto batch = Batch::FromBytes(bytes);
    if (batch.ok()) {
      ++accepted;
      TouchEverything(batch->view());
    } else {
      EXPECT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
    }
  }
  return accepted;
}

TEST(ExampleBatchViewTest, LayoutMatchesTheDocumentation) {
  Batch batch = SampleBatch();
  absl::string_view b = batch.bytes();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kBatchAlignment, 0u);
  EXPECT_EQ(b.substr(0, 4), "CRBT");
  EXPECT_EQ(At<uint16_t>(b, 4), kBatchFormatVersion);
  EXPECT_EQ(At<uint64_t>(b, 8), b.size());
  EXPECT_EQ(At<uint64_t>(b, 16), 5u);
  EXPECT_EQ(At<uint32_t>(b, 24), 5u);
  uint32_t meta_end = At<uint32_t>(b, 28);
  // Column 2 is emb: float32, fixed, rank 1, dims {3}.
  size_t d = kBatchHeaderBytes + 2 * kBatchColumnBytes;
  EXPECT_EQ(At<uint8_t>(b, d), 1);
  EXPECT_EQ(At<uint8_t>(b, d + 1), 0);
  EXPECT_EQ(At<uint32_t>(b, d + 4), 1u);
  EXPECT_EQ(b.substr(At<uint64_t>(b, d + 8), At<uint64_t>(b, d + 16)), "emb");
  EXPECT_EQ(At<int64_t>(b, At<uint64_t>(b, d + 24)), 3);
  EXPECT_EQ(At<uint64_t>(b, d + 32), 15u);
  EXPECT_EQ(At<uint64_t>(b, d + 48), 60u);
  EXPECT_EQ(At<float>(b, At<uint64_t>(b, d + 40) + 12), 0.5f);
  // Column 3 is tok: int64, variable length; 0+1+2+3+4 values.
  d = kBatchHeaderBytes + 3 * kBatchColumnBytes;
  EXPECT_EQ(At<uint8_t>(b, d + 1), 1);
  EXPECT_EQ(At<uint64_t>(b, d + 32), 10u);
  EXPECT_EQ(At<uint64_t>(b, d + 80), 6u * 8);
  EXPECT_EQ(At<uint64_t>(b, At<uint64_t>(b, d + 72) + 8 * 5), 10u);
  // Every array starts 64-byte aligned, after the metadata.
  for (size_t c = 0; c < 5; ++c) {
    d = kBatchHeaderBytes + c * kBatchColumnBytes;
    for (size_t field : {40, 56, 72}) {
      uint64_t offset = At<uint64_t>(b, d + field);
      if (field != 40 && offset == 0) continue;
      EXPECT_EQ(offset % kBatchAlignment, 0u);
      EXPECT_GE(offset, meta_end);
    }
  }
}

TEST(ExampleBatchViewTest, FromBytesRoundTripsAndHashesEqual) {
  Batch batch = SampleBatch();
  auto copy = Batch::FromBytes(batch.bytes());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->ContentHash(), batch.ContentHash());
  EXPECT_EQ(TouchEverything(copy->view()), TouchEverything(batch.view()));
  EXPECT_EQ(copy->view().Find("tags")->bytes(0), "tag");
}

TEST(ExampleBatchViewTest, RejectsEveryTruncation) {
  std::string bytes(SampleBatch().bytes());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto batch = Batch::FromBytes(absl::string_view(bytes).substr(0, n));
    ASSERT_FALSE(batch.ok()) << n;
    EXPECT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
    EXPECT_THAT(batch.status().message(), HasSubstr("corrupt batch: "));
  }
}

TEST(ExampleBatchViewTest, RandomCorruptionGivesAnErrorOrAConsistentView) {
  const std::string good(SampleBatch().bytes());
  const size_t header = kBatchHeaderBytes + 5 * kBatchColumnBytes;
  EXPECT_GT(AcceptedOfRandomFlips(good, header, 20000, /*seed=*/7), 0);  // flips in the values
}

TEST(ExampleBatchViewTest, ErrorsNameTheColumnAndProblem) {
  std::string bytes(SampleBatch().bytes());
  size_t d = kBatchHeaderBytes + 2 * kBatchColumnBytes;  // emb
  bytes[d + 48] = 59;                                    // values_size
  auto batch = Batch::FromBytes(bytes);
  EXPECT_TRUE(absl::IsDataLoss(batch.status()));
  EXPECT_EQ(batch.status().message(),
            "corrupt batch: column 2 ('emb'): values array of 59 bytes for 15 values");
  bytes = std::string(SampleBatch().bytes());
  bytes[4] = 9;
  EXPECT_EQ(Batch::FromBytes(bytes).status().message(),
            "corrupt batch: format version 9, this reader knows 1 to 2");
  bytes[4] = 0;
  EXPECT_EQ(Batch::FromBytes(bytes).status().message(),
            "corrupt batch: format version 0, this reader knows 1 to 2");
}

TEST(ExampleBatchViewTest, MisalignedBufferIsRejected) {
  Batch batch = SampleBatch();
  std::shared_ptr<uint8_t> buffer = Batch::AllocateBuffer(batch.bytes().size() + 1);
  std::memcpy(buffer.get() + 1, batch.bytes().data(), batch.bytes().size());
  auto view = BatchView::Parse(
      absl::string_view(reinterpret_cast<const char*>(buffer.get()) + 1, batch.bytes().size()));
  EXPECT_TRUE(absl::IsInvalidArgument(view.status())) << view.status();
}

TEST(ExampleBatchViewTest, FromColumnsChecksItsInput) {
  std::vector<uint64_t> offsets = {0, 2, 1};  // decreasing
  ColumnData bytes_col{"s", DType::kBytes, false, {}, 2, "abc", offsets, {}};
  auto bad = Batch::FromColumns(2, {bytes_col});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("inconsistent batch columns"));
  offsets = {0, 1, 3};
  EXPECT_TRUE(Batch::FromColumns(2, {bytes_col}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(Batch::FromColumns(3, {bytes_col}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Batch::FromColumns(2, {bytes_col, bytes_col}).status()));

  std::vector<int64_t> values = {1, 2, 3};
  std::vector<uint64_t> splits = {0, 3};
  absl::string_view raw(reinterpret_cast<const char*>(values.data()), 24);
  ColumnData ints{"i", DType::kInt64, true, {}, 3, raw, {}, splits};
  auto ok = Batch::FromColumns(1, {ints});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->view().columns()[0].ints()[2], 3);
  ints.num_values = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(Batch::FromColumns(1, {ints}).status()));
}

TEST(ExampleBatchViewTest, ContentHashIsStableAndSpreads) {
  // Pinned: the algorithm is documented (with these test vectors) for other languages.
  EXPECT_EQ(ContentHash(""), 0x67b25002c34fabdbu);
  EXPECT_EQ(ContentHash("abc"), 0x3aba3e9994fad02eu);
  std::string hundred;
  for (int i = 0; i < 100; ++i) hundred.push_back(static_cast<char>(i));
  EXPECT_EQ(ContentHash(hundred), 0x34d0de062bbe1ff9u);
  absl::flat_hash_set<uint64_t> seen;
  std::string data(200, '\0');
  for (size_t n = 0; n <= data.size(); ++n)
    seen.insert(ContentHash(absl::string_view(data).substr(0, n)));
  for (size_t bit = 0; bit < 8 * data.size(); ++bit) {
    std::string flipped = data;
    flipped[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    seen.insert(ContentHash(flipped));
  }
  EXPECT_EQ(seen.size(), 201u + 8 * 200);
}

TEST(ExampleBatchViewTest, LayoutIsPinned) {
  // The same records must give the same bytes on every build and machine (determinism, G3). If
  // this changes on purpose, bump kBatchFormatVersion and update docs/formats.md. (Version 1 gave
  // 0xa625df61e9077049: the same bytes but for the version field.)
  Batch batch = SampleBatch();
  EXPECT_EQ(batch.bytes().size(), 1200u);
  EXPECT_EQ(batch.ContentHash(), 0xe401d885e59b9c78u);
  std::string v1(batch.bytes());
  v1[4] = 1;
  EXPECT_EQ(ContentHash(v1), 0xa625df61e9077049u);
}

// --- every dtype ------------------------------------------------------------------------------

// 3 records of one column per numeric dtype, fixed shape [2] ("f<dtype>") and variable length
// ("v<dtype>", rows of 1, 0 and 3 values), and a bytes column. Every value's bytes differ from
// its neighbours' so that any mix-up shows; bools are 0 and 1.
class AllDTypes {
 public:
  AllDTypes() {
    for (uint8_t code = 1; code <= kLastDTypeCode; ++code) {
      const DType dtype = static_cast<DType>(code);
      names_.push_back(absl::StrCat("f", DTypeName(dtype)));
      names_.push_back(absl::StrCat("v", DTypeName(dtype)));
      raw_.push_back(Raw(dtype, 6));
      raw_.push_back(Raw(dtype, 4));
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      const DType dtype = static_cast<DType>(1 + i / 2);
      const bool variable = i % 2 == 1;
      columns_.push_back(ColumnData{names_[i],
                                    dtype,
                                    variable,
                                    variable ? absl::Span<const int64_t>() : kDims,
                                    raw_[i].size() / DTypeSize(dtype),
                                    raw_[i],
                                    {},
                                    variable ? kSplits : absl::Span<const uint64_t>()});
    }
    columns_.push_back(ColumnData{"s", DType::kBytes, false, {}, 3, "abcdef", kOffsets, {}});
  }

  // Values' bytes for n values of `dtype`.
  static std::string Raw(DType dtype, size_t n) {
    std::string raw(n * DTypeSize(dtype), '\0');
    for (size_t i = 0; i < raw.size(); ++i) {
      raw[i] = dtype == DType::kBool ? static_cast<char>(i % 2)
                                     : static_cast<char>(static_cast<uint8_t>(dtype) * 37 + i * 11);
    }
    return raw;
  }

  const std::vector<ColumnData>& columns() const { return columns_; }
  absl::StatusOr<Batch> Make() const { return Batch::FromColumns(3, columns_); }

  static constexpr int64_t kDims[] = {2};
  static constexpr uint64_t kSplits[] = {0, 1, 1, 4};
  static constexpr uint64_t kOffsets[] = {0, 1, 3, 6};

 private:
  std::vector<std::string> names_, raw_;
  std::vector<ColumnData> columns_;
};

TEST(ExampleBatchViewTest, EveryDTypeRoundTripsAsItself) {
  AllDTypes all;
  auto batch = all.Make();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(At<uint16_t>(batch->bytes(), 4), 2u);  // what this build writes
  auto copy = Batch::FromBytes(batch->bytes());
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_EQ(copy->view().columns().size(), all.columns().size());
  for (size_t i = 0; i < all.columns().size(); ++i) {
    const ColumnData& want = all.columns()[i];
    const ColumnView& c = copy->view().columns()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(c.name, want.name);
    EXPECT_EQ(c.dtype, want.dtype);
    EXPECT_EQ(c.element_size(), DTypeSize(want.dtype));
    EXPECT_EQ(c.variable_length, want.variable_length);
    EXPECT_EQ(c.num_values, want.num_values);
    EXPECT_EQ(c.values, want.values);
    EXPECT_EQ(std::vector<int64_t>(c.dims.begin(), c.dims.end()),
              std::vector<int64_t>(want.dims.begin(), want.dims.end()));
    EXPECT_EQ(std::vector<uint64_t>(c.row_splits.begin(), c.row_splits.end()),
              std::vector<uint64_t>(want.row_splits.begin(), want.row_splits.end()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.values.data()) % kBatchAlignment, 0u);
  }
  EXPECT_EQ(TouchEverything(copy->view()), TouchEverything(batch->view()));
  EXPECT_EQ(copy->ContentHash(), batch->ContentHash());
}

// A test vector for other readers and writers of every dtype (docs/formats.md).
TEST(ExampleBatchViewTest, EveryDTypeLayoutIsPinned) {
  Batch batch = *AllDTypes().Make();
  EXPECT_EQ(batch.bytes().size(), 5344u);
  EXPECT_EQ(batch.ContentHash(), 0xe15287063313661u);
}

TEST(ExampleBatchViewTest, TypedValuesReadEachDTypesBits) {
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC000};  // 1.0 and -2.0: a float32's upper bits
  const std::vector<double> f64 = {0.5, -1e300};
  const std::vector<int8_t> i8 = {-128, 127};
  const std::vector<uint8_t> flags = {1, 0};
  const std::vector<uint64_t> u64 = {~uint64_t{0}, 1};
  auto bytes_of = [](const auto& v) {
    return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  std::vector<ColumnData> columns = {
      {"bf16", DType::kBFloat16, false, {}, 2, bytes_of(bf16), {}, {}},
      {"f64", DType::kFloat64, false, {}, 2, bytes_of(f64), {}, {}},
      {"i8", DType::kInt8, false, {}, 2, bytes_of(i8), {}, {}},
      {"flag", DType::kBool, false, {}, 2, bytes_of(flags), {}, {}},
      {"u64", DType::kUInt64, false, {}, 2, bytes_of(u64), {}, {}}};
  auto batch = Batch::FromColumns(2, columns);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const BatchView& v = batch->view();
  EXPECT_THAT(v.Find("bf16")->values_as<uint16_t>(), ::testing::ElementsAre(0x3F80, 0xC000));
  EXPECT_THAT(v.Find("f64")->values_as<double>(), ::testing::ElementsAre(0.5, -1e300));
  EXPECT_THAT(v.Find("i8")->values_as<int8_t>(), ::testing::ElementsAre(-128, 127));
  EXPECT_THAT(v.Find("flag")->values_as<bool>(), ::testing::ElementsAre(true, false));
  EXPECT_THAT(v.Find("u64")->values_as<uint64_t>(), ::testing::ElementsAre(~uint64_t{0}, 1u));
  // A type of another size, or the other accessors, give nothing.
  EXPECT_TRUE(v.Find("bf16")->values_as<float>().empty());
  EXPECT_TRUE(v.Find("f64")->ints().empty());
  EXPECT_TRUE(v.Find("f64")->floats().empty());
  EXPECT_EQ(v.Find("f64")->values_as<int64_t>().size(), 2u);  // the bits, read as asked
}

TEST(ExampleBatchViewTest, AnUnknownDTypeIsDataLossNamingIt) {
  std::string bytes(AllDTypes().Make()->bytes());
  for (uint8_t code : {kLastDTypeCode + 1, 200, 255}) {
    bytes[kBatchHeaderBytes] = static_cast<char>(code);  // column 0's dtype
    auto batch = Batch::FromBytes(bytes);
    EXPECT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
    EXPECT_EQ(batch.status().message(),
              absl::StrCat("corrupt batch: column 0 ('ffloat32'): unknown dtype ", code));
  }
  // A known code of another element size no longer fits the values array.
  bytes[kBatchHeaderBytes] = static_cast<char>(DType::kInt16);
  EXPECT_EQ(Batch::FromBytes(bytes).status().message(),
            "corrupt batch: column 0 ('ffloat32'): values array of 24 bytes for 6 values");
}

TEST(ExampleBatchViewTest, BoolValuesMustBeZeroOrOne) {
  const std::vector<uint8_t> flags = {0, 1, 2};
  ColumnData c{"m",   DType::kBool,
               false, {},
               3,     absl::string_view(reinterpret_cast<const char*>(flags.data()), 3),
               {},    {}};
  auto made = Batch::FromColumns(3, {c});
  EXPECT_TRUE(absl::IsInvalidArgument(made.status())) << made.status();
  EXPECT_THAT(made.status().message(), HasSubstr("column 0 ('m'): bool value 2 is 2, not 0 or 1"));
  Batch good = *AllDTypes().Make();
  const size_t at = good.view().Find("fbool")->values.data() - good.bytes().data();
  std::string bytes(good.bytes());
  bytes[at + 3] = 7;
  auto batch = Batch::FromBytes(bytes);
  EXPECT_TRUE(absl::IsDataLoss(batch.status())) << batch.status();
  EXPECT_THAT(batch.status().message(), HasSubstr("('fbool'): bool value 3 is 7, not 0 or 1"));
}

TEST(ExampleBatchViewTest, Version1BuffersStillParse) {
  // A version 1 writer's batch is this build's bytes/float32/int64 batch with version 1.
  std::string bytes(SampleBatch().bytes());
  bytes[4] = 1;
  auto old = Batch::FromBytes(bytes);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(TouchEverything(old->view()), TouchEverything(SampleBatch().view()));
  EXPECT_EQ(old->view().Find("tags")->bytes(0), "tag");
  EXPECT_THAT(old->view().Find("tok")->ints(), ::testing::Each(42));
  // Version 1 knows dtypes 0 to 2 only.
  std::string all(AllDTypes().Make()->bytes());
  all[4] = 1;
  auto refused = Batch::FromBytes(all);
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_EQ(refused.status().message(),
            "corrupt batch: column 4 ('fbool'): dtype 3 (bool) in a format version 1 buffer, "
            "which has dtypes 0 to 2 only");
}

TEST(ExampleBatchViewTest, RandomCorruptionOfEveryDTypeGivesAnErrorOrAConsistentView) {
  const std::string good(AllDTypes().Make()->bytes());
  const size_t header = kBatchHeaderBytes + AllDTypes().columns().size() * kBatchColumnBytes;
  EXPECT_GT(AcceptedOfRandomFlips(good, header, 5000, /*seed=*/11), 0);
}

}  // namespace
}  // namespace croupier

namespace croupier {
namespace {

TEST(ExampleBatchViewTest, DeferredValuesAreFilledInPlaceBeforeTheBatchIsValidated) {
  const std::vector<int32_t> values = {7, 8, 9, 10};
  const absl::string_view raw(reinterpret_cast<const char*>(values.data()), 16);
  const std::vector<int64_t> dims = {2};
  ColumnData given{"x", DType::kInt32, false, dims, 4, raw, {}, {}};
  const Batch want = *Batch::FromColumns(2, {given});

  ColumnData deferred = given;
  deferred.values = absl::string_view(nullptr, 16);
  std::vector<size_t> filled;
  auto batch = Batch::FromColumns(2, {deferred}, &Batch::AllocateBuffer,
                                  [&](size_t column, absl::Span<uint8_t> out) {
                                    filled.push_back(column);
                                    EXPECT_EQ(out.size(), 16u);
                                    std::memcpy(out.data(), values.data(), 16);
                                    return absl::OkStatus();
                                  });
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(filled, std::vector<size_t>{0});
  EXPECT_EQ(batch->ContentHash(), want.ContentHash());

  // Without a filler, deferred values are refused; a filler's error is returned as it is.
  EXPECT_TRUE(absl::IsInvalidArgument(Batch::FromColumns(2, {deferred}).status()));
  auto failed = Batch::FromColumns(2, {deferred}, &Batch::AllocateBuffer,
                                   [](size_t, absl::Span<uint8_t>) {
                                     return absl::DataLossError("no records");
                                   });
  EXPECT_EQ(failed.status(), absl::DataLossError("no records"));
  // A bool column filled with a byte other than 0 or 1 fails validation, as a copied one would.
  ColumnData flags{"b", DType::kBool, false, {}, 2, absl::string_view(nullptr, 2), {}, {}};
  auto bad = Batch::FromColumns(2, {flags}, &Batch::AllocateBuffer,
                                [](size_t, absl::Span<uint8_t> out) {
                                  out[0] = 1;
                                  out[1] = 7;
                                  return absl::OkStatus();
                                });
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
}

}  // namespace
}  // namespace croupier
