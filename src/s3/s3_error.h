// What an S3 answer or a failed connection means for the caller: the status code (UNAVAILABLE
// is the one retried) and a message that names the object, the byte range and the server's own
// code and message, e.g.
//   "s3://b/k bytes [0, 4096): 403 InvalidAccessKeyId: The AWS Access Key Id you provided ...".
#ifndef CROUPIER_SRC_S3_S3_ERROR_H_
#define CROUPIER_SRC_S3_S3_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace croupier::s3 {

// The <Code> and <Message> of an S3 error document; empty when the body has none (a HEAD's
// answer has no body: the code is then the HTTP reason, e.g. "NotFound").
struct S3ErrorBody {
  std::string code;
  std::string message;
};
S3ErrorBody ParseErrorBody(absl::string_view body);

// The status for a non-2xx answer to the request described by `what` ("s3://b/k bytes [0, 10)"),
// its message "WHAT: STATUS CODE[: MESSAGE]" (a 403 without a body, a HEAD's, says where to look):
//   404                     NOT_FOUND
//   403                     PERMISSION_DENIED (wrong key, bad signature, denied by policy)
//   401                     UNAUTHENTICATED
//   412                     ABORTED (the object changed)
//   416                     OUT_OF_RANGE
//   408, 429, 500, 502, 503, 504, and 400 RequestTimeout    UNAVAILABLE (retry)
//   other 4xx               INVALID_ARGUMENT
//   other                   UNKNOWN
absl::Status AnswerToStatus(int http_status, absl::string_view body, absl::string_view what);

// Whether the answer is the store asking the client to slow down (503 SlowDown, 429), counted
// apart from other retries.
bool IsThrottle(int http_status, absl::string_view body);

// UNAVAILABLE for a transport failure that another attempt may not meet (refused, reset, cut
// short, timed out), FAILED_PRECONDITION for one it will (TLS certificates), naming `endpoint`.
absl::Status TransportToStatus(absl::string_view failure, bool retryable,
                               absl::string_view endpoint, absl::string_view what);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_ERROR_H_
