#include "src/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace croupier::s3 {
namespace {

std::string Hmac(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

// Header values are signed trimmed, with inner runs of spaces made one.
std::string CanonicalHeaderValue(absl::string_view v) {
  std::string out;
  bool space = false;
  for (char c : absl::StripAsciiWhitespace(v)) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

std::map<std::string, std::string> LowerHeaders(const std::map<std::string, std::string>& h) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : h)
    out[absl::AsciiStrToLower(name)] = CanonicalHeaderValue(value);
  return out;
}

std::string SignedHeaderList(const std::map<std::string, std::string>& lower) {
  std::vector<std::string> names;
  for (const auto& [name, value] : lower) names.push_back(name);
  return absl::StrJoin(names, ";");
}

std::string Scope(const SigningInput& in, absl::string_view amz_date) {
  return absl::StrCat(amz_date.substr(0, 8), "/", in.region, "/", in.service, "/aws4_request");
}

}  // namespace

std::string UriEncode(absl::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (c == '/' && keep_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%",
                      absl::AsciiStrToUpper(absl::BytesToHexString(
                          absl::string_view(reinterpret_cast<char*>(&c), 1))));
    }
  }
  return out;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<char*>(digest), SHA256_DIGEST_LENGTH));
}

std::string AmzDate(absl::Time t) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", t, absl::UTCTimeZone());
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [k, v] : query) encoded.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(encoded.begin(), encoded.end());
  std::vector<std::string> parts;
  for (const auto& [k, v] : encoded) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrJoin(parts, "&");
}

std::string CanonicalRequest(const SigningInput& in) {
  const auto lower = LowerHeaders(in.headers);
  std::string headers;
  for (const auto& [name, value] : lower) absl::StrAppend(&headers, name, ":", value, "\n");
  return absl::StrCat(in.method, "\n", in.canonical_uri, "\n", CanonicalQuery(in.query), "\n",
                      headers, "\n", SignedHeaderList(lower), "\n", in.payload_sha256);
}

std::string StringToSign(const SigningInput& in, absl::string_view amz_date) {
  return absl::StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", Scope(in, amz_date), "\n",
                      Sha256Hex(CanonicalRequest(in)));
}

std::string Signature(const SigningInput& in, absl::string_view amz_date) {
  std::string key = Hmac(absl::StrCat("AWS4", in.secret_access_key), amz_date.substr(0, 8));
  key = Hmac(key, in.region);
  key = Hmac(key, in.service);
  key = Hmac(key, "aws4_request");
  return absl::BytesToHexString(Hmac(key, StringToSign(in, amz_date)));
}

std::string AuthorizationHeader(const SigningInput& in) {
  std::string amz_date;
  for (const auto& [name, value] : in.headers) {
    if (absl::AsciiStrToLower(name) == "x-amz-date") amz_date = value;
  }
  return absl::StrCat("AWS4-HMAC-SHA256 Credential=", in.access_key_id, "/", Scope(in, amz_date),
                      ", SignedHeaders=", SignedHeaderList(LowerHeaders(in.headers)),
                      ", Signature=", Signature(in, amz_date));
}

}  // namespace croupier::s3
