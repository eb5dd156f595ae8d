// The croupier command: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "src/common/logging.h"
#include "tools/commands.h"

namespace {

constexpr char kUsage[] = R"(croupier: deals the batches of one input pipeline to N trainers.

usage: croupier COMMAND [OPTIONS]

service commands:
  dispatcher --work-dir DIR [--port P]      run the dispatcher (croupier dispatcher --help)
  producer --dispatcher HOST:PORT           run a producer (croupier producer --help)
  job create|show|list|describe|delete --dispatcher HOST:PORT
                                            define, show, list or delete jobs (croupier job)
  status HOST:PORT [--json]                 jobs, producers and consumers
  consume --dispatcher HOST:PORT --job NAME --rank R --world N
                                            take a rank's batches, one JSON line each

data commands:
  inspect FILE [--limit K] [--json]   print the features of each record of a TFRecord file
  index FILES... [--cache-dir DIR]    build the record index of TFRecord files ahead of time
  plan  ...                           print an epoch's deal (croupier plan --help)
  synth --out DIR ...                 write a synthetic TFRecord dataset (croupier synth --help)

  croupier --version    print the version

Every command takes --log-level debug|info|warning|error (default info, or $CROUPIER_LOG_LEVEL):
log events go to stderr, one line each, naming the job, producer or consumer they are about.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("croupier %s\n", CROUPIER_VERSION);
    return 0;
  }
  std::string command = argv[1];
  std::vector<std::string> args;
  // --log-level applies to every command: taken out here, before the command parses the rest.
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    std::string level;
    if (arg == "--log-level" && i + 1 < argc) {
      level = argv[++i];
    } else if (arg.rfind("--log-level=", 0) == 0) {
      level = arg.substr(std::strlen("--log-level="));
    } else {
      args.push_back(std::move(arg));
      continue;
    }
    std::optional<croupier::LogLevel> parsed = croupier::ParseLogLevel(level);
    if (!parsed) {
      std::fprintf(stderr, "croupier: --log-level takes debug, info, warning or error, not '%s'\n",
                   level.c_str());
      return 2;
    }
    croupier::SetMinLogLevel(*parsed);
  }
  absl::Status status;
  if (command == "inspect") {
    status = croupier::cli::InspectCommand(args);
  } else if (command == "index") {
    status = croupier::cli::IndexCommand(args);
  } else if (command == "plan") {
    status = croupier::cli::PlanCommand(args);
  } else if (command == "synth") {
    status = croupier::cli::SynthCommand(args);
  } else if (command == "dispatcher") {
    status = croupier::cli::DispatcherCommand(args);
  } else if (command == "producer") {
    status = croupier::cli::ProducerCommand(args);
  } else if (command == "job") {
    status = croupier::cli::JobCommand(args);
  } else if (command == "status") {
    status = croupier::cli::StatusCommand(args);
  } else if (command == "consume") {
    status = croupier::cli::ConsumeCommand(args);
  } else {
    std::fprintf(stderr, "croupier: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "croupier %s: %s: %s\n", command.c_str(),
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return 0;
}
