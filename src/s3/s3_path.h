// s3://bucket/key paths: parsing, and the shell-glob rules croupier applies to keys.
#ifndef CROUPIER_SRC_S3_S3_PATH_H_
#define CROUPIER_SRC_S3_S3_PATH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier::s3 {

inline constexpr absl::string_view kScheme = "s3://";

// True for a path that names an object store's object ("s3://..."), which Env::Default() reads
// through the S3 client rather than the local file system.
bool IsS3Path(absl::string_view path);

// An object's address. Plain value.
struct S3Path {
  std::string bucket;
  std::string key;  // may be empty (the bucket itself, or a glob's prefix)

  std::string ToString() const;  // "s3://bucket/key"
};

// Splits "s3://bucket/key". INVALID_ARGUMENT, naming the path, for another scheme or an empty
// bucket.
absl::StatusOr<S3Path> ParseS3Path(absl::string_view path);

// The part of a key pattern before its first wildcard (*, ? or [): what ListObjectsV2 is asked
// for. A pattern without wildcards is its own prefix.
std::string GlobPrefix(absl::string_view key_pattern);

// Whether `key` matches the shell glob `key_pattern` as a local path would: '*' and '?' do not
// match '/', so "dir/*.tfrecord" does not reach into "dir/sub/"; nor do they match a leading
// '.' of a name, so the shared indexes under ".croupier-index/" are never taken for data.
bool GlobMatch(absl::string_view key_pattern, absl::string_view key);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_PATH_H_
