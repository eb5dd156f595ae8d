// The generic Example decoder (ParseExample) and the Feature value type.
#include <bit>
#include <map>
#include <string>
#include <utility>

#include "croupier/example.h"
#include "src/io/proto_wire.h"

namespace croupier {
namespace {

DType ToDType(wire::ListKind kind) {
  switch (kind) {
    case wire::ListKind::kFloat:
      return DType::kFloat32;
    case wire::ListKind::kInt64:
      return DType::kInt64;
    default:
      return DType::kBytes;
  }
}

// Decodes one map entry's Feature, validating every list on the way (also those a later kind
// replaces), as protobuf would.
bool DecodeFeature(const wire::Reader& entry, Feature& feature) {
  wire::ListKind current = wire::ListKind::kNone;
  return wire::ForEachListField(entry, [&](wire::ListKind kind, wire::Reader list) {
    if (kind != current) {  // the oneof switches: what the previous kind held is gone
      feature = Feature();
      feature.kind_set = true;
      feature.dtype = ToDType(kind);
      current = kind;
    }
    switch (kind) {
      case wire::ListKind::kBytes:
        return wire::DecodeBytesList(
            list, [&](absl::string_view value) { feature.bytes.emplace_back(value); });
      case wire::ListKind::kFloat:
        return wire::DecodeFloatList(list, feature.floats);
      default:
        return wire::DecodeInt64List(list, feature.ints);
    }
  });
}

}  // namespace

Feature Feature::Bytes(std::vector<std::string> values) {
  Feature f;
  f.kind_set = true;
  f.dtype = DType::kBytes;
  f.bytes = std::move(values);
  return f;
}

Feature Feature::Floats(std::vector<float> values) {
  Feature f;
  f.kind_set = true;
  f.dtype = DType::kFloat32;
  f.floats = std::move(values);
  return f;
}

Feature Feature::Ints(std::vector<int64_t> values) {
  Feature f;
  f.kind_set = true;
  f.dtype = DType::kInt64;
  f.ints = std::move(values);
  return f;
}

size_t Feature::size() const {
  if (!kind_set) return 0;
  switch (dtype) {
    case DType::kBytes:
      return bytes.size();
    case DType::kFloat32:
      return floats.size();
    case DType::kInt64:
      return ints.size();
    default:  // a Feature holds bytes, float32 or int64 only
      break;
  }
  return 0;
}

bool Feature::operator==(const Feature& other) const {
  if (kind_set != other.kind_set || dtype != other.dtype || bytes != other.bytes ||
      ints != other.ints || floats.size() != other.floats.size()) {
    return false;
  }
  for (size_t i = 0; i < floats.size(); ++i) {
    if (std::bit_cast<uint32_t>(floats[i]) != std::bit_cast<uint32_t>(other.floats[i])) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<Example> ParseExample(absl::string_view serialized) {
  wire::WireError error;
  std::map<std::string, Feature, std::less<>> features;
  std::string failed_feature;
  bool failed_in_feature = false;
  bool ok = wire::ForEachFeatureEntry(wire::Reader(serialized, &error),
                                      [&](absl::string_view key, const wire::Reader& entry) {
                                        Feature feature;
                                        if (!DecodeFeature(entry, feature)) {
                                          failed_feature = std::string(key);
                                          failed_in_feature = true;
                                          return false;
                                        }
                                        // A map key seen again replaces the earlier value whole
                                        // (protobuf map semantics).
                                        auto it = features.find(key);
                                        if (it == features.end()) {
                                          features.emplace(std::string(key), std::move(feature));
                                        } else {
                                          it->second = std::move(feature);
                                        }
                                        return true;
                                      });
  if (!ok) {
    return failed_in_feature ? wire::MalformedError(error, failed_feature)
                             : wire::MalformedError(error);
  }
  Example example;
  example.reserve(features.size());
  for (auto& [name, feature] : features) example.emplace_back(name, std::move(feature));
  return example;
}

}  // namespace croupier
