// A progress bar on stderr for long commands. On a terminal it redraws one line in place; when
// stderr is a file or a pipe it prints a plain line at each tenth, so logs stay readable.
#ifndef CROUPIER_TOOLS_PROGRESS_H_
#define CROUPIER_TOOLS_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace croupier::cli {

// Not thread-safe.
class Progress {
 public:
  // What the figures count: bytes (shown in MB and MB/s) or items such as batches (shown as
  // counts and a rate, with the name given as `items`).
  Progress(std::string label, uint64_t total_bytes);
  Progress(std::string label, uint64_t total, std::string items);
  ~Progress();  // ends the line
  void Update(uint64_t done_bytes, const std::string& detail = "");

 private:
  std::string label_;
  uint64_t total_;
  std::string items_;  // empty: bytes
  bool tty_;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_PROGRESS_H_
