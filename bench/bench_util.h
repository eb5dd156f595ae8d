// Helpers shared by the benchmark programs in bench/.
//
// A benchmark measures a figure and a baseline in the same run, because this machine is noisy,
// and reports their ratio. Each result is one JSON line on stdout:
//   {"bench": "...", "case": "...", "unit": "MB/s", "value": V, "baseline": "...",
//    "baseline_value": B, "ratio": V/B, "goal": ">= 0.7", "met": true}
// bench/run.py reads these lines and prints the table.
#ifndef CROUPIER_BENCH_BENCH_UTIL_H_
#define CROUPIER_BENCH_BENCH_UTIL_H_

#include <errno.h>  // program_invocation_short_name
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace croupier::bench {

// Seconds of wall time taken by fn(), the best of `reps` runs (the least disturbed one).
template <typename Fn>
double BestSeconds(int reps, Fn&& fn) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took.count() < best) best = took.count();
  }
  return best;
}

// Prints one result line. `goal_ratio` <= 0 means the figure has no goal. When `higher_is_better`
// is false (a time), the goal is met if ratio <= goal_ratio.
inline void Report(const std::string& bench, const std::string& case_name, const std::string& unit,
                   double value, const std::string& baseline, double baseline_value,
                   double goal_ratio = 0, bool higher_is_better = true) {
  double ratio = baseline_value > 0 ? value / baseline_value : 0;
  std::string goal = "none";
  bool met = true;
  if (goal_ratio > 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s %.2f", higher_is_better ? ">=" : "<=", goal_ratio);
    goal = buf;
    met = higher_is_better ? ratio >= goal_ratio : ratio <= goal_ratio;
  }
  std::printf(
      "{\"bench\": \"%s\", \"case\": \"%s\", \"unit\": \"%s\", \"value\": %.6g, "
      "\"baseline\": \"%s\", \"baseline_value\": %.6g, \"ratio\": %.4f, \"goal\": \"%s\", "
      "\"met\": %s}\n",
      bench.c_str(), case_name.c_str(), unit.c_str(), value, baseline.c_str(), baseline_value,
      ratio, goal.c_str(), met ? "true" : "false");
  std::fflush(stdout);
}

// Ends the benchmark with "PROGRAM: what" on stderr and exit code 1, at once: no destructor or
// exit handler runs, so a failure with threads still running, or in a forked child, cannot hang
// on the way out (Report has flushed every result line already).
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::_Exit(1);
}

// Sends the `n` bytes at `data` on the socket `fd`, or Dies.
inline void SendFully(int fd, const char* data, size_t n) {
  for (size_t sent = 0; sent < n;) {
    const ssize_t k = ::send(fd, data + sent, n - sent, 0);
    if (k <= 0) Die("send on a baseline socket");
    sent += k;
  }
}

// Receives `n` bytes from the socket `fd` into `dst`, or Dies.
inline void RecvFully(int fd, char* dst, size_t n) {
  for (size_t got = 0; got < n;) {
    const ssize_t k = ::recv(fd, dst + got, n - got, 0);
    if (k <= 0) Die("recv on a baseline socket");
    got += k;
  }
}

// A TCP socket listening on a free port of 127.0.0.1, and the address to connect to it at: the
// plain-TCP baselines' server. Dies if it cannot be made.
struct LoopbackListener {
  int fd;
  sockaddr_in addr;
};
inline LoopbackListener ListenOnLoopback(int backlog) {
  LoopbackListener l{::socket(AF_INET, SOCK_STREAM, 0), sockaddr_in{}};
  l.addr.sin_family = AF_INET;
  l.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(l.addr);
  if (::bind(l.fd, reinterpret_cast<sockaddr*>(&l.addr), sizeof(l.addr)) != 0 ||
      ::listen(l.fd, backlog) != 0 ||
      ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&l.addr), &len) != 0) {
    Die("a listener on 127.0.0.1");
  }
  return l;
}

}  // namespace croupier::bench

#endif  // CROUPIER_BENCH_BENCH_UTIL_H_
