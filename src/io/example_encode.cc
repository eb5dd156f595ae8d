// The Example encoder. Sizes are computed before writing because every nested message is
// prefixed by its length.
#include <bit>
#include <string>

#include "croupier/example.h"
#include "src/io/proto_wire.h"

namespace croupier {
namespace {

using wire::AppendTag;
using wire::AppendVarint;
using wire::VarintSize;

// Bytes of a length-delimited field (tag, length, payload) with a one-byte tag: every field we
// write has a number below 16.
size_t DelimitedSize(size_t payload) { return 1 + VarintSize(payload) + payload; }

// Size of the list message (BytesList, FloatList or Int64List) inside a Feature.
size_t ListSize(const Feature& f, bool packed) {
  size_t size = 0;
  switch (f.dtype) {
    case DType::kBytes:
      for (const std::string& v : f.bytes) size += DelimitedSize(v.size());
      return size;
    case DType::kFloat32:
      if (f.floats.empty()) return 0;
      return packed ? DelimitedSize(4 * f.floats.size()) : 5 * f.floats.size();
    case DType::kInt64:
      for (int64_t v : f.ints) size += VarintSize(static_cast<uint64_t>(v));
      if (f.ints.empty()) return 0;
      return packed ? DelimitedSize(size) : size + f.ints.size();
    default:  // a Feature holds bytes, float32 or int64 only
      break;
  }
  return 0;
}

// Size of the Feature message: its one list field, or nothing when no kind is set.
size_t FeatureSize(const Feature& f, bool packed) {
  return f.kind_set ? DelimitedSize(ListSize(f, packed)) : 0;
}

size_t EntrySize(const std::string& key, const Feature& f, bool packed) {
  return DelimitedSize(key.size()) + DelimitedSize(FeatureSize(f, packed));
}

void AppendList(const Feature& f, bool packed, std::string* out) {
  switch (f.dtype) {
    case DType::kBytes:
      for (const std::string& v : f.bytes) {
        AppendTag(out, 1, wire::kLengthDelimited);
        AppendVarint(out, v.size());
        out->append(v);
      }
      return;
    case DType::kFloat32:
      if (packed && !f.floats.empty()) {
        AppendTag(out, 1, wire::kLengthDelimited);
        AppendVarint(out, 4 * f.floats.size());
      }
      for (float v : f.floats) {
        if (!packed) AppendTag(out, 1, wire::kFixed32);
        wire::AppendFixed32(out, std::bit_cast<uint32_t>(v));
      }
      return;
    case DType::kInt64:
      if (packed && !f.ints.empty()) {
        size_t payload = 0;
        for (int64_t v : f.ints) payload += VarintSize(static_cast<uint64_t>(v));
        AppendTag(out, 1, wire::kLengthDelimited);
        AppendVarint(out, payload);
      }
      for (int64_t v : f.ints) {
        if (!packed) AppendTag(out, 1, wire::kVarint);
        AppendVarint(out, static_cast<uint64_t>(v));
      }
      return;
    default:  // a Feature holds bytes, float32 or int64 only
      return;
  }
}

}  // namespace

std::string EncodeExample(const Example& example, bool packed) {
  size_t features_size = 0;
  for (const auto& [key, feature] : example) {
    features_size += DelimitedSize(EntrySize(key, feature, packed));
  }
  std::string out;
  out.reserve(DelimitedSize(features_size));
  AppendTag(&out, 1, wire::kLengthDelimited);  // Example.features
  AppendVarint(&out, features_size);
  for (const auto& [key, feature] : example) {
    AppendTag(&out, 1, wire::kLengthDelimited);  // Features.feature, a map entry
    AppendVarint(&out, EntrySize(key, feature, packed));
    AppendTag(&out, 1, wire::kLengthDelimited);  // entry key
    AppendVarint(&out, key.size());
    out.append(key);
    AppendTag(&out, 2, wire::kLengthDelimited);  // entry value: the Feature
    AppendVarint(&out, FeatureSize(feature, packed));
    if (!feature.kind_set) continue;
    // The Feature's oneof field number is the list kind: bytes 1, float 2, int64 3.
    uint32_t kind_field = feature.dtype == DType::kBytes     ? 1
                          : feature.dtype == DType::kFloat32 ? 2
                                                             : 3;
    AppendTag(&out, kind_field, wire::kLengthDelimited);
    AppendVarint(&out, ListSize(feature, packed));
    AppendList(feature, packed, &out);
  }
  return out;
}

}  // namespace croupier
