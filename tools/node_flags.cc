#include "tools/node_flags.h"

#include "absl/strings/str_cat.h"
#include "src/common/env.h"

namespace croupier::cli {

void AddListenFlags(CLI::App* app, ListenFlags* flags, const std::string& what) {
  AddFlag(app, "--port", &flags->port, "P", absl::StrCat(what, "; 0 picks a free one"))
      ->check(CLI::Range(0, 65535));
  AddFlag(app, "--bind", &flags->bind, "ADDR",
          "the address to listen on (0.0.0.0: every interface)");
}

void AddMetricsFlags(CLI::App* app, MetricsFlags* flags, const std::string& served) {
  AddFlag(app, "--metrics-port", &flags->port, "P",
          absl::StrCat("serve ", served, " (0 picks a free port)"))
      ->check(CLI::Range(0, 65535))
      ->default_str("off");
  AddFlag(app, "--metrics-port-file", &flags->port_file, "FILE",
          "write the metrics port chosen to FILE");
}

absl::Status WritePortFile(const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  return Env::Default()->WriteFileAtomically(path, absl::StrCat(port, "\n"));
}

}  // namespace croupier::cli
