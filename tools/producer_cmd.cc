// croupier producer: runs a producer until SIGINT or SIGTERM.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/common/logging.h"
#include "src/common/memory.h"
#include "src/common/status_macros.h"
#include "src/node/producer_node.h"
#include "src/rpc/grpc_util.h"
#include "tools/commands.h"
#include "tools/node_flags.h"
#include "tools/signals.h"

namespace croupier::cli {
namespace {

// Set once ProducerNode::Start has returned; the signal that came after it.
std::atomic<bool> started{false};
std::atomic<int> received{0};

constexpr char kProducerDescription[] =
    R"(Runs a producer of TFRecord and tokens jobs. It takes work (ranges of global batches) from the
dispatcher, reads and decodes the records (or packs the token sequences), keeps finished batches in a bounded buffer and serves them to consumers on
its data port. Consumers on the same host receive batches through shared memory unless
--shm off. On SIGINT or SIGTERM it leaves gracefully: it hands back at once the tasks it has not
made, serves the batches it has made to the ranks that ask for them (up to --drain-timeout-ms),
then hands back what is left and stops; a second signal stops it at once.
This is the TFRecord producer; `croupier produce` runs the Python producer of map and stream
jobs.)";

struct ProducerFlags {
  std::string dispatcher;
  ListenFlags listen;
  std::string advertise_host;
  int threads = 0;
  uint64_t buffer_bytes = uint64_t{256} << 20;
  uint32_t max_tasks = 2;
  uint64_t cache_bytes = 0;
  std::string cache_dir;
  bool cache_keep = false;
  std::string index_cache_dir;
  std::string auth_token;
  int64_t connect_timeout_ms = 60000;
  int64_t drain_timeout_ms = 5000;
  int64_t test_delay_ms = 0;
  int64_t test_make_delay_ms = 0;
  std::string shm;
  MetricsFlags metrics;
  size_t max_connections = 256;
  size_t max_connections_per_peer = 128;
  TlsConfig tls;
};

absl::Status Run(const ProducerFlags& f) {
  ProducerNodeOptions options;
  options.dispatcher = f.dispatcher;
  options.runner.test_make_delay = absl::Milliseconds(f.test_make_delay_ms);
  options.metrics_port = f.metrics.port;
  options.port = f.listen.port;
  options.bind_address = f.listen.bind;
  options.advertise_host = f.advertise_host;
  options.auth_token = rpc::ResolveAuthToken(f.auth_token);
  options.tls = f.tls;
  options.max_connections = f.max_connections;
  options.max_connections_per_peer = f.max_connections_per_peer;
  options.runner.threads = f.threads;
  options.runner.buffer_bytes = f.buffer_bytes;
  options.runner.max_tasks = f.max_tasks;
  options.cache_bytes = f.cache_bytes;
  options.cache_dir = f.cache_dir;
  options.cache_keep = f.cache_keep;
  if (f.cache_keep && (f.cache_dir.empty() || f.cache_bytes == 0)) {
    return absl::InvalidArgumentError(
        "--cache-keep keeps the record cache on disk for the next producer: give --cache-bytes "
        "and --cache-dir");
  }
  options.index_cache_dir = f.index_cache_dir;
  options.connect_timeout = absl::Milliseconds(f.connect_timeout_ms);
  options.test_max_delay = absl::Milliseconds(f.test_delay_ms);
  if (!f.shm.empty()) options.shm = f.shm == "on";

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
  RETURN_IF_ERROR(WritePortFile(f.metrics.port_file, node->metrics_port()));
  watcher.join();
  Log(LogLevel::kInfo, "producer",
      absl::StrCat("signal ", received.load(),
                   ": leaving (serving what it has made, handing the rest back) and stopping"));
  // A second signal ends the drain; the thread waiting for it ends with the process.
  static absl::Notification leave_now;
  std::thread([] {
    const int sig = WaitForTerminationSignal();
    Log(LogLevel::kInfo, "producer", absl::StrCat("signal ", sig, ": leaving now"));
    leave_now.Notify();
  }).detach();
  node->Drain(absl::Milliseconds(f.drain_timeout_ms),
              [] { return leave_now.HasBeenNotified(); });
  return absl::OkStatus();
}

void Declare(CLI::App* app, ProducerFlags* f) {
  AddDispatcherFlag(app, &f->dispatcher);
  AddListenFlags(app, &f->listen, "the data port");
  AddFlag(app, "--advertise-host", &f->advertise_host, "HOST",
          "the host consumers reach this producer at")
      ->default_str("--bind's address, or the host name with 0.0.0.0");
  AddFlag(app, "--threads", &f->threads, "N",
          "threads reading and decoding; 0: the machine's cores")
      ->check(CLI::Range(0, 1024));
  AddFlag(app, "--buffer-bytes", &f->buffer_bytes, "B",
          "at most this many bytes of finished batches")
      ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  AddFlag(app, "--max-tasks", &f->max_tasks, "K", "tasks held at once")->check(CLI::Range(1, 1024));
  AddFlag(app, "--cache-bytes", &f->cache_bytes, "B",
          "keep this many bytes of the records read, for later epochs (0: none)");
  AddFlag(app, "--cache-dir", &f->cache_dir, "DIR",
          "keep the --cache-bytes cache on disk here instead of in memory");
  AddSwitch(app, "--cache-keep", &f->cache_keep,
            "keep the --cache-dir cache when this producer stops, for the next producer on this "
            "host to start with (DIR/croupier-record-cache)");
  AddFlag(app, "--index-cache-dir", &f->index_cache_dir, "DIR", "where the record indexes are kept")
      ->default_str(
          "$CROUPIER_INDEX_DIR, else $XDG_CACHE_HOME/croupier/index or ~/.cache/croupier/index");
  AddAuthTokenFlag(app, &f->auth_token);
  AddMillisFlag(app, "--connect-timeout-ms", &f->connect_timeout_ms, 1,
                "how long to wait for the dispatcher before giving up");
  AddMillisFlag(app, "--drain-timeout-ms", &f->drain_timeout_ms, 0,
                "on SIGTERM, how long to serve the batches made before leaving (0: leave at once); "
                "keep it below the supervisor's grace before SIGKILL");
  AddFlag(app, "--shm", &f->shm, "on|off",
          "batches to consumers on this host through shared memory")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str("on without TLS, off with TLS (the shared-memory path is not encrypted)");
  AddMetricsFlags(app, &f->metrics, "Prometheus metrics at /metrics");
  AddFlag(app, "--max-connections", &f->max_connections, "N",
          "connections the data port accepts at most")
      ->check(CLI::Range(1, 65536));
  AddFlag(app, "--max-connections-per-peer", &f->max_connections_per_peer, "N",
          "connections the data port accepts from one IP address")
      ->check(CLI::Range(1, 65536));
  AddTlsFlags(app, &f->tls, /*server=*/true);
  // Fault injection for the tests: hidden from -h (an empty group).
  AddFlag(app, "--test-delay-ms", &f->test_delay_ms, "MS", "")
      ->check(CLI::Range(0, 60000))
      ->group("");
  AddFlag(app, "--test-make-delay-ms", &f->test_make_delay_ms, "MS", "")
      ->check(CLI::Range(0, 60000))
      ->group("");
}

}  // namespace

Subcommand AddProducerCommand(CLI::App& parent) {
  return AddCommand<ProducerFlags>(parent, "producer", kProducerDescription, Declare, Run);
}

}  // namespace croupier::cli
