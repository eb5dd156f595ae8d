// What the `croupier job` subcommands share: their common flags, the client they make from them,
// the job's name, and how a job's summary reads.
#ifndef CROUPIER_TOOLS_JOB_COMMON_H_
#define CROUPIER_TOOLS_JOB_COMMON_H_

#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "proto/croupier.pb.h"
#include "src/rpc/dispatcher_client.h"
#include "tools/cli_args.h"

namespace croupier::cli {

// The flags every job subcommand takes: --dispatcher, --auth-token, --timeout-ms and TLS's.
std::set<std::string> JobClientFlags();
// A client of --dispatcher (INVALID_ARGUMENT with `usage` when it is missing).
absl::StatusOr<std::unique_ptr<rpc::DispatcherClient>> JobClient(const Args& args,
                                                                 const char* usage);
// The job's name: --name, or the one positional argument (INVALID_ARGUMENT with `usage` for
// none, or both).
absl::StatusOr<std::string> JobName(const Args& args, const char* usage);
// One line: "job 'train': done, tfrecord dealt, 2/4 consumers, 3 epochs, ...".
std::string SummaryLine(const v1::JobSummary& job);
// The message as JSON, every field, the settings and states by their names.
void PrintJson(const google::protobuf::Message& message);

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_JOB_COMMON_H_
