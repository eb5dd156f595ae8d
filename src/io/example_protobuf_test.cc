// Cross-checks the hand-written codec against libprotobuf, on a test-only copy of the schema
// (testdata_example*.proto) in packed and unpacked variants, over many random examples.
#include <bit>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "croupier/batch.h"
#include "croupier/example.h"
#include "gtest/gtest.h"
#include "src/io/proto_wire.h"
#include "testdata_example.pb.h"
#include "testdata_example_unpacked.pb.h"

namespace croupier {
namespace {

namespace packed_pb = ::croupier::testing;
namespace unpacked_pb = ::croupier::testing::unpacked;

// A random example with unique names (protobuf maps cannot hold duplicates).
Example RandomExample(std::mt19937_64& rng) {
  std::map<std::string, Feature> features;
  int n = static_cast<int>(rng() % 8);
  for (int i = 0; i < n; ++i) {
    std::string name = "f" + std::to_string(rng() % 20) + (rng() % 2 ? "/x" : "");
    int count = static_cast<int>(rng() % 5 == 0 ? rng() % 300 : rng() % 4);
    Feature f;
    switch (rng() % 4) {
      case 0:
        f = Feature::None();
        break;
      case 1:
        f = Feature::Bytes({});
        for (int j = 0; j < count; ++j) {
          std::string v(rng() % 200, '\0');
          for (char& c : v) c = static_cast<char>(rng());
          f.bytes.push_back(v);
        }
        break;
      case 2:
        f = Feature::Floats({});
        for (int j = 0; j < count; ++j) f.floats.push_back(std::bit_cast<float>(uint32_t(rng())));
        break;
      default:
        f = Feature::Ints({});
        for (int j = 0; j < count; ++j) {
          uint64_t bits = rng() >> (rng() % 64);  // all varint lengths, negatives included
          f.ints.push_back(static_cast<int64_t>(rng() % 2 ? bits : -bits));
        }
    }
    features[name] = std::move(f);
  }
  return Example(features.begin(), features.end());
}

template <typename PbExample>
PbExample ToProto(const Example& example) {
  PbExample pb;
  auto& map = *pb.mutable_features()->mutable_feature();
  for (const auto& [name, f] : example) {
    auto& feature = map[name];
    if (!f.kind_set) continue;
    switch (f.dtype) {
      case DType::kBytes:
        feature.mutable_bytes_list();
        for (const auto& v : f.bytes) feature.mutable_bytes_list()->add_value(v);
        break;
      case DType::kFloat32:
        feature.mutable_float_list();
        for (float v : f.floats) feature.mutable_float_list()->add_value(v);
        break;
      case DType::kInt64:
        feature.mutable_int64_list();
        for (int64_t v : f.ints) feature.mutable_int64_list()->add_value(v);
        break;
      default:  // a Feature holds bytes, float32 or int64 only
        break;
    }
  }
  return pb;
}

template <typename PbExample>
Example FromProto(const PbExample& pb) {
  std::map<std::string, Feature> sorted;
  for (const auto& [name, feature] : pb.features().feature()) {
    Feature& f = sorted[name];
    if (feature.has_bytes_list()) {
      f = Feature::Bytes(
          {feature.bytes_list().value().begin(), feature.bytes_list().value().end()});
    } else if (feature.has_float_list()) {
      f = Feature::Floats(
          {feature.float_list().value().begin(), feature.float_list().value().end()});
    } else if (feature.has_int64_list()) {
      f = Feature::Ints({feature.int64_list().value().begin(), feature.int64_list().value().end()});
    }
  }
  return Example(sorted.begin(), sorted.end());
}

template <typename PbExample>
void CheckOneWay(const Example& example, uint64_t seed) {
  // (a) libprotobuf writes, we read.
  std::string serialized;
  ASSERT_TRUE(ToProto<PbExample>(example).SerializeToString(&serialized));
  auto parsed = ParseExample(serialized);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, example) << "seed " << seed;
  // (b) we write, libprotobuf reads, whichever packing each side prefers.
  for (bool packed : {true, false}) {
    PbExample pb;
    ASSERT_TRUE(pb.ParseFromString(EncodeExample(example, packed))) << "seed " << seed;
    EXPECT_EQ(FromProto(pb), example) << "seed " << seed << " packed " << packed;
  }
}

TEST(ExampleProtobufCrossTest, RandomExamplesAgreeBothWays) {
  std::mt19937_64 rng(1234);
  for (uint64_t i = 0; i < 1500; ++i) {
    Example example = RandomExample(rng);
    CheckOneWay<packed_pb::Example>(example, i);
    CheckOneWay<unpacked_pb::Example>(example, i);
  }
}

// One Feature list field holding `f`'s values, written independently of EncodeExample.
template <typename Len>
std::string ListField(const Feature& f, bool packed, Len len) {
  std::string list, payload;
  switch (f.dtype) {
    case DType::kBytes:
      for (const std::string& v : f.bytes) list += len(1, v);
      return len(1, list);
    case DType::kFloat32:
      for (float v : f.floats) {
        if (!packed) wire::AppendTag(&list, 1, wire::kFixed32);
        wire::AppendFixed32(packed ? &payload : &list, std::bit_cast<uint32_t>(v));
      }
      if (packed && !payload.empty()) list = len(1, payload);
      return len(2, list);
    case DType::kInt64:
      for (int64_t v : f.ints) {
        if (!packed) wire::AppendTag(&list, 1, wire::kVarint);
        wire::AppendVarint(packed ? &payload : &list, static_cast<uint64_t>(v));
      }
      if (packed && !payload.empty()) list = len(1, payload);
      return len(3, list);
    default:  // a Feature holds bytes, float32 or int64 only
      break;
  }
  return "";
}

// Rewrites a record in the ways protobuf allows but EncodeExample never uses: lists split into
// several fields, packed and unpacked mixed, unknown fields, `features` split into two fields,
// and decoy entries whose key is repeated later (last wins).
std::string Scramble(const Example& example, std::mt19937_64& rng) {
  auto len = [](uint32_t field, const std::string& payload) {
    std::string out;
    wire::AppendTag(&out, field, wire::kLengthDelimited);
    wire::AppendVarint(&out, payload.size());
    return out + payload;
  };
  auto junk = [&] { return rng() % 3 ? std::string() : len(7 + rng() % 5, "junk"); };
  std::vector<std::string> entries;
  for (const auto& [name, f] : example) {
    if (rng() % 3 == 0) {  // a decoy, replaced by the real entry later
      entries.push_back(len(1, len(1, name) + len(2, len(3, len(1, "\x05")))));
    }
    std::string feature = junk();
    if (f.kind_set) {
      // Split the values into chunks, each its own list field, packed or not at random.
      size_t n = f.size(), start = 0;
      do {
        size_t end = std::min(n, start + rng() % 4);
        bool packed = rng() % 2;
        Feature chunk = f;
        chunk.bytes.assign(f.bytes.begin() + (f.dtype == DType::kBytes ? start : 0),
                           f.bytes.begin() + (f.dtype == DType::kBytes ? end : 0));
        chunk.floats.assign(f.floats.begin() + (f.dtype == DType::kFloat32 ? start : 0),
                            f.floats.begin() + (f.dtype == DType::kFloat32 ? end : 0));
        chunk.ints.assign(f.ints.begin() + (f.dtype == DType::kInt64 ? start : 0),
                          f.ints.begin() + (f.dtype == DType::kInt64 ? end : 0));
        feature += ListField(chunk, packed, len);
        feature += junk();
        start = end;
      } while (start < n);
    }
    entries.push_back(len(1, junk() + len(1, name) + junk() + len(2, feature)));
  }
  std::string out = junk();
  size_t split = entries.empty() ? 0 : rng() % entries.size();
  std::string first, second;
  for (size_t i = 0; i < entries.size(); ++i) (i < split ? first : second) += entries[i];
  return out + len(1, first) + junk() + len(1, second);
}

TEST(ExampleProtobufCrossTest, UnusualEncodingsParseAsProtobufParsesThem) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 1500; ++i) {
    Example example = RandomExample(rng);
    std::string record = Scramble(example, rng);
    packed_pb::Example pb;
    ASSERT_TRUE(pb.ParseFromString(record)) << i;
    auto parsed = ParseExample(record);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, FromProto(pb)) << i;
    EXPECT_EQ(*parsed, example) << i;
  }
}

TEST(ExampleProtobufCrossTest, BatchBuilderReadsProtobufOutput) {
  std::mt19937_64 rng(5);
  auto builder = *BatchBuilder::Create(
      *ParseFeatureSpecs("img:bytes,label:int64,emb:float32[4],tok:int64[*],w:float32[*]"));
  std::vector<Example> examples;
  for (int i = 0; i < 200; ++i) {
    std::vector<int64_t> tok(rng() % 5);
    for (auto& t : tok) t = static_cast<int64_t>(rng());
    std::vector<float> w(rng() % 3, -1.5f);
    Example e = {{"emb", Feature::Floats({1, 2, 3, static_cast<float>(i)})},
                 {"img", Feature::Bytes({std::string(rng() % 100, 'q')})},
                 {"label", Feature::Ints({-i})},
                 {"tok", Feature::Ints(tok)},
                 {"w", w.empty() && i % 2 ? Feature::None() : Feature::Floats(w)}};
    std::string serialized = i % 2 ? ToProto<packed_pb::Example>(e).SerializeAsString()
                                   : ToProto<unpacked_pb::Example>(e).SerializeAsString();
    ASSERT_TRUE(builder->AddRecord(serialized).ok()) << i;
    examples.push_back(e);
  }
  auto batch = builder->Finish();
  ASSERT_TRUE(batch.ok()) << batch.status();
  const BatchView& view = batch->view();
  const ColumnView* tok = view.Find("tok");
  const ColumnView* w = view.Find("w");
  for (size_t r = 0; r < examples.size(); ++r) {
    const Example& e = examples[r];
    EXPECT_EQ(view.Find("emb")->floats()[4 * r + 3], static_cast<float>(r));
    EXPECT_EQ(view.Find("img")->bytes(r), e[1].second.bytes[0]);
    EXPECT_EQ(view.Find("label")->ints()[r], -static_cast<int64_t>(r));
    std::vector<int64_t> got(tok->ints().begin() + tok->row_splits[r],
                             tok->ints().begin() + tok->row_splits[r + 1]);
    EXPECT_EQ(got, e[3].second.ints);
    EXPECT_EQ(w->row_splits[r + 1] - w->row_splits[r], e[4].second.size());
  }
}

}  // namespace
}  // namespace croupier
