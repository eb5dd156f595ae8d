// What the `croupier job` subcommands share: their common flags, the client they make from them,
// the job's name, and how a job's summary reads.
#ifndef CROUPIER_TOOLS_JOB_COMMON_H_
#define CROUPIER_TOOLS_JOB_COMMON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/croupier.pb.h"
#include "src/net/tls_config.h"
#include "src/rpc/dispatcher_client.h"
#include "tools/command_line.h"

namespace croupier::cli {

// The flags every job subcommand takes: --dispatcher (required), --auth-token, --timeout-ms and
// TLS's.
struct ClientFlags {
  std::string dispatcher;
  std::string auth_token;
  int64_t timeout_ms = 30000;
  TlsConfig tls;
};
void AddClientFlags(CLI::App* app, ClientFlags* flags);
// A client of --dispatcher.
std::unique_ptr<rpc::DispatcherClient> JobClient(const ClientFlags& flags);

// The job's name as NAME or --name NAME: both declared on `app`, which requires one of them
// (its parse callback).
struct NameFlags {
  std::string positional;
  std::string flag;
};
void AddNameFlags(CLI::App* app, NameFlags* flags);
// The one name given (INVALID_ARGUMENT for none, or both).
absl::StatusOr<std::string> JobName(const NameFlags& flags);

// One line: "job 'train': done, tfrecord dealt, 2/4 consumers, 3 epochs, ...".
std::string SummaryLine(const v1::JobSummary& job);
// The message as JSON, every field, the settings and states by their names.
void PrintJson(const google::protobuf::Message& message);

// job's subcommands in their files (job_cmd.cc has create and show).
Subcommand AddJobListCommand(CLI::App& job);
Subcommand AddJobDescribeCommand(CLI::App& job);
Subcommand AddJobDeleteCommand(CLI::App& job);

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_JOB_COMMON_H_
