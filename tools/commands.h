// The subcommands of the croupier command. Each takes the arguments after its name and returns
// the process exit code; errors are printed to stderr by the caller.
#ifndef CROUPIER_TOOLS_COMMANDS_H_
#define CROUPIER_TOOLS_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace croupier::cli {

absl::Status InspectCommand(const std::vector<std::string>& args);
absl::Status IndexCommand(const std::vector<std::string>& args);
absl::Status PlanCommand(const std::vector<std::string>& args);
absl::Status SynthCommand(const std::vector<std::string>& args);
absl::Status DispatcherCommand(const std::vector<std::string>& args);
absl::Status ProducerCommand(const std::vector<std::string>& args);
absl::Status JobCommand(const std::vector<std::string>& args);
// The job subcommands after the first word (list, describe, delete); `usage` is job's.
absl::Status JobListCommand(const std::vector<std::string>& args, const char* usage);
absl::Status JobDescribeCommand(const std::vector<std::string>& args, const char* usage);
absl::Status JobDeleteCommand(const std::vector<std::string>& args, const char* usage);
absl::Status StatusCommand(const std::vector<std::string>& args);
absl::Status ConsumeCommand(const std::vector<std::string>& args);

// Expands each argument as a glob (a plain path matches itself) and returns the files, in
// argument order, each glob's matches sorted. NOT_FOUND names a pattern that matched nothing.
absl::StatusOr<std::vector<std::string>> ExpandFiles(const std::vector<std::string>& patterns);

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_COMMANDS_H_
