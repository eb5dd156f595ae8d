#include "tools/job_common.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/status_macros.h"
#include "src/job/job_json.h"
#include "src/job/job_settings.h"
#include "src/rpc/grpc_util.h"
#include "tools/tls_flags.h"

namespace croupier::cli {

std::set<std::string> JobClientFlags() {
  return {"dispatcher", "auth-token", "timeout-ms", "tls-cert", "tls-key", "tls-ca"};
}

absl::StatusOr<std::unique_ptr<rpc::DispatcherClient>> JobClient(const Args& args,
                                                                 const char* usage) {
  if (!args.Has("dispatcher")) {
    return absl::InvalidArgumentError(absl::StrCat("--dispatcher is required\n", usage));
  }
  ASSIGN_OR_RETURN(int64_t timeout_ms, args.GetInt("timeout-ms", 30000, 1, 86400000));
  return rpc::DispatcherClient::Create(args.Get("dispatcher"),
                                       {.auth_token = rpc::ResolveAuthToken(args.Get("auth-token")),
                                        .call_timeout = absl::Milliseconds(timeout_ms),
                                        .timeout = absl::Milliseconds(timeout_ms),
                                        .tls = TlsFromFlags(args)});
}

absl::StatusOr<std::string> JobName(const Args& args, const char* usage) {
  const size_t given = args.positional().size() + (args.Has("name") ? 1 : 0);
  if (given != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected one job name (NAME or --name NAME)\n", usage));
  }
  return args.Has("name") ? args.Get("name") : args.positional()[0];
}

std::string SummaryLine(const v1::JobSummary& job) {
  std::string line =
      absl::StrCat("job '", job.name(), "': ", JobStateName(job.state()), ", ",
                   SettingText(v1::SourceKind_descriptor(), job.source()), " ",
                   SettingText(v1::DealMode_descriptor(), job.mode()), ", ", job.consumers(), "/",
                   job.num_consumers(), " consumers, ",
                   job.num_epochs() ? absl::StrCat(job.num_epochs(), " epochs") : "unbounded",
                   " of ", job.steps_per_epoch(), " steps, ", job.num_records(), " records in ",
                   job.num_files(), " files; ", job.batches_finished(), " batches finished, ",
                   job.tasks_outstanding(), " tasks outstanding");
  if (job.state() == v1::JOB_STATE_DONE) {
    absl::StrAppend(&line, "; done for ", static_cast<int64_t>(job.seconds_done()), " s");
    if (job.seconds_to_expiry() >= 0) {
      absl::StrAppend(&line, ", deleted in ", static_cast<int64_t>(job.seconds_to_expiry()),
                      " s once no consumer reads it");
    }
  }
  return line;
}

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::printf("%s\n", ToUserJson(message, options).c_str());
}

}  // namespace croupier::cli
