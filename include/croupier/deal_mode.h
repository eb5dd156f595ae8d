// How a job deals its batches to its consumers (JobSpec.mode, proto/croupier.proto).
#ifndef CROUPIER_INCLUDE_CROUPIER_DEAL_MODE_H_
#define CROUPIER_INCLUDE_CROUPIER_DEAL_MODE_H_

#include "absl/strings/string_view.h"

namespace croupier {

enum class DealMode {
  kDealt,      // global batch g to rank g mod N as its step g div N: deterministic, equal steps
  kFirstCome,  // any consumer takes the next ready batch
};

// "dealt", "first_come": the names of the command line and the Python API.
absl::string_view DealModeName(DealMode mode);

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_DEAL_MODE_H_
