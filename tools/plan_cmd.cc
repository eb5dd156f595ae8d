// croupier plan: prints an epoch's deal, for a record count or for the records of some files.
#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "croupier/dataset.h"
#include "croupier/plan.h"
#include "src/common/status_macros.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace croupier::cli {
namespace {

constexpr char kPlanUsage[] = R"(usage: croupier plan (--records N | --files GLOB[,GLOB...])
         --batch-size B --consumers N [--seed S] [--epoch E]
         [--shuffle none|global|blocks] [--block-size S] [--window-blocks W]
         [--remainder drop|pad] [--steps K] [--show-records K] [--json]

Prints which records make up each global batch of the epoch and which consumer takes it as
which step. --steps limits the steps shown (default 4; 0 = all); --json prints one JSON object
per batch instead of the table.
)";

std::string RecordList(const std::vector<uint64_t>& ids, size_t show) {
  std::vector<uint64_t> head(ids.begin(), ids.begin() + std::min(show, ids.size()));
  std::string s = absl::StrJoin(head, " ");
  if (ids.size() > head.size()) absl::StrAppend(&s, " ...");
  return s;
}

}  // namespace

absl::Status PlanCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(
      Args args,
      Args::Parse(argv,
                  {"records", "files", "batch-size", "consumers", "seed", "epoch", "shuffle",
                   "block-size", "window-blocks", "remainder", "steps", "show-records",
                   "cache-dir"},
                  {"json", "help"}));
  if (args.Has("help")) {
    std::fputs(kPlanUsage, stdout);
    return absl::OkStatus();
  }
  if (args.Has("records") == args.Has("files") || !args.Has("batch-size") ||
      !args.Has("consumers")) {
    return absl::InvalidArgumentError(absl::StrCat("missing or conflicting options\n", kPlanUsage));
  }
  PlanSpec spec;
  std::string source;
  if (args.Has("files")) {
    ASSIGN_OR_RETURN(auto files, ExpandFiles(absl::StrSplit(args.Get("files"), ',')));
    IndexCache cache(args.Get("cache-dir"));
    ASSIGN_OR_RETURN(auto dataset, Dataset::Open(files, cache));
    spec.num_records = dataset->num_records();
    source = absl::StrCat(files.size(), " files, ");
  } else {
    ASSIGN_OR_RETURN(spec.num_records, args.GetUint("records", 0));
  }
  ASSIGN_OR_RETURN(int64_t batch, args.GetInt("batch-size", 0, 1, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t consumers, args.GetInt("consumers", 0, 1, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t block, args.GetInt("block-size", 1024, 1, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t window, args.GetInt("window-blocks", 16, 1, UINT32_MAX));
  ASSIGN_OR_RETURN(spec.seed, args.GetUint("seed", 0));
  ASSIGN_OR_RETURN(uint64_t epoch, args.GetUint("epoch", 0));
  ASSIGN_OR_RETURN(spec.shuffle, ParseShuffleMode(args.Get("shuffle", "global")));
  ASSIGN_OR_RETURN(spec.remainder, ParseRemainder(args.Get("remainder", "drop")));
  ASSIGN_OR_RETURN(uint64_t steps, args.GetUint("steps", 4));
  ASSIGN_OR_RETURN(uint64_t show, args.GetUint("show-records", 8));
  spec.batch_size = static_cast<uint32_t>(batch);
  spec.num_consumers = static_cast<uint32_t>(consumers);
  spec.block_size = static_cast<uint32_t>(block);
  spec.window_blocks = static_cast<uint32_t>(window);
  ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(spec, epoch));

  const uint64_t shown_steps =
      steps == 0 ? plan.steps_per_consumer() : std::min(steps, plan.steps_per_consumer());
  if (args.Has("json")) {
    for (uint64_t g = 0; g < shown_steps * spec.num_consumers; ++g) {
      std::printf("{\"epoch\": %llu, \"batch\": %llu, \"consumer\": %u, \"step\": %llu, "
                  "\"records\": [%s]}\n",
                  static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(g),
                  plan.ConsumerOf(g), static_cast<unsigned long long>(plan.StepOf(g)),
                  absl::StrJoin(plan.BatchRecords(g), ", ").c_str());
    }
    return absl::OkStatus();
  }
  const uint64_t dealt = plan.num_batches() * spec.batch_size;
  std::printf("epoch %llu of %s%llu records: batch size %u, %u consumers, shuffle %s, remainder "
              "%s, seed %llu\n",
              static_cast<unsigned long long>(epoch), source.c_str(),
              static_cast<unsigned long long>(spec.num_records), spec.batch_size,
              spec.num_consumers, std::string(ShuffleModeName(spec.shuffle)).c_str(),
              std::string(RemainderName(spec.remainder)).c_str(),
              static_cast<unsigned long long>(spec.seed));
  std::printf("%llu global batches, %llu steps per consumer, %llu record slots dealt (%s)\n",
              static_cast<unsigned long long>(plan.num_batches()),
              static_cast<unsigned long long>(plan.steps_per_consumer()),
              static_cast<unsigned long long>(dealt),
              dealt >= spec.num_records
                  ? absl::StrCat(dealt - spec.num_records, " padded").c_str()
                  : absl::StrCat(spec.num_records - dealt, " dropped").c_str());
  for (uint64_t step = 0; step < shown_steps; ++step) {
    for (uint32_t c = 0; c < spec.num_consumers; ++c) {
      uint64_t g = plan.GlobalBatch(c, step);
      std::printf("  step %-4llu consumer %-3u batch %-6llu records %s\n",
                  static_cast<unsigned long long>(step), c, static_cast<unsigned long long>(g),
                  RecordList(plan.BatchRecords(g), show).c_str());
    }
  }
  if (shown_steps < plan.steps_per_consumer()) {
    std::printf("  ... %llu more steps (--steps 0 shows all)\n",
                static_cast<unsigned long long>(plan.steps_per_consumer() - shown_steps));
  }
  return absl::OkStatus();
}

}  // namespace croupier::cli
