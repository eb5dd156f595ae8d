#include "src/s3/s3_options.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier::s3 {
namespace {

absl::Status ReadSeconds(const GetEnv& env, absl::string_view name, absl::Duration& out) {
  std::optional<std::string> v = env(name);
  if (!v || v->empty()) return absl::OkStatus();
  double seconds = 0;
  if (!absl::SimpleAtod(*v, &seconds) || seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", *v, "' is not a positive number of seconds"));
  }
  out = absl::Seconds(seconds);
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadCount(const GetEnv& env, absl::string_view name, T min, T& out) {
  std::optional<std::string> v = env(name);
  if (!v || v->empty()) return absl::OkStatus();
  T n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", *v, "' is not a whole number of at least ", min));
  }
  out = n;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<S3Options> S3OptionsFromEnvironment(const GetEnv& env) {
  S3Options o;
  o.endpoint = env("AWS_ENDPOINT_URL_S3").value_or("");
  if (o.endpoint.empty()) o.endpoint = env("AWS_ENDPOINT_URL").value_or("");
  while (absl::EndsWith(o.endpoint, "/")) o.endpoint.pop_back();
  if (!o.endpoint.empty() && !absl::StartsWith(o.endpoint, "http://") &&
      !absl::StartsWith(o.endpoint, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the S3 endpoint '", o.endpoint,
                     "' (AWS_ENDPOINT_URL) must start with http:// or https://"));
  }
  std::string region = env("AWS_REGION").value_or("");
  if (region.empty()) region = env("AWS_DEFAULT_REGION").value_or("");
  if (!region.empty()) o.region = region;
  const std::string addressing = env("CROUPIER_S3_ADDRESSING").value_or("");
  if (addressing == "path") {
    o.path_style = true;
  } else if (addressing == "virtual") {
    o.path_style = false;
  } else if (addressing.empty()) {
    o.path_style = !o.endpoint.empty();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("CROUPIER_S3_ADDRESSING='", addressing, "' is neither 'path' nor 'virtual'"));
  }
  if (std::optional<std::string> v = env("CROUPIER_S3_MAX_ATTEMPTS"); v && !v->empty()) {
    if (!absl::SimpleAtoi(*v, &o.max_attempts) || o.max_attempts < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("CROUPIER_S3_MAX_ATTEMPTS='", *v, "' is not a count of at least 1"));
    }
  }
  RETURN_IF_ERROR(ReadSeconds(env, "CROUPIER_S3_READ_TIMEOUT_SECONDS", o.read_timeout));
  RETURN_IF_ERROR(ReadSeconds(env, "CROUPIER_S3_CONNECT_TIMEOUT_SECONDS", o.connect_timeout));
  RETURN_IF_ERROR(ReadCount(env, "CROUPIER_S3_MAX_IN_FLIGHT", 1, o.max_in_flight));
  RETURN_IF_ERROR(ReadCount<uint64_t>(env, "CROUPIER_S3_MERGE_GAP_BYTES", 0, o.merge_gap_bytes));
  RETURN_IF_ERROR(
      ReadCount<uint64_t>(env, "CROUPIER_S3_MAX_REQUEST_BYTES", 1, o.max_request_bytes));
  o.index_prefix = env("CROUPIER_S3_INDEX_PREFIX").value_or("");
  while (absl::EndsWith(o.index_prefix, "/")) o.index_prefix.pop_back();
  if (!o.index_prefix.empty() && o.index_prefix != "off" &&
      !absl::StartsWith(o.index_prefix, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat("CROUPIER_S3_INDEX_PREFIX='", o.index_prefix,
                                                   "' is neither s3://BUCKET[/PREFIX] nor off"));
  }
  o.ca_bundle = env("AWS_CA_BUNDLE").value_or("");
  ASSIGN_OR_RETURN(o.credentials, ResolveCredentials(env));
  return o;
}

absl::StatusOr<uint64_t> SharedReadBytesFromEnvironment(const GetEnv& env) {
  uint64_t bytes = kDefaultSharedReadBytes;
  RETURN_IF_ERROR(ReadCount<uint64_t>(env, "CROUPIER_S3_SHARED_READ_BYTES", 0, bytes));
  return bytes;
}

}  // namespace croupier::s3
