// A caller's own deadline for the control-plane calls it makes. A ControlPlane implementation
// retries UNAVAILABLE until its own timeout (a dispatcher that restarts is waited for); a caller
// with a deadline of its own (a consumer's Next(), its registration) must not wait past it
// because one call began just before it. Calls made on a thread inside a CallDeadline scope end
// by that deadline at the latest (the nearest, when scopes nest), with DEADLINE_EXCEEDED giving
// the last error seen, e.g. the dispatcher's journal that cannot be written.
//
//   {
//     CallDeadline scope(deadline);
//     auto answer = control->Locate(request);  // gives up at `deadline`
//   }
#ifndef CROUPIER_SRC_CONTROL_CALL_DEADLINE_H_
#define CROUPIER_SRC_CONTROL_CALL_DEADLINE_H_

#include <algorithm>

#include "absl/time/time.h"

namespace croupier {

// Not copyable; scopes nest and end in reverse order, on the thread that opened them.
class CallDeadline {
 public:
  explicit CallDeadline(absl::Time deadline) : outer_(current()) {
    current() = std::min(outer_, deadline);
  }
  ~CallDeadline() { current() = outer_; }
  CallDeadline(const CallDeadline&) = delete;
  CallDeadline& operator=(const CallDeadline&) = delete;

  // The nearest deadline of this thread's open scopes; InfiniteFuture outside any.
  static absl::Time Current() { return current(); }

 private:
  static absl::Time& current() {
    thread_local absl::Time deadline = absl::InfiniteFuture();
    return deadline;
  }
  const absl::Time outer_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONTROL_CALL_DEADLINE_H_
