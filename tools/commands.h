// The subcommands of the croupier command, one per file: each declares its flags on a CLI11 app
// under `parent` and returns it with its runner (command_line.h).
#ifndef CROUPIER_TOOLS_COMMANDS_H_
#define CROUPIER_TOOLS_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/flags.h"

namespace croupier::cli {

Subcommand AddInspectCommand(CLI::App& parent);
Subcommand AddIndexCommand(CLI::App& parent);
Subcommand AddPlanCommand(CLI::App& parent);
Subcommand AddSynthCommand(CLI::App& parent);
Subcommand AddDispatcherCommand(CLI::App& parent);
Subcommand AddProducerCommand(CLI::App& parent);
Subcommand AddStatusCommand(CLI::App& parent);
Subcommand AddConsumeCommand(CLI::App& parent);
// `job` and its subcommands create, show, list, describe and delete (job_*_cmd.cc).
std::vector<Subcommand> AddJobCommands(CLI::App& parent);
// The Python package's commands, run by exec, their arguments passed on unparsed
// (produce_cmd.cc): `produce`, the Python map/stream producer, and `tokenize`, text corpora to
// token datasets.
Subcommand AddProduceCommand(CLI::App& parent);
Subcommand AddTokenizeCommand(CLI::App& parent);
bool IsPythonCommand(const std::string& name);
// Runs `python -m croupier COMMAND ARGS...` in place of this process (exec): the interpreter is
// $CROUPIER_PYTHON, else the active virtual environment's ($VIRTUAL_ENV), else python3 beside
// this executable (an installed venv), else python3 on PATH. Returns only on failure:
// FAILED_PRECONDITION when no interpreter can be run or it cannot import croupier.
absl::Status RunPythonCommand(const std::string& command, const std::vector<std::string>& args);

// Expands each argument as a glob (a plain path matches itself) and returns the files, in
// argument order, each glob's matches sorted. NOT_FOUND names a pattern that matched nothing.
absl::StatusOr<std::vector<std::string>> ExpandFiles(const std::vector<std::string>& patterns);

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_COMMANDS_H_
