// croupier producer: runs a producer until SIGINT or SIGTERM.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/memory.h"
#include "src/common/status_macros.h"
#include "src/node/producer_node.h"
#include "src/rpc/grpc_util.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/signals.h"
#include "tools/tls_flags.h"

namespace croupier::cli {
namespace {

// Set once ProducerNode::Start has returned; the signal that came after it.
std::atomic<bool> started{false};
std::atomic<int> received{0};

constexpr char kProducerUsage[] = R"(usage: croupier producer --dispatcher HOST:PORT [--port P]
         [--bind ADDR] [--advertise-host HOST] [--threads N] [--buffer-bytes B]
         [--max-tasks K] [--cache-bytes B] [--cache-dir DIR] [--index-cache-dir DIR]
         [--auth-token TOKEN] [--connect-timeout-ms MS] [--shm on|off]
         [--metrics-port P [--metrics-port-file FILE]]
         [--max-connections N] [--max-connections-per-peer N]
         [--tls-cert FILE --tls-key FILE] [--tls-ca FILE]

Runs a producer: it takes work (ranges of global batches) from the dispatcher, reads and decodes
the records on --threads threads (default: the machine's cores), keeps at most --buffer-bytes
(default 256 MiB) of finished batches, and serves them to consumers on its data port (--port 0,
the default, picks a free one). --cache-bytes keeps the records read for later epochs, in memory
or under --cache-dir. Consumers on the same host receive batches through shared memory unless
--shm off (the default is on without TLS and off with TLS: the shared-memory path is not
encrypted). --metrics-port serves this producer's Prometheus metrics at
http://ADDR:P/metrics (docs/metrics.md; 0 picks a free port, which --metrics-port-file writes).
The data port accepts at most --max-connections (default 256) connections, and
--max-connections-per-peer (default 128) from one IP address. Stops cleanly on SIGINT or SIGTERM.
)";

}  // namespace

absl::Status ProducerCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(
      Args args,
      Args::Parse(argv,
                  {"dispatcher", "port", "bind", "advertise-host", "threads", "buffer-bytes",
                   "max-tasks", "cache-bytes", "cache-dir", "index-cache-dir", "auth-token",
                   "connect-timeout-ms", "test-delay-ms", "test-make-delay-ms", "max-connections",
                   "max-connections-per-peer", "tls-cert", "tls-key", "tls-ca", "shm", "metrics-port", "metrics-port-file"},
                  {"help"}));
  if (args.Has("help")) {
    std::fputs(kProducerUsage, stdout);
    std::fputs(kTlsUsage, stdout);
    return absl::OkStatus();
  }
  ProducerNodeOptions options;
  options.dispatcher = args.Get("dispatcher");
  if (options.dispatcher.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--dispatcher is required\n", kProducerUsage));
  }
  ASSIGN_OR_RETURN(int64_t port, args.GetInt("port", 0, 0, 65535));
  ASSIGN_OR_RETURN(int64_t threads, args.GetInt("threads", 0, 0, 1024));
  ASSIGN_OR_RETURN(uint64_t buffer, args.GetUint("buffer-bytes", uint64_t{256} << 20));
  ASSIGN_OR_RETURN(int64_t max_tasks, args.GetInt("max-tasks", 2, 1, 1024));
  ASSIGN_OR_RETURN(uint64_t cache_bytes, args.GetUint("cache-bytes", 0));
  ASSIGN_OR_RETURN(int64_t connect_ms, args.GetInt("connect-timeout-ms", 60000, 1, 86400000));
  ASSIGN_OR_RETURN(int64_t delay_ms, args.GetInt("test-delay-ms", 0, 0, 60000));
  ASSIGN_OR_RETURN(int64_t make_delay_ms, args.GetInt("test-make-delay-ms", 0, 0, 60000));
  options.runner.test_make_delay = absl::Milliseconds(make_delay_ms);
  ASSIGN_OR_RETURN(int64_t metrics_port, args.GetInt("metrics-port", -1, 0, 65535));
  options.metrics_port = args.Has("metrics-port") ? static_cast<int>(metrics_port) : -1;
  if (buffer == 0) return absl::InvalidArgumentError("--buffer-bytes must be at least 1");
  options.port = static_cast<int>(port);
  options.bind_address = args.Get("bind", "127.0.0.1");
  options.advertise_host = args.Get("advertise-host");
  options.auth_token = rpc::ResolveAuthToken(args.Get("auth-token"));
  options.tls = TlsFromFlags(args);
  ASSIGN_OR_RETURN(int64_t max_connections, args.GetInt("max-connections", 256, 1, 65536));
  ASSIGN_OR_RETURN(int64_t per_peer, args.GetInt("max-connections-per-peer", 128, 1, 65536));
  options.max_connections = static_cast<size_t>(max_connections);
  options.max_connections_per_peer = static_cast<size_t>(per_peer);
  options.runner.threads = static_cast<int>(threads);
  options.runner.buffer_bytes = buffer;
  options.runner.max_tasks = static_cast<uint32_t>(max_tasks);
  options.cache_bytes = cache_bytes;
  options.cache_dir = args.Get("cache-dir");
  options.index_cache_dir = args.Get("index-cache-dir");
  options.connect_timeout = absl::Milliseconds(connect_ms);
  options.test_max_delay = absl::Milliseconds(delay_ms);
  if (args.Has("shm")) {
    const std::string shm = args.Get("shm");
    if (shm != "on" && shm != "off") {
      return absl::InvalidArgumentError(absl::StrCat("--shm must be on or off, not '", shm, "'"));
    }
    options.shm = shm == "on";
  }

  BlockTerminationSignals();
  if (absl::Status s = KeepLargeAllocationsMapped(); !s.ok()) {
    Log(LogLevel::kWarning, "producer",
        absl::StrCat("freed batches may stay in the process's memory: ", s.message()));
  }
  // A signal while the producer still waits for the dispatcher (up to --connect-timeout-ms) stops
  // it at once: nothing is held yet, nothing to hand back.
  std::thread watcher([dispatcher = options.dispatcher] {
    const int sig = WaitForTerminationSignal();
    if (!started.load()) {
      Log(LogLevel::kInfo, "producer",
          absl::StrCat("signal ", sig, " while waiting for the dispatcher at ", dispatcher,
                       ": stopping"));
      std::_Exit(0);
    }
    received.store(sig);
  });
  absl::StatusOr<std::unique_ptr<ProducerNode>> started_node = ProducerNode::Start(options);
  started.store(true);
  if (!started_node.ok()) {
    watcher.detach();  // the process ends with the error
    return started_node.status();
  }
  std::unique_ptr<ProducerNode> node = *std::move(started_node);
  if (args.Has("metrics-port-file")) {
    RETURN_IF_ERROR(Env::Default()->WriteFileAtomically(
        args.Get("metrics-port-file"), absl::StrCat(node->metrics_port(), "\n")));
  }
  watcher.join();
  Log(LogLevel::kInfo, "producer",
      absl::StrCat("signal ", received.load(), ": leaving (handing its tasks back) and stopping"));
  node->Leave();
  return absl::OkStatus();
}

}  // namespace croupier::cli
