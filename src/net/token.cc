#include "src/net/token.h"

#include <cstddef>
#include <cstdint>

namespace croupier {

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

}  // namespace croupier
