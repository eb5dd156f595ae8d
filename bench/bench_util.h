// Helpers shared by the benchmark programs in bench/.
//
// A benchmark measures a figure and a baseline in the same run, because this machine is noisy,
// and reports their ratio. Each result is one JSON line on stdout:
//   {"bench": "...", "case": "...", "unit": "MB/s", "value": V, "baseline": "...",
//    "baseline_value": B, "ratio": V/B, "goal": ">= 0.7", "met": true}
// bench/run.py reads these lines and prints the table.
#ifndef CROUPIER_BENCH_BENCH_UTIL_H_
#define CROUPIER_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <cstdio>
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

}  // namespace croupier::bench

#endif  // CROUPIER_BENCH_BENCH_UTIL_H_
