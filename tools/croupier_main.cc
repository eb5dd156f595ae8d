// The croupier command: one binary, one subcommand per job (command_line.h parses them).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/common/mutex_checks.h"
#include "tools/command_line.h"

int main(int argc, char** argv) {
  croupier::ReleaseMutexChecks();
  croupier::cli::CommandLine command_line;
  croupier::cli::CommandLine::Parsed parsed =
      command_line.Parse(std::vector<std::string>(argv + 1, argv + argc));
  std::fputs(parsed.out.c_str(), stdout);
  std::fputs(parsed.err.c_str(), stderr);
  if (!parsed.run) return parsed.exit_code;
  const absl::Status status = parsed.run();
  if (!status.ok()) {
    std::fprintf(stderr, "croupier %s: %s: %s\n", parsed.command.c_str(),
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return 0;
}
