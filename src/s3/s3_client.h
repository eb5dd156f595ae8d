// S3Client: the calls croupier makes of an S3-compatible object store (HEAD, ranged GET,
// ListObjectsV2), signed with SigV4 and sent over cpp-httplib (HTTP, or HTTPS through OpenSSL).
//
// Every call is retried in RetryWithBackoff (src/common/retry.h) on what another attempt may
// cure: throttling (503 SlowDown, 429), other 5xx, 408/RequestTimeout, and connections refused,
// reset, cut short or stalled past the read timeout; at most options.max_attempts attempts,
// within options.request_deadline. Each retry logs one warning line naming the object, the
// range and the cause, and is counted in stats(). Errors name the object, the byte range and
// the server's code and message; the codes are those of s3_error.h.
#ifndef CROUPIER_SRC_S3_S3_CLIENT_H_
#define CROUPIER_SRC_S3_S3_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/common/env.h"
#include "src/s3/byte_range.h"
#include "src/s3/s3_options.h"
#include "src/s3/s3_path.h"
#include "src/s3/s3_stats.h"

namespace croupier::s3 {

// What HEAD or a listing tells of an object. Plain value.
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // Last-Modified (whole seconds, as the store keeps it)
  std::string etag;
};

class S3Connections;
class FetchPool;

// Thread-safe: calls may run from many threads; each takes a connection of its own from a pool
// (kept alive between calls) and never holds a lock while it talks to the store.
class S3Client {
 public:
  // INVALID_ARGUMENT for an endpoint that is not http(s)://host[:port].
  static absl::StatusOr<std::unique_ptr<S3Client>> Create(S3Options options);
  ~S3Client();

  // The object's size, Last-Modified and ETag. NOT_FOUND for a missing object or bucket.
  absl::StatusOr<ObjectInfo> Head(const S3Path& path);

  // Reads exactly `range` of the object into dst (range.length bytes, which dst must hold) and
  // returns range.length. An answer shorter than asked is retried like a reset connection, as
  // the range is expected to lie inside the object (the caller knows its size from Head);
  // OUT_OF_RANGE when it does not.
  // `if_match` (an ETag, optional): the store refuses the read (ABORTED, 412 PreconditionFailed)
  // when the object is no longer the one of that ETag.
  absl::StatusOr<size_t> GetRange(const S3Path& path, const ByteRange& range, char* dst,
                                  absl::string_view if_match = "");

  // Reads `ranges` of the object of `size` bytes (as HEAD told it): merged into few GETs
  // (range_plan.h, by the options' merge gap and request size) run at once on the client's
  // FetchPool, at most options.max_in_flight of them in flight. Each range's `got` is its bytes
  // inside the object. The first error, naming the object and the merged request's range.
  absl::Status GetRanges(const S3Path& path, uint64_t size,
                         absl::Span<RandomAccessFile::Range> ranges,
                         absl::string_view if_match = "");

  // The whole object, in one GET (no HEAD first). NOT_FOUND for a missing object;
  // RESOURCE_EXHAUSTED for one larger than 64 MiB (a whole read is for small objects: indexes).
  absl::StatusOr<std::string> Get(const S3Path& path);

  // Writes `body` as the object at `path`, whole (a reader sees the old object or the new one).
  absl::Status Put(const S3Path& path, absl::string_view body);

  // Every object of `bucket` whose key starts with `prefix`, in the store's (UTF-8 binary)
  // order, following continuation tokens. NOT_FOUND for a missing bucket.
  absl::StatusOr<std::vector<ObjectInfo>> List(const std::string& bucket,
                                               const std::string& prefix);

  const S3Options& options() const { return options_; }
  S3Stats stats() const { return counters_.Snapshot(); }

 private:
  struct Request;
  S3Client(S3Options options, std::unique_ptr<S3Connections> connections);
  // One request with its retries.
  absl::Status Send(Request& request);
  // One attempt.
  absl::Status Attempt(Request& request);

  const S3Options options_;
  const std::unique_ptr<S3Connections> connections_;
  S3Counters counters_{&ProcessS3Counters()};
  // Last: its threads run GETs on the members above, so it is destroyed (joined) first.
  const std::unique_ptr<FetchPool> pool_;
};

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_CLIENT_H_
