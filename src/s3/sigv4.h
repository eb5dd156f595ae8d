// AWS Signature Version 4 (the request signing every S3-compatible store accepts): the canonical
// request, the string to sign, the derived signing key and the Authorization header. Pure
// functions of their inputs, so the published examples can be checked bit for bit.
#ifndef CROUPIER_SRC_S3_SIGV4_H_
#define CROUPIER_SRC_S3_SIGV4_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace croupier::s3 {

// SHA-256 of an empty payload, as x-amz-content-sha256 carries it for GET, HEAD and list calls.
inline constexpr absl::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Percent-encodes per SigV4: unreserved characters (A-Z a-z 0-9 - . _ ~) stay, every other byte
// becomes %XX in upper case; '/' stays when `keep_slash` (object keys in a path).
std::string UriEncode(absl::string_view s, bool keep_slash);

std::string Sha256Hex(absl::string_view data);

// What is signed. Header names are matched without regard to case; every header given here is
// signed, and must be sent exactly as given (host included).
struct SigningInput {
  std::string method;         // "GET", "HEAD"
  std::string canonical_uri;  // already URI-encoded path, e.g. "/bucket/a%20b.tfrecord"
  std::vector<std::pair<std::string, std::string>> query;  // raw (unencoded) names and values
  std::map<std::string, std::string> headers;              // must hold host and x-amz-date
  std::string payload_sha256 = std::string(kEmptyPayloadSha256);
  std::string region;
  std::string service = "s3";
  std::string access_key_id;
  std::string secret_access_key;
};

// "20130524T000000Z", the x-amz-date of `t` (UTC).
std::string AmzDate(absl::Time t);

// The pieces, exposed for tests and for errors that show what was signed.
std::string CanonicalRequest(const SigningInput& in);
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);
std::string StringToSign(const SigningInput& in, absl::string_view amz_date);
std::string Signature(const SigningInput& in, absl::string_view amz_date);

// The Authorization header's value:
// "AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/s3/aws4_request, SignedHeaders=..., Signature=...".
// The date is taken from in.headers["x-amz-date"].
std::string AuthorizationHeader(const SigningInput& in);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_SIGV4_H_
