// How to reach an S3-compatible store: endpoint, region, addressing style, timeouts and retries.
#ifndef CROUPIER_SRC_S3_S3_OPTIONS_H_
#define CROUPIER_SRC_S3_S3_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/s3/credentials.h"

namespace croupier::s3 {

// Plain value.
struct S3Options {
  // "http://host:port" or "https://host[:port]". Empty: AWS's regional endpoint,
  // https://s3.REGION.amazonaws.com.
  std::string endpoint;
  std::string region = "us-east-1";
  // Path style puts the bucket in the path (http://host/bucket/key): MinIO, Ceph, moto and most
  // self-hosted stores need it. Virtual-host style puts it in the host name
  // (http://bucket.host/key), as AWS prefers.
  bool path_style = true;
  Credentials credentials;
  // A PEM file of the certificate authorities to trust over HTTPS (AWS_CA_BUNDLE); empty: the
  // system's.
  std::string ca_bundle;

  absl::Duration connect_timeout = absl::Seconds(5);
  // The longest wait for the next bytes of an answer: a stalled response fails after this and
  // is retried.
  absl::Duration read_timeout = absl::Seconds(20);
  // Attempts of one request, the first included, on retryable failures (throttling, 5xx,
  // connections reset or cut short, timeouts), with jittered exponential backoff between them
  // from `initial_backoff` up to `max_backoff`, all within `request_deadline`.
  int max_attempts = 6;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  absl::Duration request_deadline = absl::Minutes(2);

  // ReadRanges (S3Env): at most this many GETs of the client in flight at once; neighbouring
  // ranges merged into one GET when the bytes between them are at most merge_gap_bytes (0: only
  // touching ranges, so nothing is fetched that was not asked for); a merged GET longer than
  // max_request_bytes cut into parts fetched in parallel.
  int max_in_flight = 16;
  uint64_t merge_gap_bytes = 0;
  uint64_t max_request_bytes = uint64_t{8} << 20;
  // Where the record indexes of objects are kept for every producer (S3Env::SharedDerivedPath):
  // "s3://BUCKET[/PREFIX]"; empty: ".croupier-index" in each object's own bucket; "off": none.
  std::string index_prefix;
};

// The options from the environment:
//   AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL      endpoint
//   AWS_REGION, else AWS_DEFAULT_REGION             region (default us-east-1)
//   CROUPIER_S3_ADDRESSING = path | virtual         addressing (default: path with an explicit
//                                                   endpoint, virtual for AWS's own)
//   CROUPIER_S3_MAX_ATTEMPTS, CROUPIER_S3_READ_TIMEOUT_SECONDS,
//   CROUPIER_S3_CONNECT_TIMEOUT_SECONDS             retries and timeouts
//   CROUPIER_S3_MAX_IN_FLIGHT, CROUPIER_S3_MERGE_GAP_BYTES,
//   CROUPIER_S3_MAX_REQUEST_BYTES                   ReadRanges' requests (see above)
//   CROUPIER_S3_INDEX_PREFIX                        index_prefix
//   AWS_CA_BUNDLE                                   the CAs trusted over HTTPS
// and the credentials from ResolveCredentials. INVALID_ARGUMENT names a malformed variable;
// FAILED_PRECONDITION when there are no credentials. (CROUPIER_S3_PREFETCH_BYTES is read by the
// producer, not here: ProducerNodeOptions::prefetch_bytes, what its makers may hold fetched
// ahead.)
absl::StatusOr<S3Options> S3OptionsFromEnvironment(const GetEnv& env);

// CROUPIER_S3_SHARED_READ_BYTES: at most how many bytes of copies the processes of one producer
// keep of the ranges they fetched, for each other (shared_reads.h); default 256 MiB, 0: none.
// INVALID_ARGUMENT names a malformed value. Needs no credentials (asked where no object may be
// read).
inline constexpr uint64_t kDefaultSharedReadBytes = uint64_t{256} << 20;
absl::StatusOr<uint64_t> SharedReadBytesFromEnvironment(const GetEnv& env);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_OPTIONS_H_
