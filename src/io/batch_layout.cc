// Writes the batch buffer (layout in croupier/batch.h) and owns it: Batch.
//
// FromColumns computes every offset from the sizes the arrays really have, so writing can never
// overrun the buffer, and then validates the result with BatchView::Parse: one piece of code
// decides what a consistent batch is, for the writer and for the reader alike.
#include <bit>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "croupier/batch.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

static_assert(std::endian::native == std::endian::little, "the layout is little-endian");

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Where one column's pieces go.
struct Placement {
  uint64_t name_offset = 0, dims_offset = 0;
  uint64_t values_offset = 0, offsets_offset = 0, splits_offset = 0;
};

// Writes the buffer front to back, zeroing every gap, so that padding is always zero.
class Writer {
 public:
  explicit Writer(uint8_t* buffer) : buffer_(buffer) {}
  // A null `data` leaves the `size` bytes at `offset` for the caller (deferred values).
  void Put(uint64_t offset, const void* data, size_t size) {
    std::memset(buffer_ + written_, 0, offset - written_);
    if (size > 0 && data != nullptr) std::memcpy(buffer_ + offset, data, size);
    written_ = offset + size;
  }
  template <typename T>
  void PutInt(uint64_t offset, T value) {
    Put(offset, &value, sizeof(value));
  }

 private:
  uint8_t* buffer_;
  uint64_t written_ = 0;
};

void WriteDescriptor(Writer& w, uint64_t at, const ColumnData& c, const Placement& p) {
  w.PutInt<uint8_t>(at, static_cast<uint8_t>(c.dtype));
  w.PutInt<uint8_t>(at + 1, c.variable_length ? 1 : 0);
  w.PutInt<uint16_t>(at + 2, 0);
  w.PutInt<uint32_t>(at + 4, static_cast<uint32_t>(c.dims.size()));
  w.PutInt<uint64_t>(at + 8, p.name_offset);
  w.PutInt<uint64_t>(at + 16, c.name.size());
  w.PutInt<uint64_t>(at + 24, p.dims_offset);
  w.PutInt<uint64_t>(at + 32, c.num_values);
  w.PutInt<uint64_t>(at + 40, p.values_offset);
  w.PutInt<uint64_t>(at + 48, c.values.size());
  w.PutInt<uint64_t>(at + 56, p.offsets_offset);
  w.PutInt<uint64_t>(at + 64, c.offsets.size() * 8);
  w.PutInt<uint64_t>(at + 72, p.splits_offset);
  w.PutInt<uint64_t>(at + 80, c.row_splits.size() * 8);
}

}  // namespace

absl::StatusOr<Batch> Batch::FromColumns(uint64_t num_records,
                                         absl::Span<const ColumnData> columns,
                                         BatchAllocator allocate) {
  for (const ColumnData& c : columns) {
    if (c.values.data() == nullptr && !c.values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inconsistent batch columns: column '", c.name, "' has deferred values and no filler"));
    }
  }
  return FromColumns(num_records, columns, allocate,
                     [](size_t, absl::Span<uint8_t>) { return absl::OkStatus(); });
}

absl::StatusOr<Batch> Batch::FromColumns(uint64_t num_records,
                                         absl::Span<const ColumnData> columns,
                                         BatchAllocator allocate, BatchValuesFiller fill) {
  // Metadata: names and dims, after the descriptors.
  std::vector<Placement> placements(columns.size());
  uint64_t cursor = kBatchHeaderBytes + kBatchColumnBytes * columns.size();
  for (size_t i = 0; i < columns.size(); ++i) {
    placements[i].name_offset = cursor;
    cursor = AlignUp(cursor + columns[i].name.size(), 8);
    placements[i].dims_offset = cursor;
    cursor += 8 * columns[i].dims.size();
  }
  const uint64_t meta_end = cursor;
  if (columns.size() > UINT32_MAX || meta_end > UINT32_MAX) {
    return absl::InvalidArgumentError("inconsistent batch columns: too many columns or names");
  }
  // Arrays, each aligned; an array that a column does not have stays at offset 0, size 0.
  for (size_t i = 0; i < columns.size(); ++i) {
    const ColumnData& c = columns[i];
    placements[i].values_offset = cursor = AlignUp(cursor, kBatchAlignment);
    cursor += c.values.size();
    if (!c.offsets.empty()) {
      placements[i].offsets_offset = cursor = AlignUp(cursor, kBatchAlignment);
      cursor += c.offsets.size() * 8;
    }
    if (!c.row_splits.empty()) {
      placements[i].splits_offset = cursor = AlignUp(cursor, kBatchAlignment);
      cursor += c.row_splits.size() * 8;
    }
  }
  const uint64_t total_size = cursor;

  std::shared_ptr<uint8_t> buffer = allocate(total_size);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a batch buffer of ", total_size, " bytes"));
  }
  Writer w(buffer.get());
  w.Put(0, kBatchMagic, sizeof(kBatchMagic));
  w.PutInt<uint16_t>(4, kBatchFormatVersion);
  w.PutInt<uint16_t>(6, 0);
  w.PutInt<uint64_t>(8, total_size);
  w.PutInt<uint64_t>(16, num_records);
  w.PutInt<uint32_t>(24, static_cast<uint32_t>(columns.size()));
  w.PutInt<uint32_t>(28, static_cast<uint32_t>(meta_end));
  for (size_t i = 0; i < columns.size(); ++i) {
    WriteDescriptor(w, kBatchHeaderBytes + kBatchColumnBytes * i, columns[i], placements[i]);
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    w.Put(placements[i].name_offset, columns[i].name.data(), columns[i].name.size());
    w.Put(placements[i].dims_offset, columns[i].dims.data(), 8 * columns[i].dims.size());
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    const ColumnData& c = columns[i];
    w.Put(placements[i].values_offset, c.values.data(), c.values.size());
    if (!c.offsets.empty()) {
      w.Put(placements[i].offsets_offset, c.offsets.data(), 8 * c.offsets.size());
    }
    if (!c.row_splits.empty()) {
      w.Put(placements[i].splits_offset, c.row_splits.data(), 8 * c.row_splits.size());
    }
  }

  for (size_t i = 0; i < columns.size(); ++i) {
    const ColumnData& c = columns[i];
    if (c.values.data() == nullptr && !c.values.empty()) {
      RETURN_IF_ERROR(fill(i, absl::Span<uint8_t>(buffer.get() + placements[i].values_offset,
                                                  c.values.size())));
    }
  }

  absl::StatusOr<Batch> batch = FromBuffer(std::move(buffer), total_size);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent batch columns: ", batch.status().message()));
  }
  return batch;
}

absl::StatusOr<Batch> Batch::FromBytes(absl::string_view bytes) {
  std::shared_ptr<uint8_t> buffer = AllocateBuffer(bytes.size());
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a batch buffer of ", bytes.size(), " bytes"));
  }
  if (!bytes.empty()) std::memcpy(buffer.get(), bytes.data(), bytes.size());
  return FromBuffer(std::move(buffer), bytes.size());
}

absl::StatusOr<Batch> Batch::FromBuffer(std::shared_ptr<const uint8_t> data, size_t size) {
  absl::StatusOr<BatchView> view =
      BatchView::Parse(absl::string_view(reinterpret_cast<const char*>(data.get()), size));
  if (!view.ok()) return view.status();
  return Batch(std::move(data), *std::move(view));
}

std::shared_ptr<uint8_t> Batch::AllocateBuffer(size_t size) {
  constexpr std::align_val_t kAlign{kBatchAlignment};
  void* p = ::operator new(size, kAlign, std::nothrow);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p),
                                  [](uint8_t* q) { ::operator delete(q, kAlign); });
}

}  // namespace croupier
