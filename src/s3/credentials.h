// Where an S3 client's keys come from: the standard chain every AWS tool follows, so a machine
// set up for the aws command or boto3 works unchanged.
#ifndef CROUPIER_SRC_S3_CREDENTIALS_H_
#define CROUPIER_SRC_S3_CREDENTIALS_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier::s3 {

// Plain value. `source` says where the keys were found, for messages (never the keys).
struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
  std::string source;
};

// Reads an environment variable: nullopt when unset. Injected so tests need not touch the
// process's environment.
using GetEnv = std::function<std::optional<std::string>(absl::string_view name)>;
GetEnv ProcessEnvironment();

// The profile `profile` of a shared credentials file's text (INI: "[name]" sections of
// "key = value" lines; '#' and ';' start comments). NOT_FOUND naming the profile and `file`
// when the profile or its two keys are missing.
absl::StatusOr<Credentials> ParseSharedCredentials(absl::string_view text,
                                                   absl::string_view profile,
                                                   absl::string_view file);

// The chain, first match wins:
//   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   2. the shared credentials file, $AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile
//      $AWS_PROFILE or "default".
// Instance metadata, SSO and assumed roles are not read. FAILED_PRECONDITION saying what was
// looked at when nothing is found; a file that exists but is malformed is reported as it is.
absl::StatusOr<Credentials> ResolveCredentials(const GetEnv& env);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_CREDENTIALS_H_
