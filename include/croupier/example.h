// tf.train.Example records: the feature specs a job declares, and a generic codec.
//
// The generic ParseExample/EncodeExample pair serves tools (`croupier inspect`), checks of a job's
// specs against its data, and tests. The hot path that turns records into batches is BatchBuilder
// (croupier/batch.h), which decodes straight into columns without building Example objects.
//
// The wire subset (tensorflow/core/example/{example,feature}.proto) and the spec syntax are
// described in docs/formats.md.
#ifndef CROUPIER_INCLUDE_CROUPIER_EXAMPLE_H_
#define CROUPIER_INCLUDE_CROUPIER_EXAMPLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "croupier/dtype.h"

namespace croupier {

// The largest rank of a fixed shape, and the most values one record may hold for one fixed-shape
// feature. Both keep size arithmetic far from overflow.
inline constexpr int kMaxFeatureRank = 32;
inline constexpr int64_t kMaxValuesPerRecord = int64_t{1} << 32;

// What a job expects of one feature in every record.
//   - Fixed shape (variable_length false): every record holds exactly product(shape) values;
//     shape {} is a scalar, exactly one value. Every dim is >= 1.
//   - Variable length: any number of values per record (including none); shape must be empty.
// For kBytes, a "value" is one byte string. A spec may name any DType: a Python source's job
// (croupier.serve) declares its columns with these specs too. Only bytes, float32 and int64 can
// come from a tf.train.Example (CheckExampleFeatureSpecs).
struct FeatureSpec {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  bool variable_length = false;

  // Values per record of a fixed-shape feature: the product of shape (1 for a scalar).
  int64_t NumElements() const;
  bool operator==(const FeatureSpec&) const = default;
};

// Checks a list of specs: at least one; names non-empty, unique, free of the characters ",:[]"
// and not starting or ending with whitespace; dtypes that are DTypes; shapes as described above.
// INVALID_ARGUMENT naming the offending feature otherwise.
absl::Status ValidateFeatureSpecs(absl::Span<const FeatureSpec> specs);

// Checks that a tf.train.Example can hold every spec's dtype (IsExampleDType: bytes, float32,
// int64), as reading TFRecord files needs. INVALID_ARGUMENT naming the first feature of another
// dtype, e.g. "feature 'img' is uint8; a tf.train.Example holds bytes, float32 and int64 only".
absl::Status CheckExampleFeatureSpecs(absl::Span<const FeatureSpec> specs);

// Parses the command-line syntax: comma-separated items `name:dtype`, `name:dtype[d1,d2,...]` or
// `name:dtype[*]` (variable length), where dtype is any DTypeName, e.g.
//   image:bytes,label:int64,emb:float32[128],pix:uint8[4,4,3],mask:bool[*],x:bfloat16[8]
// Spaces around items, names, dtypes and dims are ignored. INVALID_ARGUMENT names the bad item
// and says what is wrong with it.
absl::StatusOr<std::vector<FeatureSpec>> ParseFeatureSpecs(absl::string_view text);
// The canonical text of `specs`; ParseFeatureSpecs(FormatFeatureSpecs(s)) == s for valid specs.
std::string FormatFeatureSpecs(absl::Span<const FeatureSpec> specs);

// One decoded tf.train.Feature. Only the list named by `dtype` (bytes, float32 or int64) is used,
// and only when kind_set.
struct Feature {
  // False when the Feature had none of bytes_list, float_list, int64_list: an empty list that
  // matches any dtype.
  bool kind_set = false;
  DType dtype = DType::kBytes;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;

  static Feature None() { return Feature(); }
  static Feature Bytes(std::vector<std::string> values);
  static Feature Floats(std::vector<float> values);
  static Feature Ints(std::vector<int64_t> values);

  // Number of values in the list of the kind that is set; 0 when no kind is set.
  size_t size() const;
  // Floats compare by bit pattern, so NaN payloads and -0.0 count as values like any other.
  bool operator==(const Feature& other) const;
};

// A whole tf.train.Example: (name, feature) pairs.
using Example = std::vector<std::pair<std::string, Feature>>;

// Decodes a serialized tf.train.Example with protobuf's semantics: unknown fields are skipped,
// numeric lists may be packed, unpacked or both, a repeated map key keeps its last value, and a
// Feature's oneof keeps the last kind seen. The result is sorted by name, one entry per name.
// Feature names are not checked for UTF-8. DATA_LOSS on malformed bytes, naming the problem and
// its byte offset in `serialized`.
absl::StatusOr<Example> ParseExample(absl::string_view serialized);

// Serializes `example` in its order (names are not sorted or deduplicated). Numeric lists are
// packed when `packed`, otherwise written one value per field. The result parses with protobuf.
std::string EncodeExample(const Example& example, bool packed = true);

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_EXAMPLE_H_
