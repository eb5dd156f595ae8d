#include "src/node/open_files.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/net/socket.h"

namespace croupier {

void TakeTheHardDescriptorLimit(absl::string_view component) {
  const absl::StatusOr<net::OpenFileLimit> limit = net::RaiseOpenFileLimit();
  if (!limit.ok()) {
    Log(LogLevel::kWarning, component, limit.status().message());
  } else if (limit->after != limit->before) {
    Log(LogLevel::kInfo, component,
        absl::StrCat("raised the limit of open descriptors from ", limit->before, " to ",
                     limit->after, " (the hard limit)"));
  } else {
    Log(LogLevel::kInfo, component,
        absl::StrCat("the limit of open descriptors is ", limit->after));
  }
}

}  // namespace croupier
