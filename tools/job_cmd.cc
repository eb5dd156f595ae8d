// croupier job create|show|list|describe|delete: defines a job on the dispatcher, or shows one;
// list, describe and delete are in job_list_cmd.cc, job_describe_cmd.cc, job_delete_cmd.cc.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/status_macros.h"
#include "src/job/job_settings.h"
#include "src/job/token_job.h"
#include "src/rpc/dispatcher_client.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {
namespace {

constexpr char kJobDescription[] =
    R"(Defines jobs on the dispatcher, shows, lists, describes and deletes them.)";

constexpr char kCreateDescription[] =
    R"(Defines a job. A bad spec is refused with the reason: no file matches, a feature absent from
the data, a wrong dtype or count, a setting out of range. With --tokens, a tokens job: packed
sequences of token documents, global_batch / consumers to each rank a step.)";

constexpr char kShowDescription[] = "Shows a job's settings and size.";

struct CreateFlags {
  ClientFlags client;
  std::string name;
  std::string files;
  std::string features;
  uint32_t batch_size = 0;
  uint32_t consumers = 0;
  uint64_t seed = 0;
  uint64_t epochs = 0;
  std::string shuffle;
  uint32_t block_size = 0;
  uint32_t window_blocks = 0;
  std::string remainder;
  std::string mode;
  std::string compression;
  // A tokens job (docs/protocol.md §7): --tokens makes one.
  std::string tokens;
  uint32_t sequence_length = 0;
  uint32_t global_batch = 0;
  uint64_t steps_per_epoch = 0;
  std::string packing;
  uint32_t packing_window = 0;
  std::string weights;
  int32_t pad_id = 0;
  bool exist_ok = false;
  bool json = false;
};

struct ShowFlags {
  ClientFlags client;
  std::string name;
  bool json = false;
};

void PrintJob(const v1::JobInfo& job, bool json) {
  if (json) {
    PrintJson(job);
    return;
  }
  const v1::JobSpec& s = job.spec();
  const SettingsText text = SettingsTextOf(s);
  if (s.source() == v1::SOURCE_KIND_TOKENS) {
    const v1::TokenSpec& t = s.tokens();
    uint64_t documents = 0, tokens = 0;
    for (const v1::TokenSourceInfo& source : job.token_sources()) {
      documents += source.num_documents();
      tokens += source.num_tokens();
    }
    std::printf(
        "job '%s': tokens, %llu global steps of %u sequences of %u tokens per epoch (%s), %u "
        "sequences per step to each of %u consumers, seed %llu, %s\n  %d sources, %llu "
        "documents, %llu tokens, %.2f%% padding under the first weights: %s\n",
        s.name().c_str(), static_cast<unsigned long long>(t.steps_per_epoch()), t.global_batch(),
        t.sequence_length(), SettingText(v1::Packing_descriptor(), t.packing()).c_str(),
        s.batch_size(), s.num_consumers(), static_cast<unsigned long long>(s.seed()),
        s.num_epochs() ? absl::StrCat(s.num_epochs(), " epochs").c_str() : "unbounded epochs",
        t.sources_size(), static_cast<unsigned long long>(documents),
        static_cast<unsigned long long>(tokens), 100 * TokenPaddingFraction(job),
        absl::StrJoin(t.sources(), ", ").c_str());
    return;
  }
  std::printf(
      "job '%s': %llu records in %d files; batches of %u for %u consumers (%s, shuffle %s, "
      "remainder %s, seed %llu, %s)\n  %llu steps per epoch per consumer, %llu global batches per "
      "epoch, features %s\n",
      s.name().c_str(), static_cast<unsigned long long>(job.num_records()), job.files_size(),
      s.batch_size(), s.num_consumers(), text.mode.c_str(), text.shuffle.c_str(),
      text.remainder.c_str(), static_cast<unsigned long long>(s.seed()),
      s.num_epochs() ? absl::StrCat(s.num_epochs(), " epochs").c_str() : "unbounded epochs",
      static_cast<unsigned long long>(job.steps_per_epoch()),
      static_cast<unsigned long long>(job.batches_per_epoch()), s.features().c_str());
  if (!text.compression.empty() && text.compression != "none") {
    std::printf("  batches compressed with %s on TCP\n", text.compression.c_str());
  }
}

absl::Status RunShow(const ShowFlags& f) {
  auto client = JobClient(f.client);
  v1::GetJobRequest request;
  request.set_name(f.name);
  ASSIGN_OR_RETURN(auto response, client->GetJob(request));
  PrintJob(response.job(), f.json);
  return absl::OkStatus();
}

absl::Status RunCreate(const CreateFlags& f) {
  auto client = JobClient(f.client);
  v1::CreateJobRequest request;
  v1::JobSpec& spec = *request.mutable_spec();
  spec.set_name(f.name);
  for (absl::string_view file : absl::StrSplit(f.files, ',', absl::SkipEmpty())) {
    spec.add_files(std::string(file));
  }
  spec.set_features(f.features);
  spec.set_batch_size(f.batch_size);
  spec.set_num_consumers(f.consumers);
  spec.set_block_size(f.block_size);
  spec.set_window_blocks(f.window_blocks);
  spec.set_seed(f.seed);
  spec.set_num_epochs(f.epochs);
  std::string source;
  if (!f.tokens.empty()) {
    source = "tokens";
    v1::TokenSpec& tokens = *spec.mutable_tokens();
    for (absl::string_view prefix : absl::StrSplit(f.tokens, ',', absl::SkipEmpty())) {
      tokens.add_sources(std::string(prefix));
    }
    tokens.set_sequence_length(f.sequence_length);
    tokens.set_global_batch(f.global_batch);
    tokens.set_steps_per_epoch(f.steps_per_epoch);
    tokens.set_packing_window(f.packing_window);
    tokens.set_pad_id(f.pad_id);
    absl::StatusOr<int> packing = SettingNumber(v1::Packing_descriptor(), f.packing);
    absl::Status weights = SetWeightsFromText(f.weights, tokens);
    if (!packing.ok() || !weights.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job '", spec.name(), "': ", (packing.ok() ? weights : packing.status()).message()));
    }
    tokens.set_packing(static_cast<v1::Packing>(*packing));
  }
  // The settings' text is parsed here, at the edge; the dispatcher receives the enums.
  absl::Status settings = SetSettingsFromText({.source = source,
                                               .mode = f.mode,
                                               .shuffle = f.shuffle,
                                               .remainder = f.remainder,
                                               .compression = f.compression},
                                              spec);
  if (!settings.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.name(), "': ", settings.message()));
  }
  request.set_exist_ok(f.exist_ok);
  ASSIGN_OR_RETURN(auto response, client->CreateJob(request));
  PrintJob(response.job(), f.json);
  return absl::OkStatus();
}

void Declare(CLI::App* app, CreateFlags* f) {
  AddClientFlags(app, &f->client);
  AddFlag(app, "--name", &f->name, "NAME", "the job's name")->required();
  AddFlag(app, "--files", &f->files, "GLOB[,GLOB...]", "the TFRecord files the job reads");
  AddFlag(app, "--features", &f->features, "SPEC",
          "each feature and its type, e.g. image:bytes,label:int64,emb:float32[16],ids:int64[*]");
  AddFlag(app, "--batch-size", &f->batch_size, "B", "records per batch");
  AddFlag(app, "--consumers", &f->consumers, "N", "the number of consumers (ranks)")->required();
  AddFlag(app, "--seed", &f->seed, "S", "the shuffle's seed");
  AddFlag(app, "--epochs", &f->epochs, "E", "the number of epochs; 0: without end");
  AddFlag(app, "--shuffle", &f->shuffle, "none|global|blocks", "how the records are shuffled")
      ->default_str("global");
  AddFlag(app, "--block-size", &f->block_size, "S",
          "records per block (--shuffle blocks); 0: the dispatcher's default");
  AddFlag(app, "--window-blocks", &f->window_blocks, "W",
          "blocks shuffled together (--shuffle blocks); 0: the dispatcher's default");
  AddFlag(app, "--remainder", &f->remainder, "drop|pad",
          "the records that do not fill a last round of batches")
      ->default_str("drop");
  AddFlag(app, "--mode", &f->mode, "dealt|first_come",
          "dealt: equal steps per rank; first_come: a batch to whoever asks first")
      ->default_str("dealt");
  AddFlag(app, "--compression", &f->compression, "none|zstd|lz4", "batches' compression on TCP")
      ->default_str("none");
  AddFlag(app, "--tokens", &f->tokens, "PREFIX[,PREFIX...]",
          "a tokens job of these Megatron-LM indexed datasets (PREFIX.idx, PREFIX.bin), instead "
          "of --files: packed sequences (docs/protocol.md, Token jobs)");
  AddFlag(app, "--sequence-length", &f->sequence_length, "L", "tokens per sequence (--tokens)");
  AddFlag(app, "--global-batch", &f->global_batch, "B",
          "sequences per global step, at any number of consumers (--tokens)");
  AddFlag(app, "--steps-per-epoch", &f->steps_per_epoch, "S", "global steps per epoch (--tokens)");
  AddFlag(app, "--packing", &f->packing, "concat|best_fit", "how documents fill sequences")
      ->default_str("concat");
  AddFlag(app, "--packing-window", &f->packing_window, "W",
          "documents packed together (best_fit); 0: the dispatcher's default");
  AddFlag(app, "--weights", &f->weights, "[STEP:]W1,W2[;...]",
          "the sources' weights, from global step STEP on; default equal");
  AddFlag(app, "--pad-id", &f->pad_id, "ID", "input_ids at padding (--tokens)");
  AddSwitch(app, "--exist-ok", &f->exist_ok, "succeed if the same job exists already");
  AddSwitch(app, "--json", &f->json, "print the job as JSON");
}

void Declare(CLI::App* app, ShowFlags* f) {
  AddClientFlags(app, &f->client);
  AddFlag(app, "--name", &f->name, "NAME", "the job's name")->required();
  AddSwitch(app, "--json", &f->json, "print the job as JSON");
}

}  // namespace

std::vector<Subcommand> AddJobCommands(CLI::App& parent) {
  CLI::App* job = parent.add_subcommand("job", kJobDescription);
  return {{job, nullptr},
          AddCommand<CreateFlags>(*job, "create", kCreateDescription, Declare, RunCreate),
          AddCommand<ShowFlags>(*job, "show", kShowDescription, Declare, RunShow),
          AddJobListCommand(*job),
          AddJobDescribeCommand(*job),
          AddJobDeleteCommand(*job)};
}

}  // namespace croupier::cli
