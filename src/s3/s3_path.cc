#include "src/s3/s3_path.h"

#include <fnmatch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace croupier::s3 {

bool IsS3Path(absl::string_view path) { return absl::StartsWith(path, kScheme); }

std::string S3Path::ToString() const { return absl::StrCat(kScheme, bucket, "/", key); }

absl::StatusOr<S3Path> ParseS3Path(absl::string_view path) {
  if (!IsS3Path(path)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not an s3://bucket/key path"));
  }
  absl::string_view rest = path.substr(kScheme.size());
  const size_t slash = rest.find('/');
  S3Path out;
  out.bucket = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) out.key = std::string(rest.substr(slash + 1));
  if (out.bucket.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' names no bucket"));
  }
  return out;
}

std::string GlobPrefix(absl::string_view key_pattern) {
  return std::string(key_pattern.substr(0, key_pattern.find_first_of("*?[")));
}

bool GlobMatch(absl::string_view key_pattern, absl::string_view key) {
  const std::string pattern(key_pattern), name(key);
  return ::fnmatch(pattern.c_str(), name.c_str(), FNM_PATHNAME | FNM_PERIOD) == 0;
}

}  // namespace croupier::s3
