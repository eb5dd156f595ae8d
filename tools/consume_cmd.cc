// croupier consume: a consumer on the command line. It takes its batches of some epochs and
// writes one JSON line per batch (epoch, step, content hash, record ids when the job has an `id`
// feature), which is what the multi-process tests compare.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "croupier/consumer.h"
#include "src/common/status_macros.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/tls_flags.h"

namespace croupier::cli {
namespace {

constexpr char kConsumeUsage[] = R"(usage: croupier consume --dispatcher HOST:PORT --job NAME
         --rank R --world N [--epochs E] [--first-epoch E] [--start-step S] [--no-resume]
         [--output FILE] [--prefetch K] [--timeout-ms MS] [--slow-ms MS]
         [--pause-at-step S --pause-seconds T] [--auth-token TOKEN] [--shm auto|on|off] [--quiet]
         [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]

Takes this rank's batches of epochs [first-epoch, first-epoch + epochs) and writes one JSON line
per batch to --output (default stdout, appended to if it exists): {"epoch", "step", "records",
"bytes", "hash", "ids"}. It starts where the dispatcher last heard of this rank (a restarted
consumer carries on), or at step --start-step of --first-epoch (a checkpoint), or with
--no-resume at the start. A progress bar on stderr counts the batches of a dealt job (not with
--quiet). --prefetch is the window in batches (default 0: automatic, 4, and more for batches of
256 KiB or less). --slow-ms sleeps after every batch; --pause-at-step stops reading for a
while (to test backpressure). --shm (default $CROUPIER_SHM, else auto) says whether batches from
producers on this host come through shared memory.
)";

}  // namespace

absl::Status ConsumeCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(
      Args args,
      Args::Parse(argv,
                  {"dispatcher", "job", "rank", "world", "epochs", "first-epoch", "output",
                   "prefetch", "timeout-ms", "slow-ms", "pause-at-step", "pause-seconds",
                   "auth-token", "start-step", "shm", "tls-cert", "tls-key", "tls-ca"},
                  {"help", "no-resume", "quiet"}));
  if (args.Has("help")) {
    std::fputs(kConsumeUsage, stdout);
    std::fputs(kTlsUsage, stdout);
    return absl::OkStatus();
  }
  ConsumerOptions options;
  options.dispatcher = args.Get("dispatcher");
  options.job = args.Get("job");
  ASSIGN_OR_RETURN(int64_t rank, args.GetInt("rank", 0, 0, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t world, args.GetInt("world", 1, 1, UINT32_MAX));
  ASSIGN_OR_RETURN(uint64_t epochs, args.GetUint("epochs", 1));
  ASSIGN_OR_RETURN(uint64_t first_epoch, args.GetUint("first-epoch", 0));
  ASSIGN_OR_RETURN(int64_t prefetch, args.GetInt("prefetch", 0, 0, 1024));
  ASSIGN_OR_RETURN(int64_t timeout_ms, args.GetInt("timeout-ms", 60000, 1, 86400000));
  ASSIGN_OR_RETURN(int64_t slow_ms, args.GetInt("slow-ms", 0, 0, 3600000));
  ASSIGN_OR_RETURN(int64_t pause_at, args.GetInt("pause-at-step", -1, -1, INT64_MAX));
  ASSIGN_OR_RETURN(int64_t pause_s, args.GetInt("pause-seconds", 0, 0, 86400));
  ASSIGN_OR_RETURN(uint64_t start_step, args.GetUint("start-step", 0));
  options.resume = !args.Has("no-resume") && !args.Has("start-step");
  options.rank = static_cast<uint32_t>(rank);
  options.world = static_cast<uint32_t>(world);
  options.prefetch_batches = static_cast<uint32_t>(prefetch);
  options.timeout = absl::Milliseconds(timeout_ms);
  options.auth_token = args.Get("auth-token");
  options.tls_cert_file = args.Get("tls-cert");
  options.tls_key_file = args.Get("tls-key");
  options.tls_ca_file = args.Get("tls-ca");
  options.shm = args.Get("shm");
  FILE* out = stdout;
  if (args.Has("output")) {
    out = std::fopen(args.Get("output").c_str(), "a");
    if (out == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", args.Get("output")));
    }
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
  if (!args.Has("quiet") && to_take > 0) {
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

}  // namespace croupier::cli
