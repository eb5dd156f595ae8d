// croupier plan: prints an epoch's deal, for a record count or for the records of some files.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "croupier/dataset.h"
#include "croupier/plan.h"
#include "src/common/status_macros.h"
#include "tools/commands.h"

namespace croupier::cli {
namespace {

constexpr char kPlanDescription[] =
    R"(Prints an epoch's deal. It shows which records make up each global batch of an epoch and which consumer takes it as
which step, for --records N records or for the records of --files.)";

struct PlanFlags {
  uint64_t records = 0;
  std::string files;
  std::string cache_dir;
  uint32_t batch_size = 0;
  uint32_t consumers = 0;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  std::string shuffle = "global";
  uint32_t block_size = 1024;
  uint32_t window_blocks = 16;
  std::string remainder = "drop";
  uint64_t steps = 4;
  uint64_t show_records = 8;
  bool json = false;
  CLI::Option* records_flag = nullptr;
  CLI::Option* files_flag = nullptr;
};

std::string RecordList(const std::vector<uint64_t>& ids, size_t show) {
  std::vector<uint64_t> head(ids.begin(), ids.begin() + std::min(show, ids.size()));
  std::string s = absl::StrJoin(head, " ");
  if (ids.size() > head.size()) absl::StrAppend(&s, " ...");
  return s;
}

absl::Status Run(const PlanFlags& f) {
  PlanSpec spec;
  std::string source;
  if (f.files_flag->count() > 0) {
    ASSIGN_OR_RETURN(auto files, ExpandFiles(absl::StrSplit(f.files, ',')));
    IndexCache cache(f.cache_dir);
    ASSIGN_OR_RETURN(auto dataset, Dataset::Open(files, cache));
    spec.num_records = dataset->num_records();
    source = absl::StrCat(files.size(), " files, ");
  } else {
    spec.num_records = f.records;
  }
  const uint64_t epoch = f.epoch, steps = f.steps, show = f.show_records;
  spec.seed = f.seed;
  ASSIGN_OR_RETURN(spec.shuffle, ParseShuffleMode(f.shuffle));
  ASSIGN_OR_RETURN(spec.remainder, ParseRemainder(f.remainder));
  spec.batch_size = f.batch_size;
  spec.num_consumers = f.consumers;
  spec.block_size = f.block_size;
  spec.window_blocks = f.window_blocks;
  ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(spec, epoch));

  const uint64_t shown_steps =
      steps == 0 ? plan.steps_per_consumer() : std::min(steps, plan.steps_per_consumer());
  if (f.json) {
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

void Declare(CLI::App* app, PlanFlags* f) {
  const CLI::Validator positive = CLI::Range(uint32_t{1}, UINT32_MAX);
  f->records_flag =
      AddFlag(app, "--records", &f->records, "N", "plan N records (this or --files is required)")
          ->default_str("");
  f->files_flag = AddFlag(app, "--files", &f->files, "GLOB[,GLOB...]",
                          "plan the records of these TFRecord files (this or --records)")
                      ->excludes(f->records_flag);
  AddFlag(app, "--cache-dir", &f->cache_dir, "DIR", "the index cache of --files")
      ->default_str("$CROUPIER_INDEX_DIR, else ~/.cache/croupier/index");
  AddFlag(app, "--batch-size", &f->batch_size, "B", "records per global batch")
      ->required()
      ->check(positive);
  AddFlag(app, "--consumers", &f->consumers, "N", "the number of consumers")
      ->required()
      ->check(positive);
  AddFlag(app, "--seed", &f->seed, "S", "the shuffle's seed");
  AddFlag(app, "--epoch", &f->epoch, "E", "the epoch to print");
  AddFlag(app, "--shuffle", &f->shuffle, "none|global|blocks", "how the records are shuffled");
  AddFlag(app, "--block-size", &f->block_size, "S", "records per block (--shuffle blocks)")
      ->check(positive);
  AddFlag(app, "--window-blocks", &f->window_blocks, "W",
          "blocks shuffled together (--shuffle blocks)")
      ->check(positive);
  AddFlag(app, "--remainder", &f->remainder, "drop|pad",
          "the records that do not fill a last round of batches");
  AddFlag(app, "--steps", &f->steps, "K", "steps shown; 0: all");
  AddFlag(app, "--show-records", &f->show_records, "K", "record ids shown per batch");
  AddSwitch(app, "--json", &f->json, "one JSON object per batch instead of the table");
  // Checked as the flags are parsed (CLI11 runs this inside parse), so reported like any other
  // missing flag; --files and --records together are refused by excludes().
  app->callback([f] {
    if (f->records_flag->count() + f->files_flag->count() == 0) {
      throw CLI::RequiredError("--records or --files");
    }
  });
}

}  // namespace

Subcommand AddPlanCommand(CLI::App& parent) {
  return AddCommand<PlanFlags>(parent, "plan", kPlanDescription, Declare, Run);
}

}  // namespace croupier::cli
