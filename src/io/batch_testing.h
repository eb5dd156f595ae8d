// For tests and fuzz targets of the batch buffer: read every value a BatchView exposes.
#ifndef CROUPIER_SRC_IO_BATCH_TESTING_H_
#define CROUPIER_SRC_IO_BATCH_TESTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "croupier/batch.h"

namespace croupier {

// Reads every value of every column of `view`, through each accessor a consumer may use (ASan
// flags a read outside the buffer, UBSan a bool byte other than 0 or 1), and checks that its
// sizes add up. Returns a sum over all it read and every column's name, dims and shape (equal
// views give equal sums, and the reads cannot be optimized away), or INTERNAL naming the column
// and the size that does not add up: a view that Parse accepted must never give one.
inline absl::StatusOr<uint64_t> ReadEveryValue(const BatchView& view) {
  uint64_t sum = view.num_records();
  for (const ColumnView& c : view.columns()) {
    const std::vector<int64_t> shape = c.ValuesShape(view.num_records());
    auto broken = [&c](const char* what) {
      return absl::InternalError(absl::StrCat("column '", c.name, "': ", what, " do not add up"));
    };
    if (shape.empty()) return broken("the shape's dims");
    sum += c.name.size() + c.dims.size() + shape.size();
    for (float f : c.floats()) sum += f > 0;
    for (int64_t v : c.ints()) sum += static_cast<uint64_t>(v);
    for (uint8_t v : c.values_as<uint8_t>()) sum += v;
    for (uint16_t v : c.values_as<uint16_t>()) sum += v;
    for (uint32_t v : c.values_as<uint32_t>()) sum += v;
    for (uint64_t v : c.values_as<uint64_t>()) sum += v;
    if (c.dtype == DType::kBool) {
      for (bool v : c.values_as<bool>()) sum += v;
    }
    if (c.dtype != DType::kBytes && c.values.size() != c.num_values * c.element_size()) {
      return broken("the values' bytes");
    }
    for (uint64_t s : c.row_splits) sum += s;
    if (c.dtype == DType::kBytes) {
      for (uint64_t i = 0; i < c.num_values; ++i) sum += c.bytes(i).size();
    }
    for (char ch : c.values) sum += static_cast<uint8_t>(ch);
    if (c.variable_length && c.row_splits.size() != view.num_records() + 1) {
      return broken("the row splits");
    }
    if (c.dtype == DType::kBytes && c.offsets.size() != c.num_values + 1) {
      return broken("the offsets");
    }
  }
  return sum;
}

}  // namespace croupier

#endif  // CROUPIER_SRC_IO_BATCH_TESTING_H_
