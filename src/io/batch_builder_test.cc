#include <string>
#include <vector>

#include "croupier/batch.h"
#include "croupier/example.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/io_testing.h"
#include "src/io/proto_wire.h"

namespace croupier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSpecs[] =
    "image:bytes,label:int64,emb:float32[4],pix:float32[2,2],tokens:int64[*],names:bytes[*]";

std::unique_ptr<BatchBuilder> Builder(const std::string& specs = kSpecs) {
  auto parsed = ParseFeatureSpecs(specs);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  auto builder = BatchBuilder::Create(*parsed);
  EXPECT_TRUE(builder.ok()) << builder.status();
  return *std::move(builder);
}

using ::croupier::testing::Len;

Example Record(int i) {
  std::vector<int64_t> tokens(i % 3, i);
  std::vector<std::string> names(i % 2, "n" + std::to_string(i));
  float f = static_cast<float>(i);
  return {{"image", Feature::Bytes({std::string(10 + i, static_cast<char>('a' + i))})},
          {"label", Feature::Ints({-i})},
          {"emb", Feature::Floats({f, f + 1, f + 2, f + 3})},
          {"pix", Feature::Floats({f, -f, f, -f})},
          {"tokens", Feature::Ints(tokens)},
          {"names", Feature::Bytes(names)},
          {"ignored", Feature::Floats({9, 9})}};
}

Example With(Example example, const std::string& name, Feature feature) {
  for (auto& [n, f] : example) {
    if (n == name) f = std::move(feature);
  }
  return example;
}

Example Without(Example example, const std::string& name) {
  std::erase_if(example, [&](const auto& entry) { return entry.first == name; });
  return example;
}

void ExpectRejected(BatchBuilder& builder, const std::string& record, const std::string& message) {
  uint64_t before = builder.num_records();
  absl::Status status = builder.AddRecord(record);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(status.message(), message);
  EXPECT_EQ(builder.num_records(), before);
}

TEST(ExampleBatchBuilderTest, BuildsColumnsFromRecords) {
  auto builder = Builder();
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(builder->AddRecord(EncodeExample(Record(i), i != 1)).ok());
  EXPECT_GT(builder->buffered_bytes(), 0u);
  auto batch = builder->Finish();
  ASSERT_TRUE(batch.ok()) << batch.status();
  const BatchView& view = batch->view();
  EXPECT_EQ(view.num_records(), 3u);
  ASSERT_EQ(view.columns().size(), 6u);

  const ColumnView* image = view.Find("image");
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->dtype, DType::kBytes);
  EXPECT_EQ(image->ValuesShape(3), std::vector<int64_t>{3});
  EXPECT_THAT(image->offsets, ElementsAre(0, 10, 21, 33));
  EXPECT_EQ(image->bytes(2), std::string(12, 'c'));

  EXPECT_THAT(view.Find("label")->ints(), ElementsAre(0, -1, -2));
  EXPECT_TRUE(view.Find("label")->floats().empty());
  const ColumnView* pix = view.Find("pix");
  EXPECT_EQ(pix->ValuesShape(3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_THAT(pix->floats(), ElementsAre(0, 0, 0, 0, 1, -1, 1, -1, 2, -2, 2, -2));
  EXPECT_THAT(view.Find("emb")->floats(), ElementsAre(0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5));

  const ColumnView* tokens = view.Find("tokens");
  EXPECT_TRUE(tokens->variable_length);
  EXPECT_THAT(tokens->row_splits, ElementsAre(0, 0, 1, 3));
  EXPECT_THAT(tokens->ints(), ElementsAre(1, 2, 2));
  const ColumnView* names = view.Find("names");
  EXPECT_THAT(names->row_splits, ElementsAre(0, 0, 1, 1));
  EXPECT_EQ(names->num_values, 1u);
  EXPECT_EQ(names->bytes(0), "n1");
  EXPECT_EQ(view.Find("ignored"), nullptr);
}

TEST(ExampleBatchBuilderTest, RejectsRecordsThatDoNotFitTheSpecs) {
  auto builder = Builder();
  ASSERT_TRUE(builder->AddRecord(EncodeExample(Record(0))).ok());
  ExpectRejected(*builder, EncodeExample(Without(Record(1), "label")), "feature 'label': missing");
  ExpectRejected(*builder, EncodeExample(With(Record(1), "label", Feature::Floats({1}))),
                 "feature 'label': expected int64, found float_list");
  ExpectRejected(*builder, EncodeExample(With(Record(1), "image", Feature::Ints({1}))),
                 "feature 'image': expected bytes, found int64_list");
  ExpectRejected(*builder, EncodeExample(With(Record(1), "emb", Feature::Floats({1, 2, 3}))),
                 "feature 'emb': expected 4 values, found 3");
  ExpectRejected(*builder, EncodeExample(With(Record(1), "label", Feature::Ints({}))),
                 "feature 'label': expected 1 value, found 0");
  ExpectRejected(*builder, EncodeExample(With(Record(1), "label", Feature::None())),
                 "feature 'label': expected 1 value, found 0");
  ExpectRejected(*builder, EncodeExample(With(Record(1), "image", Feature::Bytes({"a", "b"}))),
                 "feature 'image': expected 1 value, found 2");
  // A Feature with no kind is an empty list of any dtype; an empty list of another kind is not.
  EXPECT_TRUE(builder->AddRecord(EncodeExample(With(Record(1), "tokens", Feature::None()))).ok());
  EXPECT_TRUE(builder->AddRecord(EncodeExample(With(Record(2), "tokens", Feature::Ints({})))).ok());
  ExpectRejected(*builder, EncodeExample(With(Record(1), "tokens", Feature::Floats({}))),
                 "feature 'tokens': expected int64, found float_list");
  EXPECT_EQ(builder->num_records(), 3u);
}

TEST(ExampleBatchBuilderTest, AFailedRecordLeavesNoTrace) {
  // The failing records decode some features before failing on a later one; the batch must equal
  // one built from the good records alone.
  auto clean = Builder();
  auto dirty = Builder();
  std::string truncated_tail = EncodeExample(Record(5));
  truncated_tail.resize(truncated_tail.size() - 3);
  for (int i = 0; i < 6; ++i) {
    std::string good = EncodeExample(Record(i));
    ASSERT_TRUE(clean->AddRecord(good).ok());
    ASSERT_TRUE(dirty->AddRecord(good).ok());
    EXPECT_FALSE(dirty->AddRecord(EncodeExample(Without(Record(i), "names"))).ok());
    EXPECT_FALSE(
        dirty->AddRecord(EncodeExample(With(Record(i), "names", Feature::Ints({1})))).ok());
    EXPECT_TRUE(absl::IsDataLoss(dirty->AddRecord(truncated_tail)));
  }
  EXPECT_EQ(clean->buffered_bytes(), dirty->buffered_bytes());
  EXPECT_EQ(clean->Finish()->ContentHash(), dirty->Finish()->ContentHash());
}

TEST(ExampleBatchBuilderTest, LastDuplicateKeyWinsAndOneofSwitchesCount) {
  auto builder = Builder("label:int64,v:float32[*]");
  // label: a wrong-kind entry then a right one; v: values of a kind later replaced.
  Example example = {{"label", Feature::Floats({1})},
                     {"v", Feature::Floats({1, 2, 3})},
                     {"label", Feature::Ints({7})},
                     {"v", Feature::Floats({4})}};
  ASSERT_TRUE(builder->AddRecord(EncodeExample(example)).ok());
  Example wrong_last = {
      {"v", Feature::Floats({})}, {"label", Feature::Ints({7})}, {"label", Feature::Bytes({"x"})}};
  ExpectRejected(*builder, EncodeExample(wrong_last),
                 "feature 'label': expected int64, found bytes_list");
  // Within one Feature: float_list {5}, int64_list {6}, float_list {8}: the oneof keeps {8}.
  std::string feature = Len(2, Len(1, std::string("\0\0\xa0\x40", 4))) +  // 5.0f
                        Len(3, Len(1, "\x06")) +
                        Len(2, Len(1, std::string("\0\0\0\x41", 4)));  // 8.0f
  std::string entries = Len(1, Len(1, "label") + Len(2, Len(3, Len(1, "\x01")))) +
                        Len(1, Len(1, "v") + Len(2, feature));
  std::string record = Len(1, entries);
  ASSERT_TRUE(builder->AddRecord(record).ok());
  auto batch = builder->Finish();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(batch->view().Find("label")->ints(), ElementsAre(7, 1));
  EXPECT_THAT(batch->view().Find("v")->floats(), ElementsAre(4, 8));
  EXPECT_THAT(batch->view().Find("v")->row_splits, ElementsAre(0, 1, 2));
}

TEST(ExampleBatchBuilderTest, FinishResetsForReuseAndIsDeterministic) {
  auto reused = Builder();
  ASSERT_TRUE(reused->AddRecord(EncodeExample(Record(7))).ok());
  auto first = reused->Finish();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(reused->num_records(), 0u);
  auto fresh = Builder();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(reused->AddRecord(EncodeExample(Record(i), true)).ok());
    ASSERT_TRUE(fresh->AddRecord(EncodeExample(Record(i), false)).ok());
  }
  auto a = reused->Finish();
  auto b = fresh->Finish();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->bytes(), b->bytes());
  EXPECT_EQ(a->ContentHash(), b->ContentHash());
  EXPECT_NE(a->ContentHash(), first->ContentHash());

  auto empty = reused->Finish();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->num_records(), 0u);
  EXPECT_EQ(empty->view().Find("tokens")->row_splits.size(), 1u);
}

TEST(ExampleBatchBuilderTest, LargeBytesValues) {
  auto builder = Builder("blob:bytes");
  std::string big(1 << 20, 'z');
  big[12345] = '\0';
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(builder->AddRecord(EncodeExample({{"blob", Feature::Bytes({big})}})).ok());
  }
  auto batch = builder->Finish();
  ASSERT_TRUE(batch.ok());
  const ColumnView* blob = batch->view().Find("blob");
  EXPECT_EQ(blob->values.size(), 3u << 20);
  EXPECT_EQ(blob->bytes(2), big);
}

TEST(ExampleBatchBuilderTest, CreateRejectsBadSpecs) {
  auto dup =
      BatchBuilder::Create({{"a", DType::kInt64, {}, false}, {"a", DType::kBytes, {}, false}});
  EXPECT_TRUE(absl::IsInvalidArgument(dup.status()));
  EXPECT_THAT(dup.status().message(), HasSubstr("duplicate feature name 'a'"));
  EXPECT_TRUE(absl::IsInvalidArgument(BatchBuilder::Create({}).status()));
}

// Records are tf.train.Examples: a builder reads bytes, float32 and int64 only, and says so when
// a spec names another dtype instead of making columns it could never fill.
TEST(ExampleBatchBuilderTest, CreateRefusesDTypesAnExampleCannotHold) {
  for (const char* spec : {"x:uint8[4]", "x:bool", "x:bfloat16[*]", "x:float64", "x:int32"}) {
    auto builder = BatchBuilder::Create(*ParseFeatureSpecs(std::string("id:int64,") + spec));
    EXPECT_TRUE(absl::IsInvalidArgument(builder.status())) << spec << ": " << builder.status();
    EXPECT_THAT(builder.status().message(), HasSubstr("feature 'x' is ")) << spec;
    EXPECT_THAT(builder.status().message(), HasSubstr("a tf.train.Example holds bytes, float32 "
                                                      "and int64 only"));
  }
}

}  // namespace
}  // namespace croupier
