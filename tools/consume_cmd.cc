// croupier consume: a consumer on the command line. It takes its batches of some epochs and
// writes one JSON line per batch (epoch, step, content hash, record ids when the job has an `id`
// feature), which is what the multi-process tests compare.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "croupier/consumer.h"
#include "src/common/status_macros.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace croupier::cli {
namespace {

constexpr char kConsumeDescription[] =
    R"(Takes a rank's batches, one JSON line each. It takes this rank's batches of epochs [first-epoch, first-epoch + epochs) and writes one JSON
line per batch to --output: {"epoch", "step", "records", "bytes", "hash", "ids"}. It starts where
the dispatcher last heard of this rank (a restarted consumer carries on), or at step --start-step
of --first-epoch (a checkpoint), or with --no-resume at the start. A progress bar on stderr
counts the batches of a dealt job.)";

struct ConsumeFlags {
  std::string dispatcher;
  std::string job;
  uint32_t rank = 0;
  uint32_t world = 1;
  uint64_t epochs = 1;
  uint64_t first_epoch = 0;
  uint64_t start_step = 0;
  bool no_resume = false;
  std::string output;
  uint32_t prefetch = 0;
  int64_t timeout_ms = 60000;
  int64_t slow_ms = 0;
  int64_t pause_at = -1;
  int64_t pause_s = 0;
  std::string auth_token;
  std::string shm;
  bool quiet = false;
  TlsConfig tls;
  CLI::Option* start_step_flag = nullptr;
};

absl::Status Run(const ConsumeFlags& f) {
  ConsumerOptions options;
  options.dispatcher = f.dispatcher;
  options.job = f.job;
  const uint32_t rank = f.rank, world = f.world;
  const uint64_t epochs = f.epochs, first_epoch = f.first_epoch, start_step = f.start_step;
  const int64_t slow_ms = f.slow_ms, pause_at = f.pause_at, pause_s = f.pause_s;
  options.resume = !f.no_resume && f.start_step_flag->count() == 0;
  options.rank = rank;
  options.world = world;
  options.prefetch_batches = f.prefetch;
  options.timeout = absl::Milliseconds(f.timeout_ms);
  options.auth_token = f.auth_token;
  options.tls_cert_file = f.tls.cert_file;
  options.tls_key_file = f.tls.key_file;
  options.tls_ca_file = f.tls.ca_file;
  options.shm = f.shm;
  FILE* out = stdout;
  if (!f.output.empty()) {
    out = std::fopen(f.output.c_str(), "a");
    if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot write ", f.output));
  }
  ASSIGN_OR_RETURN(auto consumer, Consumer::Connect(options));
  // Where to start: the checkpoint given, else where the dispatcher registered this rank.
  ConsumerPosition start{first_epoch, start_step};
  if (options.resume) start = consumer->registered_position();
  // The batches to take, when the job says how many steps an epoch has (dealt jobs).
  const uint64_t steps_per_epoch = consumer->job().steps_per_epoch;
  uint64_t to_take = 0;
  for (uint64_t epoch = std::max(first_epoch, start.epoch); epoch < first_epoch + epochs; ++epoch) {
    if (consumer->job().num_epochs != 0 && epoch >= consumer->job().num_epochs) break;
    const uint64_t from = epoch == start.epoch ? start.step : 0;
    to_take += steps_per_epoch > from ? steps_per_epoch - from : 0;
  }
  std::optional<Progress> progress;
  if (!f.quiet && to_take > 0) {
    progress.emplace(absl::StrCat("rank ", rank, " of job '", options.job, "'"), to_take,
                     "batches");
  }
  uint64_t total = 0;
  for (uint64_t epoch = first_epoch; epoch < first_epoch + epochs; ++epoch) {
    if (epoch < start.epoch) continue;  // done before
    const uint64_t first_step = epoch == start.epoch ? start.step : 0;
    if (consumer->job().num_epochs != 0 && epoch >= consumer->job().num_epochs) break;
    RETURN_IF_ERROR(consumer->StartEpoch(epoch, first_step));
    uint64_t step = first_step;
    while (true) {
      ASSIGN_OR_RETURN(std::optional<Batch> batch, consumer->Next());
      if (!batch.has_value()) break;
      std::string ids;
      if (const ColumnView* id = batch->view().Find("id");
          id != nullptr && id->dtype == DType::kInt64) {
        ids = absl::StrJoin(id->ints(), ",");
      }
      std::fprintf(out,
                   "{\"epoch\": %llu, \"step\": %llu, \"records\": %llu, \"bytes\": %zu, "
                   "\"hash\": \"%016llx\", \"ids\": [%s]}\n",
                   static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(step),
                   static_cast<unsigned long long>(batch->num_records()), batch->bytes().size(),
                   static_cast<unsigned long long>(batch->ContentHash()), ids.c_str());
      std::fflush(out);
      ++step;
      ++total;
      if (progress) progress->Update(total, absl::StrCat("epoch ", epoch, " step ", step - 1));
      if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      if (pause_at >= 0 && step == static_cast<uint64_t>(pause_at) && pause_s > 0) {
        std::this_thread::sleep_for(std::chrono::seconds(pause_s));
      }
    }
  }
  progress.reset();  // ends its line
  consumer->Close();
  if (out != stdout) std::fclose(out);
  std::fprintf(stderr, "consumer rank %lld/%lld of job '%s': %llu batches\n",
               static_cast<long long>(rank), static_cast<long long>(world), options.job.c_str(),
               static_cast<unsigned long long>(total));
  return absl::OkStatus();
}

void Declare(CLI::App* app, ConsumeFlags* f) {
  AddDispatcherFlag(app, &f->dispatcher);
  AddFlag(app, "--job", &f->job, "NAME", "the job to read")->required();
  AddFlag(app, "--rank", &f->rank, "R", "this consumer's rank, from 0 to N - 1")->required();
  AddFlag(app, "--world", &f->world, "N", "the number of consumers of the job")
      ->required()
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  AddFlag(app, "--epochs", &f->epochs, "E", "the number of epochs to take");
  AddFlag(app, "--first-epoch", &f->first_epoch, "E", "the first epoch to take");
  f->start_step_flag = AddFlag(app, "--start-step", &f->start_step, "S",
                               "start at this step of --first-epoch (a checkpoint; no resume)");
  AddSwitch(app, "--no-resume", &f->no_resume,
            "start at the start, not where the dispatcher last heard of this rank");
  AddFlag(app, "--output", &f->output, "FILE", "append the JSON lines to FILE")
      ->default_str("stdout");
  AddFlag(app, "--prefetch", &f->prefetch, "K",
          "the window in batches; 0: automatic (4, more for batches of 256 KiB or less)")
      ->check(CLI::Range(0, 1024));
  AddMillisFlag(app, "--timeout-ms", &f->timeout_ms, 1, "how long one wait may last");
  AddFlag(app, "--slow-ms", &f->slow_ms, "MS", "sleep after every batch (to test backpressure)")
      ->check(CLI::Range(0, 3600000));
  AddFlag(app, "--pause-at-step", &f->pause_at, "S",
          "stop reading for --pause-seconds at this step (to test backpressure)")
      ->check(CLI::Range(int64_t{-1}, INT64_MAX))
      ->default_str("none");
  AddFlag(app, "--pause-seconds", &f->pause_s, "T", "how long --pause-at-step stops reading")
      ->check(CLI::Range(0, 86400));
  AddAuthTokenFlag(app, &f->auth_token);
  AddFlag(app, "--shm", &f->shm, "auto|on|off",
          "whether batches from producers on this host come through shared memory")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_str("$CROUPIER_SHM, else auto");
  AddSwitch(app, "--quiet", &f->quiet, "no progress bar");
  AddTlsFlags(app, &f->tls, /*server=*/false);
}

}  // namespace

Subcommand AddConsumeCommand(CLI::App& parent) {
  return AddCommand<ConsumeFlags>(parent, "consume", kConsumeDescription, Declare, Run);
}

}  // namespace croupier::cli
