// ParseExample and EncodeExample on well-formed input, including the protobuf corner cases:
// packed/unpacked/mixed lists, unknown fields, repeated keys, merged fields, oneof switches.
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "croupier/example.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/io_testing.h"
#include "src/io/proto_wire.h"

namespace croupier {
namespace {

// Hand-built wire bytes, for shapes EncodeExample never writes.
using ::croupier::testing::Len;
std::string Varint(uint32_t field, uint64_t v) {
  std::string out;
  wire::AppendTag(&out, field, wire::kVarint);
  wire::AppendVarint(&out, v);
  return out;
}
std::string Fixed32(uint32_t field, float v) {
  std::string out;
  wire::AppendTag(&out, field, wire::kFixed32);
  wire::AppendFixed32(&out, std::bit_cast<uint32_t>(v));
  return out;
}
std::string PackedFloats(const std::vector<float>& values) {
  std::string payload;
  for (float v : values) wire::AppendFixed32(&payload, std::bit_cast<uint32_t>(v));
  return Len(1, payload);
}
std::string PackedInts(const std::vector<int64_t>& values) {
  std::string payload;
  for (int64_t v : values) wire::AppendVarint(&payload, static_cast<uint64_t>(v));
  return Len(1, payload);
}
std::string Entry(const std::string& key, const std::string& feature) {
  return Len(1, Len(1, key) + Len(2, feature));
}
std::string Record(const std::string& entries) { return Len(1, entries); }

Example Parsed(const std::string& record) {
  auto example = ParseExample(record);
  EXPECT_TRUE(example.ok()) << example.status();
  return example.ok() ? *example : Example();
}

TEST(ExampleParseTest, EncodeThenParseRoundTripsPackedAndUnpacked) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Example example = {
      {"a_bytes", Feature::Bytes({"", "x", std::string("\0\xff", 2)})},
      {"b_floats", Feature::Floats({1.5f, -0.0f, nan, std::numeric_limits<float>::infinity()})},
      {"c_ints", Feature::Ints({0, -1, 1, std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), 300})},
      {"d_empty_floats", Feature::Floats({})},
      {"e_empty_ints", Feature::Ints({})},
      {"f_empty_bytes", Feature::Bytes({})},
      {"g_none", Feature::None()},
  };
  for (bool packed : {true, false}) {
    SCOPED_TRACE(packed ? "packed" : "unpacked");
    EXPECT_EQ(Parsed(EncodeExample(example, packed)), example);
  }
  EXPECT_NE(EncodeExample(example, true), EncodeExample(example, false));
}

TEST(ExampleParseTest, NegativeInt64IsATenByteVarint) {
  std::string record = EncodeExample({{"n", Feature::Ints({-1})}});
  // Example(2) Features(2) entry key(3) value tag+len(2) Int64List tag+len(2) packed tag+len(2).
  EXPECT_EQ(record.size(), 2 + 2 + 3 + 2 + 2 + 2 + 10u);
  EXPECT_EQ(Parsed(record)[0].second.ints, std::vector<int64_t>{-1});
}

TEST(ExampleParseTest, MixedPackedAndUnpackedFieldsOfOneListConcatenate) {
  std::string floats = PackedFloats({1, 2}) + Fixed32(1, 3) + PackedFloats({}) + Fixed32(1, 4);
  std::string ints = Varint(1, 7) + PackedInts({8, -9}) + Varint(1, 10);
  Example example = Parsed(Record(Entry("f", Len(2, floats)) + Entry("i", Len(3, ints))));
  ASSERT_EQ(example.size(), 2u);
  EXPECT_EQ(example[0].second, Feature::Floats({1, 2, 3, 4}));
  EXPECT_EQ(example[1].second, Feature::Ints({7, 8, -9, 10}));
}

// Regression (fuzz/example_fuzzer): an empty packed float list arriving first passed the null
// data() of an empty vector to memcpy, which UBSan reports as undefined behavior.
TEST(ExampleParseTest, EmptyPackedFloatListFirstIsAnEmptyFloatList) {
  Example example = Parsed(Record(Entry("f", Len(2, PackedFloats({})))));
  ASSERT_EQ(example.size(), 1u);
  EXPECT_EQ(example[0].second, Feature::Floats({}));
  example = Parsed(Record(Entry("f", Len(2, PackedFloats({}) + PackedFloats({5})))));
  ASSERT_EQ(example.size(), 1u);
  EXPECT_EQ(example[0].second, Feature::Floats({5}));
}

TEST(ExampleParseTest, FeatureWithNoKindAndEntryWithoutValueOrKey) {
  // An empty Feature, an entry with only a key, and an entry with only a value (key "").
  std::string entries =
      Entry("none", "") + Len(1, Len(1, "keyonly")) + Len(1, Len(2, Len(3, PackedInts({5}))));
  Example example = Parsed(Record(entries));
  ASSERT_EQ(example.size(), 3u);
  EXPECT_EQ(example[0].first, "");
  EXPECT_EQ(example[0].second, Feature::Ints({5}));
  EXPECT_EQ(example[1].first, "keyonly");
  EXPECT_EQ(example[1].second, Feature::None());
  EXPECT_EQ(example[2].first, "none");
  EXPECT_FALSE(example[2].second.kind_set);
  EXPECT_EQ(example[2].second.size(), 0u);
}

TEST(ExampleParseTest, DuplicateMapKeyLastOneWinsWhole) {
  std::string entries = Entry("k", Len(3, PackedInts({1, 2}))) + Entry("other", Len(1, "")) +
                        Entry("k", Len(2, PackedFloats({5})));
  Example example = Parsed(Record(entries));
  ASSERT_EQ(example.size(), 2u);
  EXPECT_EQ(example[0].first, "k");
  EXPECT_EQ(example[0].second, Feature::Floats({5}));
}

TEST(ExampleParseTest, RepeatedMessagesMergeAndTheOneofKeepsTheLastKind) {
  // Two `features` fields merge; two `value` fields of one entry merge; the oneof switches kind.
  std::string merged_value =
      Len(2, Len(3, PackedInts({1})) + Len(3, PackedInts({2}))) + Len(2, Len(3, PackedInts({3})));
  std::string switched = Len(3, PackedInts({1})) + Len(1, Len(1, "b")) + Len(3, PackedInts({2}));
  std::string record = Record(Len(1, Len(1, "m") + merged_value)) +
                       Record(Entry("s", switched) + Entry("t", Len(2, "") + Len(1, "")));
  Example example = Parsed(record);
  ASSERT_EQ(example.size(), 3u);
  EXPECT_EQ(example[0].second, Feature::Ints({1, 2, 3}));
  EXPECT_EQ(example[1].second, Feature::Ints({2}));
  EXPECT_EQ(example[2].second, Feature::Bytes({}));
}

TEST(ExampleParseTest, UnknownFieldsOfEveryWireTypeAreSkippedAtEveryLevel) {
  std::string group;  // field 9 group holding a nested group and a varint
  wire::AppendTag(&group, 9, wire::kStartGroup);
  wire::AppendTag(&group, 10, wire::kStartGroup);
  group += Varint(1, 5);
  wire::AppendTag(&group, 10, wire::kEndGroup);
  wire::AppendTag(&group, 9, wire::kEndGroup);
  std::string fixed64;
  wire::AppendTag(&fixed64, 12, wire::kFixed64);
  fixed64 += std::string(8, '\x7f');
  std::string unknown = Varint(15, 1ull << 63) + Fixed32(14, 2.5f) + Len(13, "junk") + fixed64 +
                        group + Varint(536870911, 1);  // the largest field number
  // Known field numbers with the wrong wire type are unknown fields too, as in protobuf.
  std::string floats = unknown + Varint(1, 99) + PackedFloats({1}) + unknown + Fixed32(1, 2);
  std::string ints = Fixed32(1, 9) + PackedInts({3}) + unknown;
  std::string bytes = Varint(1, 4) + Len(1, "v") + unknown;
  std::string feature_f = unknown + Len(2, floats) + Varint(3, 1);
  std::string entry_f = unknown + Len(1, "f") + Varint(2, 1) + Len(2, feature_f) + unknown;
  std::string features = unknown + Len(1, entry_f) + Varint(1, 3) + Entry("i", Len(3, ints)) +
                         Entry("b", Len(1, bytes)) + unknown;
  std::string record = unknown + Len(1, features) + Varint(1, 2) + unknown;
  Example example = Parsed(record);
  ASSERT_EQ(example.size(), 3u);
  EXPECT_EQ(example[0].second, Feature::Bytes({"v"}));
  EXPECT_EQ(example[1].second, Feature::Floats({1, 2}));
  EXPECT_EQ(example[2].second, Feature::Ints({3}));
}

TEST(ExampleParseTest, TenByteVarintDropsBitsBeyond64) {
  // Ten bytes whose last one carries more than bit 63: protobuf keeps the low 64 bits.
  std::string payload = std::string(9, '\xff') + '\x7f';
  Example example = Parsed(Record(Entry("n", Len(3, Len(1, payload)))));
  EXPECT_EQ(example[0].second, Feature::Ints({-1}));
}

TEST(ExampleParseTest, LargeBytesValues) {
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7919 >> 3);
  Example example = {{"big", Feature::Bytes({big, "small", big})}};
  EXPECT_EQ(Parsed(EncodeExample(example)), example);
}

TEST(ExampleParseTest, EmptyInputIsAnEmptyExample) {
  EXPECT_TRUE(Parsed("").empty());
  EXPECT_TRUE(Parsed(EncodeExample({})).empty());
}

TEST(ExampleParseTest, OutputIsSortedByName) {
  Example example = {{"z", Feature::Ints({1})}, {"a", Feature::Ints({2})}, {"m", Feature::None()}};
  Example parsed = Parsed(EncodeExample(example));
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0].first, "a");
  EXPECT_EQ(parsed[1].first, "m");
  EXPECT_EQ(parsed[2].first, "z");
}

TEST(ExampleParseTest, FeatureEqualityComparesFloatBits) {
  EXPECT_EQ(Feature::Floats({std::nanf("")}), Feature::Floats({std::nanf("")}));
  EXPECT_NE(Feature::Floats({0.0f}), Feature::Floats({-0.0f}));
  EXPECT_NE(Feature::Ints({}), Feature::None());
  EXPECT_NE(Feature::Ints({}), Feature::Floats({}));
}

}  // namespace
}  // namespace croupier
