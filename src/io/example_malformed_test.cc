// Malformed records: every way the wire can break gives DATA_LOSS naming the problem and its
// byte offset, from ParseExample and BatchBuilder alike, and nothing crashes.
#include <bit>
#include <random>
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

using ::testing::HasSubstr;

using ::croupier::testing::Len;
std::string Tag(uint32_t field, wire::WireType type) {
  std::string out;
  wire::AppendTag(&out, field, type);
  return out;
}
// A record holding one feature named `key` whose Feature message is `feature`.
std::string OneFeature(const std::string& key, const std::string& feature) {
  return Len(1, Len(1, Len(1, key) + Len(2, feature)));
}

void ExpectDataLoss(const std::string& record, const std::string& what) {
  auto example = ParseExample(record);
  ASSERT_FALSE(example.ok());
  EXPECT_TRUE(absl::IsDataLoss(example.status())) << example.status();
  EXPECT_THAT(example.status().message(), HasSubstr("malformed tf.train.Example: "));
  EXPECT_THAT(example.status().message(), HasSubstr(what));
}

Example Sample() {
  return {{"image", Feature::Bytes({std::string(300, 'j')})},
          {"label", Feature::Ints({-7})},
          {"emb", Feature::Floats({1, 2, 3, 4})},
          {"tokens", Feature::Ints({1, 300, 70000})}};
}

std::unique_ptr<BatchBuilder> SampleBuilder() {
  return *BatchBuilder::Create(
      *ParseFeatureSpecs("image:bytes,label:int64,emb:float32[4],tokens:int64[*]"));
}

TEST(ExampleMalformedTest, EveryPrefixOfAValidRecordFailsCleanly) {
  for (bool packed : {true, false}) {
    std::string record = EncodeExample(Sample(), packed);
    auto builder = SampleBuilder();
    for (size_t n = 0; n < record.size(); ++n) {
      std::string prefix = record.substr(0, n);  // its own allocation, so ASan sees overruns
      auto example = ParseExample(prefix);
      absl::Status added = builder->AddRecord(prefix);
      if (n == 0) {  // the empty message is a valid Example with no features
        EXPECT_TRUE(example.ok() && example->empty());
        EXPECT_TRUE(absl::IsInvalidArgument(added)) << added;
        EXPECT_THAT(added.message(), HasSubstr("feature 'image': missing"));
        continue;
      }
      ASSERT_FALSE(example.ok()) << n;
      EXPECT_TRUE(absl::IsDataLoss(example.status())) << n << " " << example.status();
      EXPECT_TRUE(absl::IsDataLoss(added)) << n << " " << added;
      EXPECT_THAT(added.message(), HasSubstr(" at byte "));
    }
    EXPECT_EQ(builder->num_records(), 0u);
    EXPECT_TRUE(builder->AddRecord(record).ok());
  }
}

TEST(ExampleMalformedTest, MessagesNameTheProblemAndOffset) {
  ExpectDataLoss("\x0a", "truncated varint at byte 1");
  ExpectDataLoss("\x0a\x80", "truncated varint at byte 1");
  ExpectDataLoss("\x0a\x05\x0a\x01",
                 "length 5 runs past the end of its message (2 bytes left) "
                 "at byte 1");
  std::string eleven_bytes(12, '\xff');  // a varint field whose value runs on for 11 bytes
  eleven_bytes[0] = '\x08';
  eleven_bytes[11] = '\x01';
  ExpectDataLoss(eleven_bytes, "varint longer than 10 bytes at byte 1");
  ExpectDataLoss("\x0e", "invalid wire type 6 in field 1 at byte 0");
  ExpectDataLoss(std::string("\x0a\x00\x0f", 3), "invalid wire type 7 in field 1 at byte 2");
  ExpectDataLoss(std::string("\x00\x01", 2), "invalid field number 0 at byte 0");
  ExpectDataLoss("\x80\x80\x80\x80\x20", "tag does not fit in 32 bits at byte 0");
  ExpectDataLoss("\x0d\x01\x02", "truncated fixed32 at byte 1");
  ExpectDataLoss("\x09\x01\x02", "truncated fixed64 at byte 1");
  ExpectDataLoss(Tag(5, wire::kEndGroup), "end-group tag of field 5 without a start");
  ExpectDataLoss(Tag(5, wire::kStartGroup) + "\x08\x01", "group of field 5 is not closed");
  ExpectDataLoss(Tag(5, wire::kStartGroup) + Tag(6, wire::kEndGroup),
                 "end-group tag of field 6 closes group of field 5");
  std::string deep;
  for (int i = 0; i < 150; ++i) deep += Tag(5, wire::kStartGroup);
  ExpectDataLoss(deep, "groups nested too deeply");
}

TEST(ExampleMalformedTest, ListContentErrorsNameTheFeature) {
  std::string bad_floats = OneFeature("emb", Len(2, Len(1, "abcdefg")));
  ExpectDataLoss(bad_floats,
                 "feature 'emb': malformed tf.train.Example: packed float list of 7 "
                 "bytes is not a multiple of 4 at byte 14");
  std::string bad_ints = OneFeature("label", Len(3, Len(1, "\x01\x80")));
  ExpectDataLoss(bad_ints,
                 "feature 'label': malformed tf.train.Example: truncated varint at "
                 "byte 18");
  std::string bad_fixed = OneFeature("emb", Len(2, "\x0d\x01"));
  ExpectDataLoss(bad_fixed, "feature 'emb': malformed tf.train.Example: truncated fixed32");

  auto builder = SampleBuilder();
  absl::Status added = builder->AddRecord(bad_floats);
  EXPECT_TRUE(absl::IsDataLoss(added)) << added;
  EXPECT_EQ(added.message(),
            "feature 'emb': malformed tf.train.Example: packed float list of 7 "
            "bytes is not a multiple of 4 at byte 14");
}

TEST(ExampleMalformedTest, StructuralErrorsOutsideAFeatureNameNoFeature) {
  auto builder = SampleBuilder();
  absl::Status added = builder->AddRecord("\x0a\x03\x0a\x05\x0a");
  EXPECT_TRUE(absl::IsDataLoss(added)) << added;
  EXPECT_EQ(added.message(),
            "malformed tf.train.Example: length 5 runs past the end of its message (1 bytes "
            "left) at byte 3");
}

TEST(ExampleMalformedTest, BuilderSkipsUnwantedFeaturesWithoutDecodingThem) {
  // "junk" holds a broken float list; the builder does not look inside it, ParseExample does.
  std::string junk_entry =
      Len(1, Len(1, "junk") + Len(2, Len(2, Len(1, "abc"))));  // a Features field
  // Two `features` fields merge: the junk one, then Sample's.
  std::string record = Len(1, junk_entry) + EncodeExample(Sample());
  auto builder = SampleBuilder();
  absl::Status added = builder->AddRecord(record);
  EXPECT_TRUE(added.ok()) << added;
  EXPECT_TRUE(absl::IsDataLoss(ParseExample(record).status()));
}

TEST(ExampleMalformedTest, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(42);
  auto builder = SampleBuilder();
  for (int round = 0; round < 3000; ++round) {
    std::string record = EncodeExample(Sample(), round % 2 == 0);
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      record[rng() % record.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    if (round % 3 == 0) record.resize(rng() % record.size());
    auto example = ParseExample(record);
    EXPECT_TRUE(example.ok() || absl::IsDataLoss(example.status())) << example.status();
    uint64_t before = builder->num_records();
    absl::Status added = builder->AddRecord(record);
    EXPECT_TRUE(added.ok() || absl::IsDataLoss(added) || absl::IsInvalidArgument(added)) << added;
    EXPECT_EQ(builder->num_records(), before + (added.ok() ? 1 : 0));
    if (builder->num_records() == 64) {
      ASSERT_TRUE(builder->Finish().ok());
    }
  }
  EXPECT_TRUE(builder->Finish().ok());
}

}  // namespace
}  // namespace croupier
