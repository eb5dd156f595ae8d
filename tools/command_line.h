// The croupier command's parser, on CLI11 (docs/architecture.md says why CLI11 rather than absl
// flags). Each subcommand declares each of its flags once, with its help and its default, bound to
// a variable its runner reads; `-h` on any subcommand prints a flag per line with its default,
// required flags are enforced and a missing one is named, an unknown flag is refused. CLI11
// reports with exceptions: they are caught here, at the edge, and become an exit code and one
// line. The commands themselves return absl::Status.
#ifndef CROUPIER_TOOLS_COMMAND_LINE_H_
#define CROUPIER_TOOLS_COMMAND_LINE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "src/net/tls_config.h"

namespace croupier::cli {

// What a subcommand does once its flags are parsed into the variables its runner holds.
using Runner = std::function<absl::Status()>;

// A subcommand as its file declares it: its CLI11 app (owned by the parent) and its runner.
struct Subcommand {
  CLI::App* app;
  Runner run;
};

// A flag with a value, bound to *value; its default is *value's content as declared, shown by
// -h (chain ->default_str("...") to show something else, ->required() to require it).
template <typename T>
CLI::Option* AddFlag(CLI::App* app, const std::string& name, T* value,
                     const std::string& value_name, const std::string& help) {
  return app->add_option(name, *value, help)->option_text(value_name)->capture_default_str();
}
// A flag without a value: *value becomes true when it is given.
CLI::Option* AddSwitch(CLI::App* app, const std::string& name, bool* value,
                       const std::string& help);
// A duration in milliseconds, from `min` to a day (86400000).
CLI::Option* AddMillisFlag(CLI::App* app, const std::string& name, int64_t* value, int64_t min,
                           const std::string& help);
// --dispatcher HOST:PORT, required: the dispatcher a client process calls.
void AddDispatcherFlag(CLI::App* app, std::string* address);
// --tls-cert, --tls-key and --tls-ca, the same on every subcommand that talks to the network;
// `server` words their help for a listening process.
void AddTlsFlags(CLI::App* app, TlsConfig* tls, bool server);
// --auth-token, resolved later with rpc::ResolveAuthToken (CROUPIER_AUTH_TOKEN when not given).
void AddAuthTokenFlag(CLI::App* app, std::string* token);

// Adds the subcommand `name` to `parent`, its flags bound by `declare` to one Flags struct that
// `run` reads once they are parsed. The struct lives as long as the runner, which the command
// tree keeps as long as the parser: `declare` may keep pointers into it (a parse callback).
template <typename Flags>
Subcommand AddCommand(CLI::App& parent, const std::string& name, const std::string& description,
                      void (*declare)(CLI::App*, Flags*), absl::Status (*run)(const Flags&)) {
  auto flags = std::make_shared<Flags>();
  CLI::App* app = parent.add_subcommand(name, description);
  declare(app, flags.get());
  return {app, [flags, run] { return run(*flags); }};
}

// The whole command tree. Not thread-safe; one per process (or per test).
class CommandLine {
 public:
  CommandLine();
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
