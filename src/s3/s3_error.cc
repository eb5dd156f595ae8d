#include "src/s3/s3_error.h"

#include "absl/strings/str_cat.h"
#include "src/s3/xml_scan.h"

namespace croupier::s3 {
namespace {

absl::StatusCode CodeFor(int http_status, absl::string_view s3_code) {
  switch (http_status) {
    case 404:
      return absl::StatusCode::kNotFound;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 412:
      return absl::StatusCode::kAborted;
    case 416:
      return absl::StatusCode::kOutOfRange;
    case 408:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
      return absl::StatusCode::kUnavailable;
    default:
      break;
  }
  if (http_status == 400 && s3_code == "RequestTimeout") return absl::StatusCode::kUnavailable;
  if (http_status >= 400 && http_status < 500) return absl::StatusCode::kInvalidArgument;
  return absl::StatusCode::kUnknown;
}

absl::string_view ReasonCode(int http_status) {
  switch (http_status) {
    case 400:
      return "BadRequest";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 412:
      return "PreconditionFailed";
    case 416:
      return "InvalidRange";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    default:
      return "";
  }
}

}  // namespace

S3ErrorBody ParseErrorBody(absl::string_view body) {
  S3ErrorBody out;
  out.code = XmlText(body, "Code").value_or("");
  out.message = XmlText(body, "Message").value_or("");
  return out;
}

absl::Status AnswerToStatus(int http_status, absl::string_view body, absl::string_view what) {
  S3ErrorBody err = ParseErrorBody(body);
  if (err.code.empty()) err.code = std::string(ReasonCode(http_status));
  std::string message = absl::StrCat(what, ": ", http_status);
  if (!err.code.empty()) absl::StrAppend(&message, " ", err.code);
  if (!err.message.empty()) absl::StrAppend(&message, ": ", err.message);
  if (http_status == 403 && body.empty()) {
    // A HEAD's answer has no body: the store gives no reason, so say where to look.
    absl::StrAppend(&message,
                    ": refused without a reason (the answer has no body); check the access key "
                    "and secret, the region and the bucket's policy");
  }
  return absl::Status(CodeFor(http_status, err.code), message);
}

bool IsThrottle(int http_status, absl::string_view body) {
  if (http_status == 429) return true;
  if (http_status != 503) return false;
  const std::string code = ParseErrorBody(body).code;
  return code == "SlowDown" || code == "Throttling" || code == "RequestLimitExceeded";
}

absl::Status TransportToStatus(absl::string_view failure, bool retryable,
                               absl::string_view endpoint, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", failure, " (endpoint ", endpoint, ")");
  return retryable ? absl::UnavailableError(message) : absl::FailedPreconditionError(message);
}

}  // namespace croupier::s3
