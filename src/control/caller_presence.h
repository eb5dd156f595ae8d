// Whether the caller of the control-plane call a thread serves is still there. The gRPC adapter
// opens a scope with the call's own probe (its context: the connection closed, the client
// cancelled); a call answered later, a producer's heartbeat held until there is work, keeps the
// probe and asks it before it gives the caller what would be lost with it: a producer killed while
// it waits for work must not be given the next tasks, which would wait for its timeout.
//
//   {
//     CallerPresence scope([context] { return context->IsCancelled(); });
//     impl->ProducerHeartbeatOrWait(request, done);  // keeps CallerPresence::Current()
//   }
#ifndef CROUPIER_SRC_CONTROL_CALLER_PRESENCE_H_
#define CROUPIER_SRC_CONTROL_CALLER_PRESENCE_H_

#include <functional>
#include <utility>

namespace croupier {

// Not copyable; scopes nest and end in reverse order, on the thread that opened them.
class CallerPresence {
 public:
  // True once the caller is gone. Thread-safe, and callable until the call is answered.
  using GoneProbe = std::function<bool()>;

  explicit CallerPresence(GoneProbe gone) : outer_(std::move(current())) {
    current() = std::move(gone);
  }
  ~CallerPresence() { current() = std::move(outer_); }
  CallerPresence(const CallerPresence&) = delete;
  CallerPresence& operator=(const CallerPresence&) = delete;

  // The innermost scope's probe; outside any (the in-process control plane, whose caller cannot
  // leave in the middle of a call), one that always answers "still there".
  static GoneProbe Current() {
    const GoneProbe& probe = current();
    return probe ? probe : GoneProbe([] { return false; });
  }

 private:
  static GoneProbe& current() {
    thread_local GoneProbe probe;
    return probe;
  }
  GoneProbe outer_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONTROL_CALLER_PRESENCE_H_
