// croupier dispatcher: runs the dispatcher until SIGINT or SIGTERM.
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/node/dispatcher_node.h"
#include "src/rpc/grpc_util.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/signals.h"
#include "tools/tls_flags.h"

namespace croupier::cli {
namespace {

constexpr char kDispatcherUsage[] = R"(usage: croupier dispatcher --work-dir DIR [--port P]
         [--bind ADDR] [--auth-token TOKEN] [--producer-timeout-ms MS]
         [--consumer-timeout-ms MS] [--rounds-per-task K] [--port-file FILE]
         [--metrics-port P [--metrics-port-file FILE]]
         [--advice-smoothing-ms MS] [--advice-hold-ms MS] [--job-retention DURATION]
         [--tls-cert FILE --tls-key FILE [--tls-ca FILE]]

Runs the dispatcher: it keeps jobs, epoch plans, producers, consumers and their positions, and is
never on the data path. It listens on 127.0.0.1 unless --bind says otherwise (0.0.0.0: every
interface). --port 0 picks a free port; --port-file writes the port chosen. With --auth-token (or
CROUPIER_AUTH_TOKEN) every call must present the token. --metrics-port serves Prometheus metrics
at http://ADDR:P/metrics (docs/metrics.md) and a live web page at http://ADDR:P/ (0 picks a free
port, which --metrics-port-file writes). A task is N x --rounds-per-task consecutive batches of
a job of N consumers; 0 (the default) chooses per job (docs/operations.md). The recommended
number of producers is smoothed over
--advice-smoothing-ms (default 30000) and changes only after --advice-hold-ms (default 15000)
(docs/operations.md). A job that is done (every epoch delivered) and that no consumer reads is
deleted --job-retention after it became done (e.g. 72h, 30m, 90s; the default, 0, keeps jobs for
ever). Stops cleanly on SIGINT or SIGTERM.
)";

}  // namespace

absl::Status DispatcherCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(Args args, Args::Parse(argv,
                                          {"work-dir", "port", "bind", "auth-token",
                                           "producer-timeout-ms", "consumer-timeout-ms",
                                           "rounds-per-task", "port-file", "metrics-port",
                                           "metrics-port-file", "tls-cert", "tls-key", "tls-ca",
                                           "advice-smoothing-ms", "advice-hold-ms",
                                           "job-retention"},
                                          {"help"}));
  if (args.Has("help")) {
    std::fputs(kDispatcherUsage, stdout);
    std::fputs(kTlsUsage, stdout);
    return absl::OkStatus();
  }
  DispatcherNodeOptions options;
  options.work_dir = args.Get("work-dir");
  if (options.work_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--work-dir is required\n", kDispatcherUsage));
  }
  ASSIGN_OR_RETURN(int64_t port, args.GetInt("port", 5050, 0, 65535));
  ASSIGN_OR_RETURN(int64_t producer_timeout, args.GetInt("producer-timeout-ms", 10000, 100, 86400000));
  ASSIGN_OR_RETURN(int64_t consumer_timeout, args.GetInt("consumer-timeout-ms", 60000, 100, 86400000));
  ASSIGN_OR_RETURN(int64_t rounds, args.GetInt("rounds-per-task", 0, 0, 1 << 20));
  options.port = static_cast<int>(port);
  options.bind_address = args.Get("bind", "127.0.0.1");
  options.auth_token = rpc::ResolveAuthToken(args.Get("auth-token"));
  options.tls = TlsFromFlags(args);
  options.dispatcher.producer_timeout = absl::Milliseconds(producer_timeout);
  options.dispatcher.consumer_timeout = absl::Milliseconds(consumer_timeout);
  options.dispatcher.rounds_per_task = static_cast<uint32_t>(rounds);
  ASSIGN_OR_RETURN(int64_t metrics_port, args.GetInt("metrics-port", -1, 0, 65535));
  options.metrics_port = args.Has("metrics-port") ? static_cast<int>(metrics_port) : -1;
  ASSIGN_OR_RETURN(int64_t smoothing_ms, args.GetInt("advice-smoothing-ms", 30000, 1, 86400000));
  ASSIGN_OR_RETURN(int64_t hold_ms, args.GetInt("advice-hold-ms", 15000, 0, 86400000));
  options.dispatcher.advice.smoothing = absl::Milliseconds(smoothing_ms);
  options.dispatcher.advice.hold = absl::Milliseconds(hold_ms);
  if (const std::string retention = args.Get("job-retention", "0"); retention != "0") {
    absl::Duration d;
    if (!absl::ParseDuration(retention, &d) || d <= absl::ZeroDuration() ||
        d == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job-retention takes a positive duration such as 72h, 30m or 90s (0: "
                       "keep jobs for ever), not '", retention, "'"));
    }
    options.dispatcher.job_retention = d;
  }

  BlockTerminationSignals();
  ASSIGN_OR_RETURN(auto node, DispatcherNode::Start(options));
  if (args.Has("port-file")) {
    RETURN_IF_ERROR(Env::Default()->WriteFileAtomically(args.Get("port-file"),
                                                        absl::StrCat(node->port(), "\n")));
  }
  if (args.Has("metrics-port-file")) {
    RETURN_IF_ERROR(Env::Default()->WriteFileAtomically(
        args.Get("metrics-port-file"), absl::StrCat(node->metrics_port(), "\n")));
  }
  int sig = WaitForTerminationSignal();
  Log(LogLevel::kInfo, "dispatcher", absl::StrCat("signal ", sig, ": shutting down"));
  node->Shutdown();
  return absl::OkStatus();
}

}  // namespace croupier::cli
