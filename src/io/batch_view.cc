// Parses a batch buffer (layout in croupier/batch.h) without trusting it.
//
// Every check below is written so that it cannot overflow: sizes are compared by division or
// against what is left of the buffer, never by multiplying untrusted numbers.
#include <bit>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "croupier/batch.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

static_assert(std::endian::native == std::endian::little, "the layout is little-endian");

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Every error is DATA_LOSS "corrupt batch: [column i ('name'): ]<what>". Column checks give
// Bad(what); ParseColumn adds which column.
absl::Status Bad(absl::string_view what) { return absl::DataLossError(what); }
absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt batch: ", what));
}

// The raw fields of one column descriptor.
struct Descriptor {
  uint8_t dtype, flags;
  uint16_t reserved;
  uint32_t rank;
  uint64_t name_offset, name_size, dims_offset, num_values;
  uint64_t values_offset, values_size, offsets_offset, offsets_size, splits_offset, splits_size;
};

Descriptor LoadDescriptor(const char* p) {
  return Descriptor{Load<uint8_t>(p),       Load<uint8_t>(p + 1),   Load<uint16_t>(p + 2),
                    Load<uint32_t>(p + 4),  Load<uint64_t>(p + 8),  Load<uint64_t>(p + 16),
                    Load<uint64_t>(p + 24), Load<uint64_t>(p + 32), Load<uint64_t>(p + 40),
                    Load<uint64_t>(p + 48), Load<uint64_t>(p + 56), Load<uint64_t>(p + 64),
                    Load<uint64_t>(p + 72), Load<uint64_t>(p + 80)};
}

// [offset, offset + size) lies within [lo, hi).
bool Within(uint64_t offset, uint64_t size, uint64_t lo, uint64_t hi) {
  return offset >= lo && offset <= hi && size <= hi - offset;
}

// Checks an array's place: inside the data region and aligned, or absent (0, 0) when !present.
absl::Status CheckArray(absl::string_view name, uint64_t offset, uint64_t size, bool present,
                        uint64_t data_begin, uint64_t total) {
  if (!present) {
    if (offset != 0 || size != 0) return Bad(absl::StrCat("unexpected ", name, " array"));
    return absl::OkStatus();
  }
  if (offset % kBatchAlignment != 0 || !Within(offset, size, data_begin, total)) {
    return Bad(absl::StrCat(name, " array at ", offset, " of ", size,
                            " bytes is misaligned or out of bounds"));
  }
  return absl::OkStatus();
}

// A u64 array of n + 1 entries, starting at 0, non-decreasing, ending at `last`.
absl::StatusOr<absl::Span<const uint64_t>> CheckSplits(absl::string_view name,
                                                       absl::string_view bytes, uint64_t n,
                                                       uint64_t last) {
  if (bytes.size() % 8 != 0 || bytes.size() / 8 == 0 || bytes.size() / 8 - 1 != n) {
    return Bad(
        absl::StrCat(name, " array of ", bytes.size(), " bytes does not hold ", n, " + 1 entries"));
  }
  absl::Span<const uint64_t> s(reinterpret_cast<const uint64_t*>(bytes.data()), n + 1);
  if (s[0] != 0 || s[n] != last) {
    return Bad(absl::StrCat(name, " run from ", s[0], " to ", s[n], ", expected 0 to ", last));
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (s[i] > s[i + 1]) return Bad(absl::StrCat(name, " decrease at entry ", i + 1));
  }
  return s;
}

// Column `index` described by `d`; errors name the column by index, and by name once known.
absl::StatusOr<ColumnView> ParseColumn(absl::string_view buf, uint16_t version, uint64_t index,
                                       const Descriptor& d, uint64_t num_records,
                                       uint64_t meta_begin, uint64_t meta_end) {
  ColumnView c;
  const uint64_t total = buf.size();
  std::string where = absl::StrCat("column ", index);
  auto fail = [&](absl::Status s) { return Corrupt(absl::StrCat(where, ": ", s.message())); };
  if ((d.flags & ~1u) != 0 || d.reserved != 0) return fail(Bad("unknown flags"));
  c.variable_length = (d.flags & 1) != 0;
  if (!Within(d.name_offset, d.name_size, meta_begin, meta_end)) {
    return fail(Bad("name out of bounds"));
  }
  c.name = buf.substr(d.name_offset, d.name_size);
  absl::StrAppend(&where, " ('", c.name, "')");
  if (!IsDTypeCode(d.dtype)) return fail(Bad(absl::StrCat("unknown dtype ", d.dtype)));
  c.dtype = static_cast<DType>(d.dtype);
  if (version < 2 && !IsExampleDType(c.dtype)) {
    return fail(
        Bad(absl::StrCat("dtype ", d.dtype, " (", DTypeName(c.dtype), ") in a format version ",
                         version, " buffer, which has dtypes 0 to 2 only")));
  }
  if (d.rank > kMaxFeatureRank || (c.variable_length && d.rank != 0) || d.dims_offset % 8 != 0 ||
      !Within(d.dims_offset, 8 * uint64_t{d.rank}, meta_begin, meta_end)) {
    return fail(Bad("bad rank or dims"));
  }
  uint64_t per_record = 1;
  for (uint32_t i = 0; i < d.rank; ++i) {
    int64_t dim = Load<int64_t>(buf.data() + d.dims_offset + 8 * i);
    if (dim < 1 || dim > kMaxValuesPerRecord / static_cast<int64_t>(per_record)) {
      return fail(Bad(absl::StrCat("bad dim ", dim)));
    }
    per_record *= dim;
    c.dims.push_back(dim);
  }
  c.num_values = d.num_values;
  const bool is_bytes = c.dtype == DType::kBytes;
  absl::Status placed = CheckArray("values", d.values_offset, d.values_size, true, meta_end, total);
  if (placed.ok()) {
    placed = CheckArray("offsets", d.offsets_offset, d.offsets_size, is_bytes, meta_end, total);
  }
  if (placed.ok()) {
    placed =
        CheckArray("splits", d.splits_offset, d.splits_size, c.variable_length, meta_end, total);
  }
  if (!placed.ok()) return fail(placed);
  c.values = buf.substr(d.values_offset, d.values_size);
  if (!c.variable_length) {
    uint64_t expected;
    if (__builtin_mul_overflow(num_records, per_record, &expected) || expected != d.num_values) {
      return fail(
          Bad(absl::StrCat(d.num_values, " values for ", num_records, " records of ", per_record)));
    }
  }
  if (!is_bytes) {
    const uint64_t width = DTypeSize(c.dtype);
    if (d.values_size % width != 0 || d.values_size / width != d.num_values) {
      return fail(Bad(
          absl::StrCat("values array of ", d.values_size, " bytes for ", d.num_values, " values")));
    }
    // A bool is one byte, 0 or 1: any other byte is no value of numpy's, TensorFlow's or C++'s
    // bool (reading it as a C++ bool is undefined).
    if (c.dtype == DType::kBool) {
      for (uint64_t i = 0; i < d.num_values; ++i) {
        if (static_cast<uint8_t>(c.values[i]) > 1) {
          return fail(Bad(absl::StrCat("bool value ", i, " is ",
                                       static_cast<int>(static_cast<uint8_t>(c.values[i])),
                                       ", not 0 or 1")));
        }
      }
    }
  } else {
    auto offsets = CheckSplits("offsets", buf.substr(d.offsets_offset, d.offsets_size),
                               d.num_values, d.values_size);
    if (!offsets.ok()) return fail(offsets.status());
    c.offsets = *offsets;
  }
  if (c.variable_length) {
    auto splits = CheckSplits("row splits", buf.substr(d.splits_offset, d.splits_size), num_records,
                              d.num_values);
    if (!splits.ok()) return fail(splits.status());
    c.row_splits = *splits;
  }
  return c;
}

}  // namespace

absl::StatusOr<BatchView> BatchView::Parse(absl::string_view buffer) {
  if (reinterpret_cast<uintptr_t>(buffer.data()) % 8 != 0) {
    return absl::InvalidArgumentError("a batch buffer must be 8-byte aligned in memory");
  }
  const char* p = buffer.data();
  if (buffer.size() < kBatchHeaderBytes) {
    return Corrupt(absl::StrCat("only ", buffer.size(), " bytes, less than a header"));
  }
  if (std::memcmp(p, kBatchMagic, sizeof(kBatchMagic)) != 0) return Corrupt("bad magic");
  const uint16_t version = Load<uint16_t>(p + 4);
  if (version < kOldestBatchFormatVersion || version > kBatchFormatVersion) {
    return Corrupt(absl::StrCat("format version ", version, ", this reader knows ",
                                kOldestBatchFormatVersion, " to ", kBatchFormatVersion));
  }
  if (Load<uint16_t>(p + 6) != 0) return Corrupt("reserved header field is not zero");
  if (uint64_t total = Load<uint64_t>(p + 8); total != buffer.size()) {
    return Corrupt(absl::StrCat("header says ", total, " bytes, buffer has ", buffer.size()));
  }
  BatchView view;
  view.bytes_ = buffer;
  view.num_records_ = Load<uint64_t>(p + 16);
  const uint64_t num_columns = Load<uint32_t>(p + 24);
  const uint64_t meta_end = Load<uint32_t>(p + 28);
  if (num_columns > (buffer.size() - kBatchHeaderBytes) / kBatchColumnBytes) {
    return Corrupt(absl::StrCat(num_columns, " column descriptors do not fit"));
  }
  const uint64_t meta_begin = kBatchHeaderBytes + num_columns * kBatchColumnBytes;
  if (meta_end < meta_begin || meta_end > buffer.size()) {
    return Corrupt(absl::StrCat("metadata end ", meta_end, " out of bounds"));
  }
  absl::flat_hash_set<absl::string_view> names;
  view.columns_.reserve(num_columns);
  for (uint64_t i = 0; i < num_columns; ++i) {
    Descriptor d = LoadDescriptor(p + kBatchHeaderBytes + i * kBatchColumnBytes);
    ASSIGN_OR_RETURN(ColumnView column,
                     ParseColumn(buffer, version, i, d, view.num_records_, meta_begin, meta_end));
    if (!names.insert(column.name).second) {
      return Corrupt(absl::StrCat("duplicate column name '", column.name, "'"));
    }
    view.columns_.push_back(std::move(column));
  }
  return view;
}

const ColumnView* BatchView::Find(absl::string_view name) const {
  for (const ColumnView& c : columns_) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

absl::Span<const float> ColumnView::floats() const {
  if (dtype != DType::kFloat32) return {};
  return absl::Span<const float>(reinterpret_cast<const float*>(values.data()), num_values);
}

absl::Span<const int64_t> ColumnView::ints() const {
  if (dtype != DType::kInt64) return {};
  return absl::Span<const int64_t>(reinterpret_cast<const int64_t*>(values.data()), num_values);
}

std::vector<int64_t> ColumnView::ValuesShape(uint64_t num_records) const {
  if (variable_length) return {static_cast<int64_t>(num_values)};
  std::vector<int64_t> shape = {static_cast<int64_t>(num_records)};
  shape.insert(shape.end(), dims.begin(), dims.end());
  return shape;
}

}  // namespace croupier
