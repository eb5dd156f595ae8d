// What a subcommand's file declares its flags with, on CLI11: one flag, once, with its help and its
// default, bound to a variable the subcommand's runner reads (command_line.h parses them).
#ifndef CROUPIER_TOOLS_FLAGS_H_
#define CROUPIER_TOOLS_FLAGS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "src/net/tls_config.h"
#include "tools/command_line.h"

namespace croupier::cli {

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

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_FLAGS_H_
