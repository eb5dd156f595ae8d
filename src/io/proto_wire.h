// The protobuf wire format, hand-parsed, and the walk through the tf.train.Example structure
// that ParseExample and BatchBuilder share.
//
// We parse by hand rather than with libprotobuf so that the batching hot path decodes straight
// into columns with no message objects, and so that the library does not depend on libprotobuf.
//
// Reading functions return a bool instead of a Status so that the fast path stays a compare and
// a branch; the first failure is recorded in a WireError shared by every reader of one record and
// turned into a DATA_LOSS Status once, by the caller (MalformedError).
#ifndef CROUPIER_SRC_IO_PROTO_WIRE_H_
#define CROUPIER_SRC_IO_PROTO_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace croupier::wire {

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

struct Tag {
  uint32_t field = 0;
  uint32_t type = 0;  // a WireType; ReadTag rejects 6 and 7

  bool Is(uint32_t f, WireType t) const { return field == f && type == t; }
};

// ---- Writing ----

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline void AppendVarint(std::string* out, uint64_t v) {
  char buf[10];
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out->append(buf, n);
}

inline void AppendTag(std::string* out, uint32_t field, WireType type) {
  AppendVarint(out, (uint64_t{field} << 3) | type);
}

inline void AppendFixed32(std::string* out, uint32_t v) {
  char buf[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                 static_cast<char>(v >> 24)};
  out->append(buf, 4);
}

// ---- Reading ----

// The first failure while parsing one record.
struct WireError {
  std::string message;  // e.g. "truncated varint at byte 17"; empty while nothing failed
};

// DATA_LOSS "malformed tf.train.Example: <error.message>", and the same prefixed by
// "feature '<feature>': " for a failure inside that feature's value.
absl::Status MalformedError(const WireError& error);
absl::Status MalformedError(const WireError& error, absl::string_view feature);

// A cursor over the bytes of one message inside a record. Offsets in error messages count from
// the start of the record, whichever nested message the failure is in. Thread-compatible; cheap
// to copy (copies read independently).
class Reader {
 public:
  Reader() = default;  // an empty message
  Reader(absl::string_view record, WireError* error)
      : base_(record.data()),
        p_(record.data()),
        end_(record.data() + record.size()),
        error_(error) {}

  bool done() const { return p_ == end_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  const char* position() const { return p_; }

  bool ReadVarint(uint64_t& v) {
    if (ABSL_PREDICT_TRUE(p_ != end_ && static_cast<uint8_t>(*p_) < 0x80)) {
      v = static_cast<uint8_t>(*p_++);
      return true;
    }
    return ReadVarintSlow(v);
  }
  // Rejects wire types 6 and 7, field number 0 and tags beyond 32 bits, as protobuf does.
  bool ReadTag(Tag& tag) {
    const char* at = p_;
    uint64_t v;
    if (!ReadVarint(v)) return false;
    tag.field = static_cast<uint32_t>(v >> 3);
    tag.type = static_cast<uint32_t>(v & 7);
    if (ABSL_PREDICT_FALSE(v > 0xffffffffu || tag.field == 0 || tag.type > kFixed32)) {
      return BadTag(at, v);
    }
    return true;
  }
  bool ReadFixed32(uint32_t& v);
  // Reads a length-delimited payload: as raw bytes, or as a reader over a nested message.
  bool ReadBytes(absl::string_view& bytes);
  bool ReadMessage(Reader& message) {
    absl::string_view bytes;
    if (!ReadBytes(bytes)) return false;
    message = *this;
    message.p_ = bytes.data();
    message.end_ = bytes.data() + bytes.size();
    return true;
  }
  // Skips the payload of a field whose tag was just read (nested groups included).
  bool Skip(const Tag& tag);
  // Records a failure at `at` (a position in this record) and returns false.
  ABSL_ATTRIBUTE_NOINLINE bool Fail(const char* at, absl::string_view what);

 private:
  bool ReadVarintSlow(uint64_t& v);
  bool BadTag(const char* at, uint64_t v);
  bool SkipGroup(uint32_t field, int depth);

  const char* base_ = nullptr;  // start of the record
  const char* p_ = nullptr;
  const char* end_ = nullptr;  // end of the current message
  WireError* error_ = nullptr;
};

// ---- The tf.train.Example structure ----
// Example { Features features = 1; }  Features { map<string, Feature> feature = 1; }
// map entry { string key = 1; Feature value = 2; }
// Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                        Int64List int64_list = 3; } }

// Which list a Feature holds. The values are the field numbers in Feature.
enum class ListKind : uint32_t { kNone = 0, kBytes = 1, kFloat = 2, kInt64 = 3 };

// "bytes_list", "float_list", "int64_list", or "no list".
absl::string_view ListKindName(ListKind kind);

// The key of a map entry: the last `key` field, or "" when there is none (protobuf's default).
bool ReadEntryKey(Reader entry, absl::string_view& key);

// Calls on_entry(absl::string_view key, const Reader& entry) -> bool for every map entry of every
// `features` field, in wire order, skipping unknown fields. Stops and returns false when the bytes
// are malformed or on_entry returns false.
template <typename OnEntry>
bool ForEachFeatureEntry(Reader example, OnEntry&& on_entry) {
  Tag tag;
  while (!example.done()) {
    if (!example.ReadTag(tag)) return false;
    if (!tag.Is(1, kLengthDelimited)) {
      if (!example.Skip(tag)) return false;
      continue;
    }
    Reader features;
    if (!example.ReadMessage(features)) return false;
    while (!features.done()) {
      if (!features.ReadTag(tag)) return false;
      if (!tag.Is(1, kLengthDelimited)) {
        if (!features.Skip(tag)) return false;
        continue;
      }
      Reader entry;
      absl::string_view key;
      if (!features.ReadMessage(entry) || !ReadEntryKey(entry, key)) return false;
      if (!on_entry(key, entry)) return false;
    }
  }
  return true;
}

// Calls on_list(ListKind kind, Reader list) -> bool for every list field of every `value` field of
// a map entry, in wire order. Protobuf merges repeated `value` fields into one Feature, and its
// oneof keeps the last kind: a call with a kind different from the previous one discards what the
// previous calls gave.
template <typename OnList>
bool ForEachListField(Reader entry, OnList&& on_list) {
  Tag tag;
  while (!entry.done()) {
    if (!entry.ReadTag(tag)) return false;
    if (!tag.Is(2, kLengthDelimited)) {
      if (!entry.Skip(tag)) return false;
      continue;
    }
    Reader feature;
    if (!entry.ReadMessage(feature)) return false;
    while (!feature.done()) {
      if (!feature.ReadTag(tag)) return false;
      if (tag.type != kLengthDelimited || tag.field < 1 || tag.field > 3) {
        if (!feature.Skip(tag)) return false;
        continue;
      }
      Reader list;
      if (!feature.ReadMessage(list)) return false;
      if (!on_list(static_cast<ListKind>(tag.field), list)) return false;
    }
  }
  return true;
}

// Calls on_value(absl::string_view) -> void for each value of a BytesList.
template <typename OnValue>
bool DecodeBytesList(Reader list, OnValue&& on_value) {
  Tag tag;
  while (!list.done()) {
    if (!list.ReadTag(tag)) return false;
    if (!tag.Is(1, kLengthDelimited)) {
      if (!list.Skip(tag)) return false;
      continue;
    }
    absl::string_view value;
    if (!list.ReadBytes(value)) return false;
    on_value(value);
  }
  return true;
}

// Append the values of a FloatList / Int64List to `out`, packed and unpacked alike.
bool DecodeFloatList(Reader list, std::vector<float>& out);
bool DecodeInt64List(Reader list, std::vector<int64_t>& out);

}  // namespace croupier::wire

#endif  // CROUPIER_SRC_IO_PROTO_WIRE_H_
