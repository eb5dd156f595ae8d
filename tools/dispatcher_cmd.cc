// croupier dispatcher: runs the dispatcher until SIGINT or SIGTERM.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/node/dispatcher_node.h"
#include "src/rpc/grpc_util.h"
#include "tools/commands.h"
#include "tools/node_flags.h"
#include "tools/signals.h"

namespace croupier::cli {
namespace {

constexpr char kDispatcherDescription[] =
    R"(Runs the dispatcher. It keeps jobs, epoch plans, producers, consumers and their positions,
and is never on the data path. Stops cleanly on SIGINT or SIGTERM.)";

struct DispatcherFlags {
  std::string work_dir;
  ListenFlags listen{.port = 5050};
  std::string auth_token;
  int64_t heartbeat_interval_ms = 1000;
  int64_t producer_timeout_ms = 10000;
  int64_t consumer_timeout_ms = 60000;
  uint32_t rounds_per_task = 0;
  std::string port_file;
  MetricsFlags metrics;
  int64_t advice_smoothing_ms = 30000;
  int64_t advice_hold_ms = 15000;
  std::string job_retention = "0";
  std::string journal_commit_interval = "5ms";
  TlsConfig tls;
};

absl::Status Run(const DispatcherFlags& f) {
  DispatcherNodeOptions options;
  options.work_dir = f.work_dir;
  options.port = f.listen.port;
  options.bind_address = f.listen.bind;
  options.auth_token = rpc::ResolveAuthToken(f.auth_token);
  options.tls = f.tls;
  // Each client beats at the interval its answers carry; one silent for a timeout is gone, so a
  // timeout shorter than the interval would expire every client between two of its beats.
  if (f.heartbeat_interval_ms > std::min(f.producer_timeout_ms, f.consumer_timeout_ms)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat-interval-ms ", f.heartbeat_interval_ms,
        " is longer than --producer-timeout-ms (", f.producer_timeout_ms,
        ") or --consumer-timeout-ms (", f.consumer_timeout_ms,
        "): a client silent for a timeout is taken for gone; give a timeout of a few intervals"));
  }
  options.dispatcher.heartbeat_interval = absl::Milliseconds(f.heartbeat_interval_ms);
  options.dispatcher.producer_timeout = absl::Milliseconds(f.producer_timeout_ms);
  options.dispatcher.consumer_timeout = absl::Milliseconds(f.consumer_timeout_ms);
  options.dispatcher.rounds_per_task = f.rounds_per_task;
  options.metrics_port = f.metrics.port;
  options.dispatcher.advice.smoothing = absl::Milliseconds(f.advice_smoothing_ms);
  options.dispatcher.advice.hold = absl::Milliseconds(f.advice_hold_ms);
  if (f.job_retention != "0") {
    absl::Duration d;
    if (!absl::ParseDuration(f.job_retention, &d) || d <= absl::ZeroDuration() ||
        d == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job-retention takes a positive duration such as 72h, 30m or 90s (0: "
                       "keep jobs for ever), not '",
                       f.job_retention, "'"));
    }
    options.dispatcher.job_retention = d;
  }

  {
    absl::Duration d;
    if (!absl::ParseDuration(f.journal_commit_interval, &d) || d < absl::ZeroDuration() ||
        d > absl::Seconds(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--journal-commit-interval takes a duration from 0 to 1s such as 5ms or 500us, not '",
          f.journal_commit_interval, "'"));
    }
    options.dispatcher.journal_commit_interval = d;
  }

  BlockTerminationSignals();
  ASSIGN_OR_RETURN(auto node, DispatcherNode::Start(options));
  RETURN_IF_ERROR(WritePortFile(f.port_file, node->port()));
  RETURN_IF_ERROR(WritePortFile(f.metrics.port_file, node->metrics_port()));
  int sig = WaitForTerminationSignal();
  Log(LogLevel::kInfo, "dispatcher", absl::StrCat("signal ", sig, ": shutting down"));
  node->Shutdown();
  return absl::OkStatus();
}

void Declare(CLI::App* app, DispatcherFlags* f) {
  AddFlag(app, "--work-dir", &f->work_dir, "DIR",
          "the folder of the dispatcher's journal and snapshots")
      ->required();
  AddListenFlags(app, &f->listen, "the gRPC port");
  AddFlag(app, "--port-file", &f->port_file, "FILE", "write the port chosen to FILE");
  AddAuthTokenFlag(app, &f->auth_token);
  AddMillisFlag(app, "--heartbeat-interval-ms", &f->heartbeat_interval_ms, 100,
                "every producer and consumer beats this often (its answers say so); a rank is "
                "taken over after 3 intervals without one. Longer for many clients: one dispatcher "
                "core answers about 8,000 heartbeats a second (docs/operations.md)");
  AddMillisFlag(app, "--producer-timeout-ms", &f->producer_timeout_ms, 100,
                "a producer silent this long is gone; its tasks go to others");
  AddMillisFlag(app, "--consumer-timeout-ms", &f->consumer_timeout_ms, 100,
                "a consumer silent this long is gone; its rank is free");
  AddFlag(app, "--rounds-per-task", &f->rounds_per_task, "K",
          "a task is N x K consecutive batches of a job of N consumers; 0 chooses per job")
      ->check(CLI::Range(0, 1 << 20));
  AddMetricsFlags(app, &f->metrics, "Prometheus metrics at /metrics and a live page at /");
  AddMillisFlag(app, "--advice-smoothing-ms", &f->advice_smoothing_ms, 1,
                "the demand and capacity behind a fall of the recommended producers are smoothed "
                "over this long");
  AddMillisFlag(app, "--advice-hold-ms", &f->advice_hold_ms, 0,
                "fewer producers are recommended only after this long (a rise waits 2 s)");
  AddFlag(app, "--job-retention", &f->job_retention, "DURATION",
          "delete a done job no consumer reads this long after it became done (72h, 30m, 90s; "
          "0 keeps jobs for ever)");
  AddFlag(app, "--journal-commit-interval", &f->journal_commit_interval, "DURATION",
          "heartbeats answered within this long share one fdatasync of the journal (at most one "
          "sync per interval; each answer waits up to this much longer; 0 syncs at once)");
  AddTlsFlags(app, &f->tls, /*server=*/true);
}

}  // namespace

Subcommand AddDispatcherCommand(CLI::App& parent) {
  return AddCommand<DispatcherFlags>(parent, "dispatcher", kDispatcherDescription, Declare, Run);
}

}  // namespace croupier::cli
