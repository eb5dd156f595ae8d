// croupier job create|show|list|describe|delete: defines a job on the dispatcher, or shows one;
// list, describe and delete are in job_list_cmd.cc, job_describe_cmd.cc, job_delete_cmd.cc.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/status_macros.h"
#include "src/job/job_json.h"
#include "src/job/job_settings.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/tls_flags.h"

namespace croupier::cli {
namespace {

constexpr char kJobUsage[] = R"(usage:
  croupier job create --dispatcher HOST:PORT --name NAME --files GLOB[,GLOB...]
      --features SPEC --batch-size B [--consumers N] [--seed S] [--epochs E]
      [--shuffle none|global|blocks] [--block-size S] [--window-blocks W]
      [--remainder drop|pad] [--mode dealt|first_come] [--compression none|zstd|lz4]
      [--exist-ok] [--json]
  croupier job show --dispatcher HOST:PORT --name NAME [--json]
  croupier job list --dispatcher HOST:PORT [--json]
  croupier job describe NAME --dispatcher HOST:PORT [--files] [--json]
  croupier job delete NAME --dispatcher HOST:PORT [--force] [--json]

SPEC names each feature and its type, e.g. image:bytes,label:int64,emb:float32[16],ids:int64[*].
A bad spec is refused with the reason: no file matches, a feature absent from the data, a wrong
dtype or count, a setting out of range. --epochs 0 (the default) deals epochs without end.
list shows each job's state (idle, running, done) and counts, without file lists; describe
shows one job, its ranks' positions and (--files) its files. delete frees the job's name and
revokes its tasks from the producers; a job that live consumers read is refused unless --force,
which removes them (their trainers fail with NOT_FOUND).
Common options: --auth-token TOKEN (or CROUPIER_AUTH_TOKEN), --timeout-ms MS (default 30000),
--tls-ca FILE [--tls-cert FILE --tls-key FILE] (TLS, as `croupier dispatcher --help` says).
)";

void PrintJob(const v1::JobInfo& job, bool json) {
  if (json) {
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    std::printf("%s\n", ToUserJson(job, options).c_str());
    return;
  }
  const v1::JobSpec& s = job.spec();
  const SettingsText text = SettingsTextOf(s);
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

}  // namespace

absl::Status JobCommand(const std::vector<std::string>& argv) {
  if (!argv.empty() && (argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help")) {
    std::fputs(kJobUsage, stdout);
    return absl::OkStatus();
  }
  const std::vector<std::string> rest(argv.begin() + (argv.empty() ? 0 : 1), argv.end());
  if (!argv.empty() && argv[0] == "list") return JobListCommand(rest, kJobUsage);
  if (!argv.empty() && argv[0] == "describe") return JobDescribeCommand(rest, kJobUsage);
  if (!argv.empty() && argv[0] == "delete") return JobDeleteCommand(rest, kJobUsage);
  if (argv.empty() || (argv[0] != "create" && argv[0] != "show")) {
    std::fputs(kJobUsage, stderr);
    return absl::InvalidArgumentError(
        "job needs a subcommand: create, show, list, describe or delete");
  }
  ASSIGN_OR_RETURN(
      Args args,
      Args::Parse(std::vector<std::string>(argv.begin() + 1, argv.end()),
                  {"dispatcher", "name", "files", "features", "batch-size", "consumers", "seed",
                   "epochs", "shuffle", "block-size", "window-blocks", "remainder", "mode",
                   "compression", "auth-token", "timeout-ms", "tls-cert", "tls-key", "tls-ca"},
                  {"exist-ok", "json", "help"}));
  if (args.Has("help")) {
    std::fputs(kJobUsage, stdout);
    return absl::OkStatus();
  }
  if (!args.Has("dispatcher") || !args.Has("name")) {
    return absl::InvalidArgumentError(absl::StrCat("--dispatcher and --name are required\n",
                                                   kJobUsage));
  }
  ASSIGN_OR_RETURN(int64_t timeout_ms, args.GetInt("timeout-ms", 30000, 1, 86400000));
  auto client = rpc::DispatcherClient::Create(
      args.Get("dispatcher"), {.auth_token = rpc::ResolveAuthToken(args.Get("auth-token")),
                               .call_timeout = absl::Milliseconds(timeout_ms),
                               .timeout = absl::Milliseconds(timeout_ms),
                               .tls = TlsFromFlags(args)});
  if (argv[0] == "show") {
    v1::GetJobRequest request;
    request.set_name(args.Get("name"));
    ASSIGN_OR_RETURN(auto response, client->GetJob(request));
    PrintJob(response.job(), args.Has("json"));
    return absl::OkStatus();
  }
  v1::CreateJobRequest request;
  v1::JobSpec& spec = *request.mutable_spec();
  spec.set_name(args.Get("name"));
  for (absl::string_view f : absl::StrSplit(args.Get("files"), ',', absl::SkipEmpty())) {
    spec.add_files(std::string(f));
  }
  spec.set_features(args.Get("features"));
  ASSIGN_OR_RETURN(int64_t batch, args.GetInt("batch-size", 0, 0, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t consumers, args.GetInt("consumers", 1, 0, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t block, args.GetInt("block-size", 0, 0, UINT32_MAX));
  ASSIGN_OR_RETURN(int64_t window, args.GetInt("window-blocks", 0, 0, UINT32_MAX));
  ASSIGN_OR_RETURN(uint64_t seed, args.GetUint("seed", 0));
  ASSIGN_OR_RETURN(uint64_t epochs, args.GetUint("epochs", 0));
  spec.set_batch_size(static_cast<uint32_t>(batch));
  spec.set_num_consumers(static_cast<uint32_t>(consumers));
  spec.set_block_size(static_cast<uint32_t>(block));
  spec.set_window_blocks(static_cast<uint32_t>(window));
  spec.set_seed(seed);
  spec.set_num_epochs(epochs);
  // The settings' text is parsed here, at the edge; the dispatcher receives the enums.
  absl::Status settings = SetSettingsFromText({.mode = args.Get("mode"),
                                               .shuffle = args.Get("shuffle"),
                                               .remainder = args.Get("remainder"),
                                               .compression = args.Get("compression")},
                                              spec);
  if (!settings.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", spec.name(), "': ", settings.message()));
  }
  request.set_exist_ok(args.Has("exist-ok"));
  ASSIGN_OR_RETURN(auto response, client->CreateJob(request));
  PrintJob(response.job(), args.Has("json"));
  return absl::OkStatus();
}

}  // namespace croupier::cli
