// Comparing auth tokens without a timing side channel.
#ifndef CROUPIER_SRC_NET_TOKEN_H_
#define CROUPIER_SRC_NET_TOKEN_H_

#include "absl/strings/string_view.h"

namespace croupier {

// True when `presented` equals `expected`. The time taken depends only on expected.size(), never
// on where a guess first differs, so that a client cannot find the token byte by byte.
bool TokenMatches(absl::string_view presented, absl::string_view expected);

}  // namespace croupier

#endif  // CROUPIER_SRC_NET_TOKEN_H_
