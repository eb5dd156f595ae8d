// BatchBuilder: decodes records straight into per-feature columns.
//
// Each column remembers where the current record's values began, so that a failed record, a map
// key seen again (last wins) or a oneof switching kind can all be undone by truncating.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "croupier/batch.h"
#include "src/common/status_macros.h"
#include "src/io/proto_wire.h"

namespace croupier {

// One feature's arrays for the batch being built. Thread-compatible, like its builder.
class BatchBuilder::Column {
 public:
  explicit Column(const FeatureSpec* spec)
      : spec_(spec),
        per_record_(spec->NumElements()),
        // Create let through only the dtypes of an Example's lists (CheckExampleFeatureSpecs).
        want_(spec->dtype == DType::kBytes     ? wire::ListKind::kBytes
              : spec->dtype == DType::kFloat32 ? wire::ListKind::kFloat
                                               : wire::ListKind::kInt64) {}

  const std::string& name() const { return spec_->name; }

  void BeginRecord() {
    mark_values_ = num_values();
    mark_data_ = data_.size();
    seen_ = false;
    found_ = wire::ListKind::kNone;
  }

  // Undoes everything appended since BeginRecord.
  void Truncate() {
    switch (want_) {
      case wire::ListKind::kBytes:
        offsets_.resize(mark_values_ + 1);
        data_.resize(mark_data_);
        break;
      case wire::ListKind::kFloat:
        floats_.resize(mark_values_);
        break;
      default:
        ints_.resize(mark_values_);
        break;
    }
  }

  // Decodes the value of a map entry for this feature; false on malformed bytes.
  bool Decode(const wire::Reader& entry) {
    Truncate();  // an earlier entry with the same key: the last one wins
    seen_ = true;
    found_ = wire::ListKind::kNone;
    return wire::ForEachListField(entry, [this](wire::ListKind kind, wire::Reader list) {
      if (kind != found_) {  // the oneof switched kind: what the earlier kind gave is gone
        Truncate();
        found_ = kind;
      }
      // Another kind is a mismatch that CheckRecord reports, unless a later field switches back.
      if (kind != want_) return true;
      switch (want_) {
        case wire::ListKind::kBytes:
          return wire::DecodeBytesList(list, [this](absl::string_view value) {
            data_.append(value.data(), value.size());
            offsets_.push_back(data_.size());
          });
        case wire::ListKind::kFloat:
          return wire::DecodeFloatList(list, floats_);
        default:
          return wire::DecodeInt64List(list, ints_);
      }
    });
  }

  // Whether the record's value fits the spec.
  absl::Status CheckRecord() const {
    if (!seen_) return absl::InvalidArgumentError(absl::StrCat("feature '", name(), "': missing"));
    if (found_ != wire::ListKind::kNone && found_ != want_) {
      return absl::InvalidArgumentError(absl::StrCat("feature '", name(), "': expected ",
                                                     DTypeName(spec_->dtype), ", found ",
                                                     wire::ListKindName(found_)));
    }
    uint64_t count = num_values() - mark_values_;
    if (!spec_->variable_length && count != static_cast<uint64_t>(per_record_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature '", name(), "': expected ", per_record_,
                       per_record_ == 1 ? " value" : " values", ", found ", count));
    }
    return absl::OkStatus();
  }

  void CommitRecord() {
    if (spec_->variable_length) splits_.push_back(num_values());
  }

  // Empties the column for the next batch, keeping capacity.
  void Clear() {
    floats_.clear();
    ints_.clear();
    data_.clear();
    offsets_.resize(1);
    splits_.resize(1);
    mark_values_ = mark_data_ = 0;
  }

  ColumnData Data() const {
    ColumnData d;
    d.name = name();
    d.dtype = spec_->dtype;
    d.variable_length = spec_->variable_length;
    d.dims = spec_->shape;
    d.num_values = num_values();
    switch (want_) {
      case wire::ListKind::kBytes:
        d.values = data_;
        d.offsets = offsets_;
        break;
      case wire::ListKind::kFloat:
        d.values =
            absl::string_view(reinterpret_cast<const char*>(floats_.data()), 4 * floats_.size());
        break;
      default:
        d.values = absl::string_view(reinterpret_cast<const char*>(ints_.data()), 8 * ints_.size());
        break;
    }
    if (spec_->variable_length) d.row_splits = splits_;
    return d;
  }

  uint64_t buffered_bytes() const {
    return 4 * floats_.size() + 8 * ints_.size() + data_.size() +
           (want_ == wire::ListKind::kBytes ? 8 * offsets_.size() : 0) +
           (spec_->variable_length ? 8 * splits_.size() : 0);
  }

 private:
  uint64_t num_values() const {
    switch (want_) {
      case wire::ListKind::kBytes:
        return offsets_.size() - 1;
      case wire::ListKind::kFloat:
        return floats_.size();
      default:
        return ints_.size();
    }
  }

  const FeatureSpec* spec_;  // owned by the builder, which outlives its columns
  int64_t per_record_;
  wire::ListKind want_;
  // The arrays of the batch being built; only those of the spec's dtype are used.
  std::vector<float> floats_;
  std::vector<int64_t> ints_;
  std::string data_;                     // bytes values, concatenated
  std::vector<uint64_t> offsets_ = {0};  // bytes: value i is data_[offsets_[i], offsets_[i+1])
  std::vector<uint64_t> splits_ = {0};   // variable length: row splits
  // The current record: where its values begin, and what it held for this feature.
  uint64_t mark_values_ = 0;
  uint64_t mark_data_ = 0;
  bool seen_ = false;
  wire::ListKind found_ = wire::ListKind::kNone;
};

absl::StatusOr<std::unique_ptr<BatchBuilder>> BatchBuilder::Create(std::vector<FeatureSpec> specs) {
  RETURN_IF_ERROR(ValidateFeatureSpecs(specs));
  RETURN_IF_ERROR(CheckExampleFeatureSpecs(specs));
  return std::unique_ptr<BatchBuilder>(new BatchBuilder(std::move(specs)));
}

BatchBuilder::BatchBuilder(std::vector<FeatureSpec> specs) : specs_(std::move(specs)) {
  columns_.reserve(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    columns_.emplace_back(&specs_[i]);
    index_.emplace(specs_[i].name, i);
  }
}

BatchBuilder::~BatchBuilder() = default;

absl::Status BatchBuilder::AddRecord(absl::string_view serialized) {
  for (Column& c : columns_) c.BeginRecord();
  wire::WireError error;
  const Column* failed_in = nullptr;
  bool ok = wire::ForEachFeatureEntry(wire::Reader(serialized, &error),
                                      [&](absl::string_view key, const wire::Reader& entry) {
                                        auto it = index_.find(key);
                                        if (it == index_.end())
                                          return true;  // not wanted: skipped without decoding
                                        Column& column = columns_[it->second];
                                        if (column.Decode(entry)) return true;
                                        failed_in = &column;
                                        return false;
                                      });
  absl::Status status;
  if (!ok) {
    status = failed_in != nullptr ? wire::MalformedError(error, failed_in->name())
                                  : wire::MalformedError(error);
  } else {
    for (const Column& c : columns_) {
      status = c.CheckRecord();
      if (!status.ok()) break;
    }
  }
  if (!status.ok()) {
    for (Column& c : columns_) c.Truncate();
    return status;
  }
  for (Column& c : columns_) c.CommitRecord();
  ++num_records_;
  return absl::OkStatus();
}

absl::StatusOr<Batch> BatchBuilder::Finish(BatchAllocator allocate) {
  std::vector<ColumnData> data;
  data.reserve(columns_.size());
  for (const Column& c : columns_) data.push_back(c.Data());
  ASSIGN_OR_RETURN(Batch batch, Batch::FromColumns(num_records_, data, allocate));
  for (Column& c : columns_) c.Clear();
  num_records_ = 0;
  return batch;
}

uint64_t BatchBuilder::buffered_bytes() const {
  uint64_t total = 0;
  for (const Column& c : columns_) total += c.buffered_bytes();
  return total;
}

}  // namespace croupier
