// The croupier command's parser, on CLI11 (docs/architecture.md says why CLI11 rather than absl
// flags). Each subcommand declares each of its flags once (tools/flags.h), with its help and its
// default, bound to a variable its runner reads; `-h` on any subcommand prints a flag per line with
// its default, required flags are enforced and a missing one is named, an unknown flag is refused.
// CLI11 reports with exceptions: they are caught here, at the edge, and become an exit code and one
// line. The commands themselves return absl::Status.
//
// This header names CLI11's types without including CLI11, whose header costs seconds of compiling
// in every file that includes it (tools/CMakeLists.txt): the command's main file needs only this.
#ifndef CROUPIER_TOOLS_COMMAND_LINE_H_
#define CROUPIER_TOOLS_COMMAND_LINE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace croupier::cli {

// What a subcommand does once its flags are parsed into the variables its runner holds.
using Runner = std::function<absl::Status()>;

// The whole command tree. Not thread-safe; one per process (or per test).
class CommandLine {
 public:
  CommandLine();
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // The outcome of parsing: either text to print and an exit code (help, --version, an error),
  // or the runner of the subcommand named (`command` is its path, e.g. "job create").
  struct Parsed {
    int exit_code = 0;
    std::string out;  // for stdout
    std::string err;  // for stderr
    Runner run;       // set when a subcommand is to run
    std::string command;
  };
  // `args` are the arguments after the program's name.
  Parsed Parse(const std::vector<std::string>& args);

  const CLI::App& root() const { return *root_; }

 private:
  std::unique_ptr<CLI::App> root_;
  std::map<const CLI::App*, Runner> runners_;
  std::string log_level_;
  bool version_ = false;
};

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_COMMAND_LINE_H_
