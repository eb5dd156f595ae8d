#include "src/s3/byte_range.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace croupier::s3 {

std::string ByteRange::ToString() const {
  return absl::StrCat("bytes [", offset, ", ", end(), ")");
}

absl::StatusOr<std::string> RangeHeader(const ByteRange& range) {
  if (range.length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an empty byte range at ", range.offset, " cannot be requested"));
  }
  return absl::StrCat("bytes=", range.offset, "-", range.end() - 1);
}

absl::StatusOr<ContentRange> ParseContentRange(absl::string_view header) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("bad Content-Range '", header, "'"));
  };
  absl::string_view rest = header;
  if (!absl::ConsumePrefix(&rest, "bytes ")) return bad();
  const size_t dash = rest.find('-'), slash = rest.find('/');
  if (dash == absl::string_view::npos || slash == absl::string_view::npos || dash > slash) {
    return bad();
  }
  uint64_t first = 0, last = 0;
  if (!absl::SimpleAtoi(rest.substr(0, dash), &first) ||
      !absl::SimpleAtoi(rest.substr(dash + 1, slash - dash - 1), &last) || last < first) {
    return bad();
  }
  ContentRange out;
  out.range = {first, last - first + 1};
  absl::string_view total = rest.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!absl::SimpleAtoi(total, &t) || t <= last) return bad();
    out.total = t;
  }
  return out;
}

}  // namespace croupier::s3
