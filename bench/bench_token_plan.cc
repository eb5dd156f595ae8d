// The token plan (src/plan/token_plan.h) over 10 million documents of long-tailed lengths
// (lognormal, median about 400 tokens), L = 2048: the time to plan a source epoch (concat: its
// lengths in permutation order and their prefixes; best_fit: every window packed once, for the
// count of sequences), the memory that takes, and the time to find one sequence's pieces. The
// goals are the bounds on this machine, 10 s and 200 MB, so each figure's "baseline" is
// its bound; the lookup's baseline is reading the lengths alone once, measured in the same run.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "src/plan/token_plan.h"

namespace croupier::bench {
namespace {

long RssKb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  while (f != nullptr && std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %ld", &kb) == 1) break;
  }
  if (f != nullptr) std::fclose(f);
  return kb;
}

void Run(bool quick) {
  const size_t n = quick ? 1'000'000 : 10'000'000;
  std::vector<uint32_t> lengths(n);
  std::mt19937 rng(1);
  std::lognormal_distribution<double> dist(6.0, 1.0);
  for (auto& v : lengths) v = std::clamp<uint32_t>(static_cast<uint32_t>(dist(rng)), 1, 100000);
  const std::string docs = quick ? "1M" : "10M";
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    TokenPlanSpec spec;
    spec.seed = 1;
    spec.sequence_length = 2048;
    spec.packing = packing;
    spec.global_batch = 512;
    spec.schedule = {{0, {1.0}}};
    auto plan = TokenPlan::Create(spec, {{"web", absl::MakeConstSpan(lengths)}});
    if (!plan.ok()) Die(plan.status().ToString());
    const long before = RssKb();
    const double planned = BestSeconds(1, [&] { (*plan)->Sequence(0); });
    const double mb = (RssKb() - before) / 1024.0;
    const std::string name = std::string(PackingName(packing)) + ", " + docs + " documents";
    Report("token_plan", "plan a source epoch: " + name, "s", planned, "goal (10 s)", 10, 1.0,
           /*higher_is_better=*/false);
    Report("token_plan", "plan memory: " + name, "MB", mb, "goal (200 MB)", 200, 1.0,
           /*higher_is_better=*/false);
    constexpr uint64_t kLookups = 20000;
    uint64_t tokens = 0;
    const double lookups = BestSeconds(1, [&] {
      // A batch's sequences at a time, as a producer asks for them.
      for (uint64_t i = 0; i < kLookups; i += 64) {
        for (const SequencePlan& s : (*plan)->Sequences(i, 64)) tokens += s.tokens();
      }
    });
    // The baseline: summing 2048 tokens' worth of lengths, as reading a sequence's documents'
    // lengths alone would (about 5 documents).
    volatile uint64_t sink = 0;
    const double read = BestSeconds(3, [&] {
      uint64_t sum = 0;
      for (uint64_t i = 0; i < kLookups * 5; ++i) sum += lengths[(i * 2654435761u) % n];
      sink = sum;
    });
    Report("token_plan", "one sequence's pieces, 64 at a time: " + name, "us", lookups / kLookups * 1e6,
           "reading its documents' lengths", read / kLookups * 1e6);
    if (tokens == 0 || sink == 1) Die("no tokens planned");
  }
}

}  // namespace
}  // namespace croupier::bench

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  croupier::bench::Run(quick);
}
