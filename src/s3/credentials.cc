#include "src/s3/credentials.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/common/env.h"

namespace croupier::s3 {

GetEnv ProcessEnvironment() {
  return [](absl::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<Credentials> ParseSharedCredentials(absl::string_view text,
                                                   absl::string_view profile,
                                                   absl::string_view file) {
  Credentials out;
  bool in_profile = false, seen = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in_profile = absl::StripAsciiWhitespace(line.substr(1, line.size() - 2)) == profile;
      seen |= in_profile;
      continue;
    }
    if (!in_profile) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (key == "aws_access_key_id") out.access_key_id = value;
    if (key == "aws_secret_access_key") out.secret_access_key = value;
    if (key == "aws_session_token") out.session_token = value;
  }
  if (!seen) {
    return absl::NotFoundError(absl::StrCat("no profile [", profile, "] in ", file));
  }
  if (out.access_key_id.empty() || out.secret_access_key.empty()) {
    return absl::NotFoundError(absl::StrCat("profile [", profile, "] in ", file,
                                            " lacks aws_access_key_id or aws_secret_access_key"));
  }
  out.source = absl::StrCat(file, " [", profile, "]");
  return out;
}

absl::StatusOr<Credentials> ResolveCredentials(const GetEnv& env) {
  auto get = [&](absl::string_view name) { return env(name).value_or(""); };
  if (!get("AWS_ACCESS_KEY_ID").empty() && !get("AWS_SECRET_ACCESS_KEY").empty()) {
    return Credentials{get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"),
                       get("AWS_SESSION_TOKEN"), "the environment (AWS_ACCESS_KEY_ID)"};
  }
  std::string file = get("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) file = absl::StrCat(get("HOME"), "/.aws/credentials");
  const std::string profile = get("AWS_PROFILE").empty() ? "default" : get("AWS_PROFILE");
  absl::StatusOr<std::string> text = ReadFileToString(*Env::Default(), file);
  if (!text.ok()) {
    if (!absl::IsNotFound(text.status())) return text.status();
    return absl::FailedPreconditionError(absl::StrCat(
        "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set and ", file,
        " does not exist"));
  }
  absl::StatusOr<Credentials> found = ParseSharedCredentials(*text, profile, file);
  if (!found.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no S3 credentials: AWS_ACCESS_KEY_ID is not set and ", found.status().message()));
  }
  return found;
}

}  // namespace croupier::s3
