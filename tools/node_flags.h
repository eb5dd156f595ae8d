// What the long-running commands (dispatcher, producer) share: the port and address they listen
// on, their metrics port, and the files that name a port chosen at start.
#ifndef CROUPIER_TOOLS_NODE_FLAGS_H_
#define CROUPIER_TOOLS_NODE_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "tools/flags.h"

namespace croupier::cli {

// --port P (0 picks a free one) and --bind ADDR; the default port is the holder's.
struct ListenFlags {
  int port = 0;
  std::string bind = "127.0.0.1";
};
// `what` names the port in its help: "the gRPC port".
void AddListenFlags(CLI::App* app, ListenFlags* flags, const std::string& what);

// --metrics-port P (off when not given; 0 picks a free one) and --metrics-port-file FILE.
struct MetricsFlags {
  int port = -1;
  std::string port_file;
};
// `served` says what the port serves: "Prometheus metrics at /metrics".
void AddMetricsFlags(CLI::App* app, MetricsFlags* flags, const std::string& served);

// Writes "PORT\n" to `path` atomically, so that a script waiting for the file reads a whole port;
// does nothing when `path` is empty (the flag not given).
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_NODE_FLAGS_H_
