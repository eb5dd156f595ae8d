// The out-of-line parts of the wire reader (proto_wire.h): slow paths, skipping, list decoding.
#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/io/proto_wire.h"

namespace croupier::wire {
namespace {

// Protobuf's own default recursion limit: deeper nesting is refused rather than risking the stack.
constexpr int kMaxGroupDepth = 100;

}  // namespace

absl::Status MalformedError(const WireError& error) {
  return absl::DataLossError(absl::StrCat("malformed tf.train.Example: ", error.message));
}

absl::Status MalformedError(const WireError& error, absl::string_view feature) {
  return absl::DataLossError(
      absl::StrCat("feature '", feature, "': malformed tf.train.Example: ", error.message));
}

bool Reader::Fail(const char* at, absl::string_view what) {
  if (error_ != nullptr && error_->message.empty()) {
    error_->message = absl::StrCat(what, " at byte ", at - base_);
  }
  return false;
}

bool Reader::ReadVarintSlow(uint64_t& v) {
  const char* start = p_;
  uint64_t result = 0;
  for (int i = 0; i < 10; ++i) {
    if (p_ == end_) return Fail(start, "truncated varint");
    uint8_t b = static_cast<uint8_t>(*p_++);
    // Bits beyond 64 in the tenth byte are dropped, as protobuf does.
    result |= uint64_t{b & 0x7fu} << (7 * i);
    if (b < 0x80) {
      v = result;
      return true;
    }
  }
  return Fail(start, "varint longer than 10 bytes");
}

bool Reader::BadTag(const char* at, uint64_t v) {
  if (v > 0xffffffffu) return Fail(at, "tag does not fit in 32 bits");
  if ((v >> 3) == 0) return Fail(at, "invalid field number 0");
  return Fail(at, absl::StrCat("invalid wire type ", v & 7, " in field ", v >> 3));
}

bool Reader::ReadFixed32(uint32_t& v) {
  if (remaining() < 4) return Fail(p_, "truncated fixed32");
  const auto* b = reinterpret_cast<const uint8_t*>(p_);
  v = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  p_ += 4;
  return true;
}

bool Reader::ReadBytes(absl::string_view& bytes) {
  const char* at = p_;
  uint64_t length;
  if (!ReadVarint(length)) return false;
  if (ABSL_PREDICT_FALSE(length > remaining())) {
    return Fail(at, absl::StrCat("length ", length, " runs past the end of its message (",
                                 remaining(), " bytes left)"));
  }
  bytes = absl::string_view(p_, length);
  p_ += length;
  return true;
}

bool Reader::Skip(const Tag& tag) {
  uint64_t ignored;
  absl::string_view bytes;
  switch (tag.type) {
    case kVarint:
      return ReadVarint(ignored);
    case kFixed64:
      if (remaining() < 8) return Fail(p_, "truncated fixed64");
      p_ += 8;
      return true;
    case kLengthDelimited:
      return ReadBytes(bytes);
    case kStartGroup:
      return SkipGroup(tag.field, 1);
    case kFixed32:
      if (remaining() < 4) return Fail(p_, "truncated fixed32");
      p_ += 4;
      return true;
    default:  // kEndGroup: ReadTag rejected every other value
      return Fail(p_, absl::StrCat("end-group tag of field ", tag.field, " without a start"));
  }
}

bool Reader::SkipGroup(uint32_t field, int depth) {
  if (depth > kMaxGroupDepth) return Fail(p_, "groups nested too deeply");
  Tag tag;
  while (!done()) {
    if (!ReadTag(tag)) return false;
    if (tag.type == kEndGroup) {
      if (tag.field == field) return true;
      return Fail(
          p_, absl::StrCat("end-group tag of field ", tag.field, " closes group of field ", field));
    }
    bool ok = tag.type == kStartGroup ? SkipGroup(tag.field, depth + 1) : Skip(tag);
    if (!ok) return false;
  }
  return Fail(p_, absl::StrCat("group of field ", field, " is not closed"));
}

absl::string_view ListKindName(ListKind kind) {
  switch (kind) {
    case ListKind::kBytes:
      return "bytes_list";
    case ListKind::kFloat:
      return "float_list";
    case ListKind::kInt64:
      return "int64_list";
    case ListKind::kNone:
      break;
  }
  return "no list";
}

bool ReadEntryKey(Reader entry, absl::string_view& key) {
  key = absl::string_view("", 0);
  Tag tag;
  while (!entry.done()) {
    if (!entry.ReadTag(tag)) return false;
    bool ok = tag.Is(1, kLengthDelimited) ? entry.ReadBytes(key) : entry.Skip(tag);
    if (!ok) return false;
  }
  return true;
}

bool DecodeFloatList(Reader list, std::vector<float>& out) {
  static_assert(std::endian::native == std::endian::little, "floats are copied as stored");
  Tag tag;
  while (!list.done()) {
    if (!list.ReadTag(tag)) return false;
    if (tag.Is(1, kLengthDelimited)) {  // packed
      const char* at = list.position();
      absl::string_view packed;
      if (!list.ReadBytes(packed)) return false;
      if (packed.size() % 4 != 0) {
        return list.Fail(at, absl::StrCat("packed float list of ", packed.size(),
                                          " bytes is not a multiple of 4"));
      }
      if (packed.empty()) continue;  // memcpy to an empty vector's null data() is undefined
      size_t old = out.size();
      out.resize(old + packed.size() / 4);
      std::memcpy(out.data() + old, packed.data(), packed.size());
    } else if (tag.Is(1, kFixed32)) {  // one unpacked value
      uint32_t bits;
      if (!list.ReadFixed32(bits)) return false;
      out.push_back(std::bit_cast<float>(bits));
    } else if (!list.Skip(tag)) {
      return false;
    }
  }
  return true;
}

bool DecodeInt64List(Reader list, std::vector<int64_t>& out) {
  Tag tag;
  uint64_t v;
  while (!list.done()) {
    if (!list.ReadTag(tag)) return false;
    if (tag.Is(1, kLengthDelimited)) {  // packed
      Reader packed;
      if (!list.ReadMessage(packed)) return false;
      // Every well-formed varint ends in exactly one byte below 0x80.
      size_t count = 0;
      for (const char* p = packed.position(); p != packed.position() + packed.remaining(); ++p) {
        count += static_cast<uint8_t>(*p) < 0x80;
      }
      // Grow geometrically: a column gets one reserve per record, and exact reserves would make
      // filling it quadratic.
      if (out.capacity() < out.size() + count) {
        out.reserve(std::max(out.size() + count, 2 * out.capacity()));
      }
      while (!packed.done()) {
        if (!packed.ReadVarint(v)) return false;
        out.push_back(static_cast<int64_t>(v));
      }
    } else if (tag.Is(1, kVarint)) {  // one unpacked value
      if (!list.ReadVarint(v)) return false;
      out.push_back(static_cast<int64_t>(v));
    } else if (!list.Skip(tag)) {
      return false;
    }
  }
  return true;
}

}  // namespace croupier::wire
