// The element types of a batch's columns and of a job's features.
//
// The numeric values are the dtype codes of the batch layout (croupier/batch.h, docs/formats.md):
// they travel in every batch buffer, so a value is never renumbered or reused. Codes 0 to 2 are
// those of batch format version 1; version 2 added the others.
#ifndef CROUPIER_INCLUDE_CROUPIER_DTYPE_H_
#define CROUPIER_INCLUDE_CROUPIER_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

enum class DType : uint8_t {
  kBytes = 0,  // byte strings of any length
  kFloat32 = 1,
  kInt64 = 2,
  kBool = 3,  // one byte, 0 or 1
  kInt8 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kUInt8 = 7,
  kUInt16 = 8,
  kUInt32 = 9,
  kUInt64 = 10,
  kFloat16 = 11,   // IEEE-754 binary16
  kBFloat16 = 12,  // the upper 16 bits of a float32
  kFloat64 = 13,
};

// The largest dtype code: every code from 0 to kLastDTypeCode is a DType.
inline constexpr uint8_t kLastDTypeCode = static_cast<uint8_t>(DType::kFloat64);

// Whether `code` is the value of a DType.
inline constexpr bool IsDTypeCode(uint32_t code) { return code <= kLastDTypeCode; }

// "bytes", "float32", "int64", "bool", "int8", "int16", "int32", "uint8", "uint16", "uint32",
// "uint64", "float16", "bfloat16", "float64"; "unknown" for a value that is not a DType.
absl::string_view DTypeName(DType dtype);

// The inverse of DTypeName; also accepts "float" for float32. INVALID_ARGUMENT naming the text
// and the known names otherwise.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// The bytes of one value: 1 (bool, int8, uint8), 2 (int16, uint16, float16, bfloat16), 4 (int32,
// uint32, float32) or 8 (int64, uint64, float64). 0 for kBytes, whose values are byte strings of
// any length, and for a value that is not a DType.
size_t DTypeSize(DType dtype);

// Whether a tf.train.Example can hold values of `dtype`: bytes, float32 and int64 only (its
// bytes_list, float_list and int64_list). TFRecord jobs read only these.
inline constexpr bool IsExampleDType(DType dtype) {
  return dtype == DType::kBytes || dtype == DType::kFloat32 || dtype == DType::kInt64;
}

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_DTYPE_H_
