#include "src/net/token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace croupier {
namespace {

void AppendField(absl::string_view field, std::string* out) {
  const uint32_t n = static_cast<uint32_t>(field.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out->append(field.data(), field.size());
}

}  // namespace

bool TokenMatches(absl::string_view presented, absl::string_view expected) {
  // Accumulate every difference instead of returning at the first one; volatile keeps the
  // compiler from turning the loop back into an early exit.
  volatile uint8_t diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const uint8_t p = i < presented.size() ? static_cast<uint8_t>(presented[i]) : 0;
    diff = diff | (p ^ static_cast<uint8_t>(expected[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && ::RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                            static_cast<int>(n)) != 1) {
    return absl::InternalError(absl::StrCat("cannot draw ", n, " random bytes (RAND_bytes)"));
  }
  return out;
}

std::string TokenProof(absl::string_view token, absl::string_view label,
                       absl::string_view client_nonce, absl::string_view server_nonce) {
  std::string message;
  AppendField(label, &message);
  AppendField(client_nonce, &message);
  AppendField(server_nonce, &message);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  ::HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
         reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &mac_len);
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

bool ProofMatches(absl::string_view proof, absl::string_view token, absl::string_view label,
                  absl::string_view client_nonce, absl::string_view server_nonce) {
  if (token.empty()) return false;
  return TokenMatches(proof, TokenProof(token, label, client_nonce, server_nonce));
}

}  // namespace croupier
