// Batches: records decoded into per-feature columns, laid out in ONE contiguous byte buffer that
// goes over a socket as it is and is read in place (numpy arrays are zero-copy views of it).
//
// Batch buffer layout, version kBatchFormatVersion (docs/formats.md has the full text). Every
// integer is little-endian; every padding byte is zero, so equal content gives equal bytes.
//
//   offset 0, the header, kBatchHeaderBytes (32) bytes:
//     0  char[4] magic "CRBT"          4  u16 version (2; 1 is read) 6  u16 reserved, 0
//     8  u64 total_size (the whole buffer)                          16 u64 num_records
//     24 u32 num_columns               28 u32 meta_end (end of the metadata, see below)
//   offset 32, num_columns descriptors of kBatchColumnBytes (88) bytes each:
//     0  u8 dtype (DType, croupier/dtype.h: 0 bytes, 1 float32, 2 int64, 3 bool, 4 int8,
//        5 int16, 6 int32, 7 uint8, 8 uint16, 9 uint32, 10 uint64, 11 float16, 12 bfloat16,
//        13 float64; a version 1 buffer holds codes 0 to 2 only)
//     1  u8 flags (bit 0: variable length; other bits 0)            2  u16 reserved, 0
//     4  u32 rank: dims in the per-record shape (0 for scalars and variable-length columns)
//     8  u64 name_offset    16 u64 name_size    24 u64 dims_offset (int64[rank], 8-aligned)
//     32 u64 num_values: numbers (every dtype but bytes), or byte strings (bytes)
//     40 u64 values_offset  48 u64 values_size
//     56 u64 offsets_offset 64 u64 offsets_size (bytes columns; else both 0)
//     72 u64 splits_offset  80 u64 splits_size  (variable-length columns; else both 0)
//   then the metadata, up to meta_end: for each column, its name (UTF-8 as given, no NUL), zero
//   padding to a multiple of 8, its dims as int64;
//   then the arrays, column by column (values, offsets, splits), each starting at a multiple of
//   kBatchAlignment (64) bytes after zero padding; total_size is the end of the last array.
//     values:  numbers of DTypeSize(dtype) bytes each (bool: 0 or 1; bfloat16: the upper 16 bits
//              of a float32), stacked as [num_records, *dims] (fixed) or flat (variable);
//              for bytes, the byte strings concatenated.
//     offsets: u64[num_values + 1]: string i is values[offsets[i], offsets[i+1]).
//     splits:  u64[num_records + 1] row splits: record r holds values [splits[r], splits[r+1]).
#ifndef CROUPIER_INCLUDE_CROUPIER_BATCH_H_
#define CROUPIER_INCLUDE_CROUPIER_BATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "croupier/dtype.h"
#include "croupier/example.h"

namespace croupier {

inline constexpr char kBatchMagic[4] = {'C', 'R', 'B', 'T'};
// The version this build writes. Version 2 added the dtype codes above 2 and changed nothing
// else, so a reader takes versions 1 and 2.
inline constexpr uint16_t kBatchFormatVersion = 2;
inline constexpr uint16_t kOldestBatchFormatVersion = 1;
inline constexpr size_t kBatchHeaderBytes = 32;
inline constexpr size_t kBatchColumnBytes = 88;
inline constexpr size_t kBatchAlignment = 64;

// A portable 64-bit hash of bytes (the same on every platform; algorithm in docs/formats.md).
// Not cryptographic: for telling batches apart in tests and checks.
uint64_t ContentHash(absl::string_view bytes);

// One column of a validated batch; every pointer points into the batch buffer. Thread-safe:
// plain immutable data.
struct ColumnView {
  absl::string_view name;
  DType dtype = DType::kBytes;
  bool variable_length = false;
  std::vector<int64_t> dims;           // per-record shape of a fixed-shape column; {} for a scalar
  uint64_t num_values = 0;             // numbers, or byte strings
  absl::string_view values;            // the raw values array
  absl::Span<const uint64_t> offsets;  // bytes columns: num_values + 1 entries
  absl::Span<const uint64_t> row_splits;  // variable-length columns: num_records + 1 entries

  // The values as numbers; empty unless dtype matches.
  absl::Span<const float> floats() const;
  absl::Span<const int64_t> ints() const;
  // Bytes of one value (DTypeSize): 1, 2, 4 or 8; 0 for a bytes column.
  size_t element_size() const { return DTypeSize(dtype); }
  // The values of a numeric column read as T, any type of element_size() bytes: e.g. values_as<
  // uint8_t>() of a bool column (0 or 1, as Parse checks), values_as<uint16_t>() for the bit
  // patterns of float16 and bfloat16, values_as<double>() of float64. Empty for a bytes column or
  // a T of another size. The array is aligned for any T (kBatchAlignment).
  template <typename T>
  absl::Span<const T> values_as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (dtype == DType::kBytes || sizeof(T) != element_size()) return {};
    return absl::Span<const T>(reinterpret_cast<const T*>(values.data()), num_values);
  }
  // Byte string i of a bytes column; requires i < num_values.
  absl::string_view bytes(uint64_t i) const {
    return values.substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
  // The shape of the values array: {num_records, dims...} if fixed, {num_values} if variable.
  std::vector<int64_t> ValuesShape(uint64_t num_records) const;
};

// A parsed, validated batch buffer that it does not own: the buffer must outlive the view.
// Thread-safe: immutable after Parse.
class BatchView {
 public:
  // Parses bytes received from anywhere without trusting them: every size and offset is checked
  // against the buffer, offsets and row splits are checked to be non-decreasing and in range, so
  // that the view never reads out of bounds; dtypes are checked to be known (to the buffer's
  // version) and bool values to be 0 or 1. Versions kOldestBatchFormatVersion to
  // kBatchFormatVersion are read. DATA_LOSS naming the inconsistency otherwise;
  // INVALID_ARGUMENT if the buffer address is not 8-byte aligned (the typed spans need it).
  static absl::StatusOr<BatchView> Parse(absl::string_view buffer);

  uint64_t num_records() const { return num_records_; }
  const std::vector<ColumnView>& columns() const { return columns_; }
  // The column named `name`, or nullptr.
  const ColumnView* Find(absl::string_view name) const;
  absl::string_view bytes() const { return bytes_; }
  uint64_t ContentHash() const { return croupier::ContentHash(bytes_); }

 private:
  absl::string_view bytes_;
  uint64_t num_records_ = 0;
  std::vector<ColumnView> columns_;
};

// The arrays of one column, handed to Batch::FromColumns; layout as described at the top.
// `values` with a null data() and a size are deferred: FromColumns leaves that many bytes for the
// caller's `fill` to write (see FromColumns).
struct ColumnData {
  absl::string_view name;
  DType dtype = DType::kBytes;
  bool variable_length = false;
  absl::Span<const int64_t> dims;
  uint64_t num_values = 0;
  absl::string_view values;               // raw little-endian numbers, or concatenated strings
  absl::Span<const uint64_t> offsets;     // bytes: num_values + 1 entries; else empty
  absl::Span<const uint64_t> row_splits;  // variable length: num_records + 1 entries; else empty
};

// Gives an uninitialized kBatchAlignment-aligned buffer of at least `size` bytes to lay a batch
// out in, or nullptr when it cannot (e.g. Batch::AllocateBuffer, or a pool's Get).
using BatchAllocator = absl::FunctionRef<std::shared_ptr<uint8_t>(size_t size)>;
// Writes the deferred values of column `column` (ColumnData) into `values`, where the batch
// buffer has them: e.g. records stacked straight into the batch, without an array in between.
using BatchValuesFiller = absl::FunctionRef<absl::Status(size_t column, absl::Span<uint8_t> values)>;

// An immutable batch buffer, 64-byte aligned, with its parsed view. Copies share the buffer.
// Thread-safe: nothing changes after creation.
class Batch {
 public:
  // Lays out `columns` (copied) in a new buffer from `allocate`. INVALID_ARGUMENT if the arrays
  // are inconsistent (sizes, offsets, splits, names, dims); RESOURCE_EXHAUSTED if the buffer
  // cannot be allocated.
  static absl::StatusOr<Batch> FromColumns(uint64_t num_records,
                                           absl::Span<const ColumnData> columns,
                                           BatchAllocator allocate = &Batch::AllocateBuffer);
  // The same, where columns may have deferred values (ColumnData): `fill` is called for each of
  // them, in column order, once the rest is laid out, and the batch is validated after. An error
  // from `fill` is returned as it is.
  static absl::StatusOr<Batch> FromColumns(uint64_t num_records,
                                           absl::Span<const ColumnData> columns,
                                           BatchAllocator allocate, BatchValuesFiller fill);
  // Copies `bytes` into a new aligned buffer and validates it as BatchView::Parse does.
  static absl::StatusOr<Batch> FromBytes(absl::string_view bytes);
  // Adopts `size` bytes at `data` (e.g. from AllocateBuffer, filled from a socket) after
  // validating them as BatchView::Parse does.
  static absl::StatusOr<Batch> FromBuffer(std::shared_ptr<const uint8_t> data, size_t size);
  // An uninitialized kBatchAlignment-aligned buffer of `size` bytes to receive a batch into;
  // nullptr when it cannot be allocated.
  static std::shared_ptr<uint8_t> AllocateBuffer(size_t size);

  const BatchView& view() const { return view_; }
  uint64_t num_records() const { return view_.num_records(); }
  absl::string_view bytes() const { return view_.bytes(); }
  // Holding this keeps the bytes alive, e.g. as the base object of numpy arrays.
  const std::shared_ptr<const uint8_t>& buffer() const { return buffer_; }
  uint64_t ContentHash() const { return view_.ContentHash(); }

 private:
  Batch(std::shared_ptr<const uint8_t> buffer, BatchView view)
      : buffer_(std::move(buffer)), view_(std::move(view)) {}

  std::shared_ptr<const uint8_t> buffer_;
  BatchView view_;
};

// Decodes serialized tf.train.Examples straight into per-feature columns and lays them out as a
// Batch. Features of a record that no spec names are skipped without being decoded.
// Thread-compatible.
class BatchBuilder {
 public:
  // INVALID_ARGUMENT if the specs are not valid (ValidateFeatureSpecs) or name a dtype that a
  // tf.train.Example cannot hold (CheckExampleFeatureSpecs).
  static absl::StatusOr<std::unique_ptr<BatchBuilder>> Create(std::vector<FeatureSpec> specs);
  ~BatchBuilder();
  BatchBuilder(const BatchBuilder&) = delete;
  BatchBuilder& operator=(const BatchBuilder&) = delete;

  // Decodes one record and appends its values. On error nothing is appended (the builder is as
  // before the call) and the message names the feature, so that the caller can prefix the
  // record's location:
  //   INVALID_ARGUMENT "feature 'label': missing",
  //                    "feature 'label': expected int64, found float_list",
  //                    "feature 'emb': expected 128 values, found 127";
  //   DATA_LOSS "[feature 'emb': ]malformed tf.train.Example: <what> at byte <offset>".
  absl::Status AddRecord(absl::string_view serialized);

  // Lays out the records added since the last Finish as a Batch in a buffer from `allocate`, and
  // empties the builder for the next batch, keeping its allocated capacity. RESOURCE_EXHAUSTED
  // if the buffer cannot be allocated (the records then stay in the builder).
  absl::StatusOr<Batch> Finish(BatchAllocator allocate = &Batch::AllocateBuffer);

  uint64_t num_records() const { return num_records_; }
  // Bytes of values held so far: about the size of the batch Finish would make.
  uint64_t buffered_bytes() const;
  const std::vector<FeatureSpec>& specs() const { return specs_; }

 private:
  class Column;  // one feature's growing arrays, in batch_builder.cc
  explicit BatchBuilder(std::vector<FeatureSpec> specs);

  const std::vector<FeatureSpec> specs_;
  absl::flat_hash_map<std::string, size_t> index_;  // spec name -> column
  std::vector<Column> columns_;
  uint64_t num_records_ = 0;
};

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_BATCH_H_
