// Byte ranges as HTTP writes them (RFC 9110 §14): the Range header a ranged GET sends, and the
// Content-Range its 206 answer carries, which says which bytes came back.
#ifndef CROUPIER_SRC_S3_BYTE_RANGE_H_
#define CROUPIER_SRC_S3_BYTE_RANGE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier::s3 {

// The half-open range [offset, offset + length). Plain value.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;

  uint64_t end() const { return offset + length; }
  // "bytes [offset, end)", as errors name a range.
  std::string ToString() const;
};

// "bytes=FIRST-LAST" (inclusive, as HTTP counts). INVALID_ARGUMENT for an empty range, which
// HTTP cannot express.
absl::StatusOr<std::string> RangeHeader(const ByteRange& range);

// A parsed "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": unknown).
struct ContentRange {
  ByteRange range;
  std::optional<uint64_t> total;
};

// Parses a Content-Range header. INVALID_ARGUMENT, quoting the header, for anything else
// (including "bytes */TOTAL", which only a 416 answer carries).
absl::StatusOr<ContentRange> ParseContentRange(absl::string_view header);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_BYTE_RANGE_H_
