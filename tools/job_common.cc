#include "tools/job_common.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/status_macros.h"
#include "src/job/job_json.h"
#include "src/job/job_settings.h"
#include "src/rpc/grpc_util.h"

namespace croupier::cli {

void AddCallFlags(CLI::App* app, CallFlags* flags) {
  AddAuthTokenFlag(app, &flags->auth_token);
  AddMillisFlag(app, "--timeout-ms", &flags->timeout_ms, 1, "the deadline of each call");
  AddTlsFlags(app, &flags->tls, /*server=*/false);
}

std::unique_ptr<rpc::DispatcherClient> DispatcherClientOf(const std::string& address,
                                                          const CallFlags& flags) {
  return rpc::DispatcherClient::Create(address,
                                       {.auth_token = rpc::ResolveAuthToken(flags.auth_token),
                                        .call_timeout = absl::Milliseconds(flags.timeout_ms),
                                        .timeout = absl::Milliseconds(flags.timeout_ms),
                                        .tls = flags.tls});
}

void AddClientFlags(CLI::App* app, ClientFlags* flags) {
  AddDispatcherFlag(app, &flags->dispatcher);
  AddCallFlags(app, &flags->call);
}

std::unique_ptr<rpc::DispatcherClient> JobClient(const ClientFlags& flags) {
  return DispatcherClientOf(flags.dispatcher, flags.call);
}

void AddNameFlags(CLI::App* app, NameFlags* flags) {
  CLI::Option* positional =
      app->add_option("name", flags->positional, "the job's name (or --name)")->option_text("NAME");
  AddFlag(app, "--name", &flags->flag, "NAME", "the job's name (or NAME)")->excludes(positional);
  // Checked while parsing (CLI11 runs this inside parse), so reported like a missing flag.
  app->callback([flags] {
    if (flags->positional.empty() && flags->flag.empty()) {
      throw CLI::RequiredError("the job's name (NAME or --name NAME)");
    }
  });
}

absl::StatusOr<std::string> JobName(const NameFlags& flags) {
  if (flags.positional.empty() == flags.flag.empty()) {
    return absl::InvalidArgumentError("expected one job name (NAME or --name NAME)");
  }
  return flags.flag.empty() ? flags.positional : flags.flag;
}

std::string SummaryLine(const v1::JobSummary& job) {
  std::string line =
      absl::StrCat("job '", job.name(), "': ", JobStateName(job.state()), ", ",
                   SettingText(v1::SourceKind_descriptor(), job.source()), " ",
                   SettingText(v1::DealMode_descriptor(), job.mode()), ", ", job.consumers(), "/",
                   job.num_consumers(), " consumers, ",
                   job.num_epochs() ? absl::StrCat(job.num_epochs(), " epochs") : "unbounded",
                   " of ", job.steps_per_epoch(), " steps, ",
                   job.source() == v1::SOURCE_KIND_TOKENS
                       ? absl::StrFormat("%d sequences, %.2f%% padding", job.num_records(),
                                         100 * job.padding_fraction())
                       : absl::StrCat(job.num_records(), " records in ", job.num_files(),
                                      " files"),
                   "; ", job.batches_finished(), " batches finished, ", job.tasks_outstanding(),
                   " tasks outstanding");
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
