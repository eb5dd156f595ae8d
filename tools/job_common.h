// What the `croupier job` subcommands (and status) share: their common flags, the client they make
// from them, the job's name, and how a job's summary and a dispatcher's answer print.
#ifndef CROUPIER_TOOLS_JOB_COMMON_H_
#define CROUPIER_TOOLS_JOB_COMMON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/croupier.pb.h"
#include "src/net/tls_config.h"
#include "src/rpc/dispatcher_client.h"
#include "tools/flags.h"

namespace croupier::cli {

// How a command calls the dispatcher: --auth-token, --timeout-ms (the deadline of each call; its
// default is the holder's) and TLS's. The dispatcher's address is each command's own.
struct CallFlags {
  std::string auth_token;
  int64_t timeout_ms = 30000;
  TlsConfig tls;
};
void AddCallFlags(CLI::App* app, CallFlags* flags);
// A client of the dispatcher at `address`, calling as `flags` say.
std::unique_ptr<rpc::DispatcherClient> DispatcherClientOf(const std::string& address,
                                                          const CallFlags& flags);

// The flags every job subcommand takes: --dispatcher (required) and the CallFlags.
struct ClientFlags {
  std::string dispatcher;
  CallFlags call;
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
