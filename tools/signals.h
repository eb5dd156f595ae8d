// Prompt, clean shutdown of the long-running commands: SIGINT and SIGTERM are blocked in every
// thread (call BlockTerminationSignals before starting any), and the main thread waits for one.
#ifndef CROUPIER_TOOLS_SIGNALS_H_
#define CROUPIER_TOOLS_SIGNALS_H_

#include <signal.h>

namespace croupier::cli {

// Blocks SIGINT and SIGTERM in the calling thread and in the threads it starts afterwards.
inline void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Waits for SIGINT or SIGTERM and returns which one came.
inline int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_SIGNALS_H_
