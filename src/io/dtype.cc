// Dtype names and element sizes (croupier/dtype.h).
#include "croupier/dtype.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace croupier {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  size_t size;
};

// Indexed by code.
constexpr std::array<DTypeInfo, kLastDTypeCode + 1> kDTypes = {{
    {DType::kBytes, "bytes", 0},
    {DType::kFloat32, "float32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kBool, "bool", 1},
    {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kUInt8, "uint8", 1},
    {DType::kUInt16, "uint16", 2},
    {DType::kUInt32, "uint32", 4},
    {DType::kUInt64, "uint64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat64, "float64", 8},
}};

constexpr bool CodesMatchTheirIndex() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(CodesMatchTheirIndex(), "kDTypes is indexed by dtype code");

}  // namespace

absl::string_view DTypeName(DType dtype) {
  const size_t code = static_cast<size_t>(dtype);
  return code < kDTypes.size() ? kDTypes[code].name : "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "float") return DType::kFloat32;
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name, "' (expected one of ",
      absl::StrJoin(
          kDTypes, ", ",
          [](std::string* out, const DTypeInfo& info) { absl::StrAppend(out, info.name); }),
      ")"));
}

size_t DTypeSize(DType dtype) {
  const size_t code = static_cast<size_t>(dtype);
  return code < kDTypes.size() ? kDTypes[code].size : 0;
}

}  // namespace croupier
