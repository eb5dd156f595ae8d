// A node's descriptors: every process that serves (the dispatcher, a producer) takes the whole
// hard limit of open descriptors at start, rather than the common soft default of 1,024.
#ifndef CROUPIER_SRC_NODE_OPEN_FILES_H_
#define CROUPIER_SRC_NODE_OPEN_FILES_H_

#include "absl/strings/string_view.h"

namespace croupier {

// net::RaiseOpenFileLimit, and a log line under `component` saying what the limit is now (INFO),
// or why it could not be raised (WARNING). Never fails: a process keeps the limit it has.
void TakeTheHardDescriptorLimit(absl::string_view component);

}  // namespace croupier

#endif  // CROUPIER_SRC_NODE_OPEN_FILES_H_
