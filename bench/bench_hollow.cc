// Hollow clients (issue 36, item 1): thousands of simulated consumers and producers, with the real
// client (rpc::DispatcherClient), the real messages and the real protocol (bench/hollow_clients.h
// says what each one sends), against one real `croupier dispatcher` process (journal on, every
// acknowledgement durable before its answer). No batch is fetched.
//
// The driver makes a small `croupier synth` dataset and J unbounded jobs over it (consumer c is
// rank c / J of job c % J), starts the dispatcher (its fdatasync and fsync calls counted through a
// tracefs instance of this program's, when it may make one), and forks K client processes, each
// running its share of the clients on a few threads, so that the client side is not one process's
// bottleneck. Every client registers at its share of the first interval and beats every interval
// from then on; once every one is registered, the driver waits a warm-up and measures a window of S
// seconds, calling GetStatus once a second itself (as `croupier status --watch` or the web page
// would), then at once again without the client lists (`--summary`, an autoscaler's poll); then
// every client leaves. With --pin the dispatcher runs on CPU 0 and everything else on
// CPU 1.
//
// JSON lines on stdout: one per RPC kind ({"bench": "hollow", "case": "rpc", "rpc": ...}: calls/s
// in the window, latency p50/p99/max, errors) and one summary ({"bench": "scale", "case": "hollow",
// ...}: the dispatcher's CPU in cores (utime + stime from /proc/PID/stat), peak RSS (VmHWM), the
// bytes it wrote to the disk (/proc/PID/io write_bytes; wchar, the bytes of its write calls) and
// its syncs/s (fdatasync + fsync calls, -1 when they cannot be counted), GetStatus's size and time
// (with and without the client lists), the producer advice of the last status,
// and whether every client met its heartbeat period: no consumer or producer went longer than the
// takeover time without an answered heartbeat).
//
// Recovery (issue 36, item 3), with --kill-after A: A seconds into the window the dispatcher is
// SIGKILLed and at once started again on the same work directory and port (the clients keep
// their address; bench/hollow_clients.h says what they do meanwhile). The journal as the kill left
// it is kept (a hard link: the new dispatcher compacts by renaming a new file over it). Measured,
// from the kill: when the new one listens (its port file) and answers a call (a Locate of the
// driver's: serving again), its replay and compaction times (its log), and when every consumer
// and producer has had a heartbeat answered by it (every client back). Then the positions: a
// third dispatcher replays the kept journal (the same entries, checked on the "replayed" lines of
// both logs) and GetJob gives what each rank's position was after the restart (H); for every
// consumer, the last position the old dispatcher acknowledged (A: an answer read before it was
// seen dead) must be at most H, and H at most the highest position the consumer had sent it (S).
// H < A is an acknowledged position lost (a rank resuming there is dealt steps A - H again);
// H > S a position never sent (steps skipped). A < H <= S is allowed: an acknowledgement journaled
// whose answer the kill cut off. The clients' errors meanwhile are counted by code, not fatal.
// The summary line gets "recovery_*" and "positions_*" fields, and stderr a line in words. The
// dispatcher's CPU then adds the old one's share of the window and the new one's whole life;
// syncs are not counted (-1).
//
// The autoscaler's policy (issue 36, item 4), with --autoscale N: the consumers' demand needs N
// producers, one of the P runs at first, and the driver follows the dispatcher's recommended
// number every --autoscale-interval seconds (5), starting and stopping hollow producers; the
// summary gets an "autoscale" member (bench/hollow_autoscale.h says what it measures).
//
// The driver's processes and what it reads of them: bench/hollow_process.h; the kill, the restart,
// the position check and its report: bench/hollow_recovery.h.
//
// usage: build/bench/bench_hollow [--consumers N] [--producers P] [--jobs J] [--processes K]
//            [--threads T] [--seconds S] [--warmup W] [--steps-per-beat B] [--pin] [--quick]
//            [--commit-interval D] [--heartbeat-interval-ms I] [--kill-after A] [--logs DIR]
//            [--autoscale N [--autoscale-interval S]] [--connection-per-consumer]
//            [--no-client-keepalive]
//   --connection-per-consumer gives each consumer a connection of its own, as separate trainer
//   processes have; by default the consumers of a client thread (about 25) share one.
//   --no-client-keepalive turns the clients' keepalive pings off (rpc::kKeepaliveTime), for a
//   baseline of what they cost.
//   --heartbeat-interval-ms I also sets the dispatcher's --producer-timeout-ms to max(10 s, 3 I), the
//   bound a producer's longest silence is checked against (a consumer's: the takeover it is told).
//   the croupier binary: $CROUPIER_BIN, else ../bin/croupier beside this program.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "absl/time/time.h"
#include "bench/hollow_autoscale.h"
#include "bench/hollow_clients.h"
#include "bench/hollow_process.h"
#include "bench/hollow_recovery.h"
#include "src/common/mutex_checks.h"

namespace {

namespace fs = std::filesystem;
namespace hollow = croupier::bench::hollow;
using hollow::Clock;
using croupier::bench::hollow_driver::CpuSeconds;
using croupier::bench::hollow_driver::CreateSyncCounter;
using croupier::bench::hollow_driver::CroupierBin;
using croupier::bench::hollow_driver::Fail;
using croupier::bench::hollow_driver::g_children;
using croupier::bench::hollow_driver::g_dispatcher;
using croupier::bench::hollow_driver::g_logs;
using croupier::bench::hollow_driver::g_trace;
using croupier::bench::hollow_driver::g_work;
using croupier::bench::hollow_driver::KillAll;
using croupier::bench::hollow_driver::KillAndRestart;
using croupier::bench::hollow_driver::Max;
using croupier::bench::hollow_driver::Percentile;
using croupier::bench::hollow_driver::Pin;
using croupier::bench::hollow_driver::ProcField;
using croupier::bench::hollow_driver::ReadFile;
using croupier::bench::hollow_driver::RecoveryReport;
using croupier::bench::hollow_driver::Restart;
using croupier::bench::hollow_driver::RunOrFail;
using croupier::bench::hollow_driver::Seconds;
using croupier::bench::hollow_driver::Spawn;
using croupier::bench::hollow_driver::SyncsSinceLast;
using croupier::bench::hollow_driver::Tail;

struct Options {
  uint32_t consumers = 1000, producers = 0, jobs = 1, processes = 2, threads = 0;
  uint32_t steps_per_beat = 1;
  double seconds = 30, warmup = 5;
  double kill_after = -1;  // seconds into the window; < 0: no kill
  std::string logs;        // where the work directory's logs are copied at the end
  bool pin = false, quick = false;
  bool connection_per_consumer = false;  // hollow_clients.h, Config
  bool keepalive = true;                  // hollow_clients.h, Config
  std::string commit_interval;  // the dispatcher's --journal-commit-interval; empty: its default
  std::string heartbeat_interval_ms;  // the dispatcher's --heartbeat-interval-ms; empty: its default
  uint32_t autoscale = 0;  // the producers the demand needs (hollow_autoscale.h); 0: all run
  double autoscale_interval = 5;  // seconds between the autoscaler's rounds
};

Options Parse(int argc, char** argv) {
  Options o;
  bool producers_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--consumers") {
      o.consumers = std::stoul(next());
    } else if (a == "--producers") {
      o.producers = std::stoul(next());
      producers_given = true;
    } else if (a == "--jobs") {
      o.jobs = std::stoul(next());
    } else if (a == "--processes") {
      o.processes = std::stoul(next());
    } else if (a == "--threads") {
      o.threads = std::stoul(next());
    } else if (a == "--seconds") {
      o.seconds = std::stod(next());
    } else if (a == "--warmup") {
      o.warmup = std::stod(next());
    } else if (a == "--steps-per-beat") {
      o.steps_per_beat = std::stoul(next());
    } else if (a == "--commit-interval") {
      o.commit_interval = next();
    } else if (a == "--heartbeat-interval-ms") {
      o.heartbeat_interval_ms = next();
    } else if (a == "--kill-after") {
      o.kill_after = std::stod(next());
    } else if (a == "--autoscale") {
      o.autoscale = std::stoul(next());
    } else if (a == "--autoscale-interval") {
      o.autoscale_interval = std::stod(next());
    } else if (a == "--logs") {
      o.logs = next();
    } else if (a == "--connection-per-consumer") {
      o.connection_per_consumer = true;
    } else if (a == "--no-client-keepalive") {
      o.keepalive = false;
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      Fail(
          "usage: bench_hollow [--consumers N] [--producers P] [--jobs J] [--processes K] "
          "[--threads T] [--seconds S] [--warmup W] [--steps-per-beat B] [--commit-interval D] "
          "[--heartbeat-interval-ms I] [--kill-after A] [--autoscale N [--autoscale-interval S]] "
          "[--connection-per-consumer] [--no-client-keepalive] [--logs DIR] [--pin] [--quick]");
    }
  }
  if (o.quick) o.seconds = std::min(o.seconds, 10.0);
  if (!producers_given) o.producers = std::max<uint32_t>(1, o.consumers / 10);
  if (o.jobs < 1 || o.jobs > hollow::kMaxJobs) Fail("--jobs must be 1 to 64");
  if (o.consumers < o.jobs) Fail("--consumers must be at least --jobs");
  if (o.kill_after >= o.seconds) Fail("--kill-after must be within the window (--seconds)");
  if (o.autoscale > 0 && o.kill_after >= 0) Fail("--autoscale and --kill-after are separate runs");
  if (o.autoscale > o.producers) Fail("--autoscale N needs at least N --producers to start");
  if (o.autoscale_interval <= 0) Fail("--autoscale-interval must be positive");
  o.processes = std::max<uint32_t>(1, o.processes);
  // Enough consumer threads that a call's latency does not hold the schedule: about 25
  // consumers a thread (each thread has a connection of its own), at most 256 a process.
  if (o.threads == 0) {
    o.threads = std::clamp<uint32_t>(o.consumers / o.processes / 25, 4, 256);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  // As the clients users run (the croupier command, the Python module): without abseil's
  // deadlock detector, which Debian's abseil leaves on (src/common/mutex_checks.h).
  croupier::ReleaseMutexChecks();
  const Options o = Parse(argc, argv);
  const std::string bin = CroupierBin();
  if (access(bin.c_str(), X_OK) != 0) Fail(bin + " is not an executable: build croupier first");
  char tmpl[] = "/tmp/croupier-bench-hollow-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Fail("mkdtemp failed");
  const std::string work = tmpl;
  g_work = work;
  g_logs = o.logs;
  fs::create_directories(work + "/dispatcher");
  signal(SIGPIPE, SIG_IGN);
  // Bounded: registration, the warm-up, the window, leaving, and slack.
  const double bound_s =
      120 + o.consumers / 100.0 + o.warmup + o.seconds + (o.kill_after >= 0 ? 120 : 0);
  std::thread([bound_s] {
    std::this_thread::sleep_for(std::chrono::duration<double>(bound_s));
    Fail(absl::StrCat("gave up after ", bound_s, " s"));
  }).detach();

  // The jobs: J unbounded jobs of batch size 1 over one dataset of 40 steps per epoch for the
  // largest job (tasks of 4 rounds, 10 a epoch).
  std::vector<uint32_t> world(o.jobs);
  for (uint32_t c = 0; c < o.consumers; ++c) ++world[c % o.jobs];
  const uint64_t records = uint64_t{world[0]} * 40;
  RunOrFail({bin, "synth", "--out", work + "/data", "--files", "4", "--records",
             std::to_string(records), "--image-bytes", "16", "--quiet"},
            work + "/synth.log");

  const std::string port_file = work + "/port";
  std::vector<std::string> dispatcher_args = {bin,          "dispatcher",        "--port",
                                              "0",          "--port-file",       port_file,
                                              "--work-dir", work + "/dispatcher"};
  if (!o.commit_interval.empty()) {
    dispatcher_args.insert(dispatcher_args.end(), {"--journal-commit-interval", o.commit_interval});
  }
  // A longer interval comes with a producer timeout of at least 3 intervals (10 s by default).
  const int64_t interval_ms =
      o.heartbeat_interval_ms.empty() ? 1000 : std::stoll(o.heartbeat_interval_ms);
  const int64_t producer_timeout_ms = std::max<int64_t>(10000, 3 * interval_ms);
  if (!o.heartbeat_interval_ms.empty()) {
    dispatcher_args.insert(dispatcher_args.end(),
                           {"--heartbeat-interval-ms", o.heartbeat_interval_ms,
                            "--producer-timeout-ms", std::to_string(producer_timeout_ms)});
  }
  g_dispatcher = Spawn(dispatcher_args, work + "/dispatcher.log", o.pin ? 0 : -1);
  if (o.pin) Pin(1);  // this process, and every client process forked from it
  std::string port;
  for (int i = 0; i < 300 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(port_file);
    in >> port;
  }
  if (port.empty())
    Fail("the dispatcher wrote no port within 15 s: " + Tail(work + "/dispatcher.log"));
  const std::string address = "127.0.0.1:" + port;
  // Its threads now: gRPC's server threads and the ticker; any it starts later are counted too.
  const bool syncs_counted = CreateSyncCounter(g_dispatcher);
  for (uint32_t j = 0; j < o.jobs; ++j) {
    RunOrFail({bin, "job", "create", "--dispatcher", address, "--name", absl::StrCat("hollow", j),
               "--files", work + "/data/*.tfrecord", "--features",
               "id:int64,label:int64,image:bytes", "--batch-size", "1", "--consumers",
               std::to_string(world[j]), "--seed", "1", "--epochs", "0"},
              work + "/job.log");
  }

  // Shared memory, then the client processes. No gRPC in this process before the fork.
  const size_t shared_bytes = hollow::Shared::Bytes(o.consumers, o.producers);
  void* mem =
      mmap(nullptr, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) Fail("mmap of the shared memory failed");
  auto* sh = new (mem) hollow::Shared();
  sh->consumers = o.consumers;
  sh->producers = o.producers;
  for (uint32_t j = 0; j < o.jobs; ++j) sh->world[j] = world[j];
  for (uint32_t c = 0; c < o.consumers; ++c) new (&sh->consumer(c)) hollow::ConsumerSlot();
  for (uint32_t p = 0; p < o.producers; ++p) new (&sh->producer_back_ns(p)) std::atomic<int64_t>(0);
  hollow::Config cfg;
  cfg.address = address;
  cfg.consumers = o.consumers;
  cfg.producers = o.producers;
  cfg.jobs = o.jobs;
  cfg.processes = o.processes;
  cfg.threads = o.threads;
  cfg.steps_per_beat = o.steps_per_beat;
  cfg.connection_per_consumer = o.connection_per_consumer;
  cfg.keepalive = o.keepalive;
  cfg.producer_timeout_s = producer_timeout_ms / 1000.0;
  // The supply model: N producers meet the consumers' demand exactly; one runs at first.
  std::optional<hollow::AutoscaleRun> autoscale;
  if (o.autoscale > 0) {
    sh->demand = o.steps_per_beat * 1000.0 / interval_ms;
    sh->capacity = sh->demand * o.consumers / o.autoscale;
    sh->wanted_producers = 1;
    autoscale.emplace(o.autoscale, o.producers, o.autoscale_interval);
  }
  const auto start = Clock::now() + std::chrono::milliseconds(500);
  sh->start_ns = hollow::ToNs(start);
  for (uint32_t k = 0; k < o.processes; ++k) {
    pid_t pid = fork();
    if (pid < 0) Fail("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      g_children.clear();
      g_dispatcher = 0;
      g_work.clear();  // the driver's to remove
      g_trace.clear();
      // The client library's warnings while the dispatcher is away ("no answer for 2s"), one per
      // waiting call of thousands: counted by code instead.
      if (o.kill_after >= 0) croupier::SetMinLogLevel(croupier::LogLevel::kError);
      hollow::Stats st = hollow::RunClientProcess(cfg, sh, k);
      struct rusage usage = {};
      getrusage(RUSAGE_SELF, &usage);
      st.cpu_s = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                 usage.ru_stime.tv_usec / 1e6;
      const bool ok = hollow::WriteStats(st, absl::StrCat(work, "/client", k, ".stats"));
      std::_Exit(ok && !sh->failed.load() ? 0 : 2);
    }
    g_children.push_back(pid);
  }

  // Registration: until every client is registered (every producer wanted at first).
  while (sh->registered_consumers.load() < o.consumers ||
         sh->registered_producers.load() < std::min(o.producers, sh->wanted_producers.load())) {
    if (sh->failed.load()) Fail("a client process gave up while registering");
    int status = 0;
    if (const pid_t got = waitpid(g_dispatcher, &status, WNOHANG); got != 0) {
      g_dispatcher = 0;
      Fail(absl::StrCat("the dispatcher is gone while ", sh->registered_consumers.load(), " of ",
                        o.consumers, " consumers were registered (",
                        got < 0               ? absl::StrCat("waitpid: errno ", errno)
                        : WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                              : absl::StrCat("exit code ", WEXITSTATUS(status)),
                        "); the end of its log:\n", Tail(work + "/dispatcher.log")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double register_s = Seconds(Clock::now() - start);
  const auto window_start = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(o.warmup));
  const auto window_end = window_start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o.seconds));
  sh->window_start_ns = hollow::ToNs(window_start);
  sh->window_end_ns = hollow::ToNs(window_end);
  double load0 = 0;
  getloadavg(&load0, 1);

  // The window: the dispatcher's counters at both ends, GetStatus once a second; the kill and
  // the restart on a thread of their own.
  std::this_thread::sleep_until(window_start);
  const double cpu0 = CpuSeconds(g_dispatcher);
  Restart restart;
  std::thread restarter;
  if (o.kill_after >= 0) {
    std::vector<std::string> args = dispatcher_args;
    args[3] = port;  // "--port", the same one
    restart.port = std::stoi(port);
    restarter = std::thread(KillAndRestart, std::move(args), o.pin ? 0 : -1, work, port_file,
                            address, cfg.JobName(0), sh,
                            window_start + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(o.kill_after)),
                            window_end, &restart);
  }
  double clients0 = 0;
  for (pid_t p : g_children) clients0 += std::max(0.0, CpuSeconds(p));
  const double wbytes0 = ProcField(g_dispatcher, "io", "write_bytes");
  const double wchar0 = ProcField(g_dispatcher, "io", "wchar");
  SyncsSinceLast();  // clears what registration and the warm-up synced
  auto status_client = hollow::NewClient(cfg);
  hollow::Stats status_stats;
  uint64_t status_bytes = 0, summary_bytes = 0;
  croupier::v1::ProducerAdvice advice;  // the dispatcher's, at the window's last status
  double status_back_s = -1;  // with a kill: when the driver's own client was answered again
  // One GetStatus, timed as `kind`: its answer, or nullopt (the failure counted).
  auto get_status = [&](bool omit_clients,
                        hollow::Kind kind) -> std::optional<croupier::v1::StatusResponse> {
    croupier::v1::StatusRequest req;
    req.set_omit_clients(omit_clients);
    const auto sent = Clock::now();
    auto r = status_client->GetStatus(req);
    status_stats.Add(kind, Clock::now() - sent, true);
    if (!r.ok()) {
      status_stats.Fail(kind, r.status());
      return std::nullopt;
    }
    return *std::move(r);
  };
  for (auto next = window_start; next < window_end; next += std::chrono::seconds(1)) {
    std::this_thread::sleep_until(next);
    // With a kill, within its second: a dispatcher away does not hold the loop past the window.
    const croupier::CallDeadline bounded(o.kill_after >= 0 ? absl::Now() + absl::Seconds(1)
                                                           : absl::InfiniteFuture());
    if (auto full = get_status(false, hollow::kGetStatus)) {
      status_bytes = std::max<uint64_t>(status_bytes, full->ByteSizeLong());
      const int64_t kill = sh->kill_ns.load();
      if (kill != 0 && status_back_s < 0) status_back_s = (hollow::ToNs(Clock::now()) - kill) / 1e9;
    }
    const auto summary = get_status(true, hollow::kGetStatusSummary);
    if (summary) {
      summary_bytes = std::max<uint64_t>(summary_bytes, summary->ByteSizeLong());
      advice = summary->producer_advice();
    }
    if (autoscale) {
      const double t = Seconds(next - window_start);
      const double every = autoscale->interval_s();
      // A round every --autoscale-interval seconds, on the summary just read.
      if (summary && std::floor(t / every) != std::floor((t - 1) / every)) {
        autoscale->Round(t, advice, sh);
      }
      autoscale->Sample(t, sh);
    }
  }
  std::this_thread::sleep_until(window_end);
  while (restarter.joinable() && !restart.serving_again.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double cpu1 = CpuSeconds(g_dispatcher);
  double clients1 = 0;
  for (pid_t p : g_children) clients1 += std::max(0.0, CpuSeconds(p));
  const double wbytes1 = ProcField(g_dispatcher, "io", "write_bytes");
  const double wchar1 = ProcField(g_dispatcher, "io", "wchar");
  const double syncs = o.kill_after >= 0 ? -1 : SyncsSinceLast();  // the old one's only
  const double peak_rss_mib =
      std::max(restart.old_rss_mib, ProcField(g_dispatcher, "status", "VmHWM") / 1024);
  if (cpu0 < 0 || cpu1 < 0) {
    Fail("the dispatcher exited during the window; the end of its log:\n" +
         Tail(work + (o.kill_after >= 0 ? "/dispatcher-restarted.log" : "/dispatcher.log")));
  }
  double load1 = 0;
  getloadavg(&load1, 1);

  // Leaving: the client processes end on their own, bounded.
  const auto leave_by = Clock::now() + std::chrono::seconds(60 + o.consumers / 100);
  bool clean = true;
  for (pid_t p : g_children) {
    int status = 0;
    while (waitpid(p, &status, WNOHANG) == 0) {
      if (Clock::now() > leave_by) Fail("client processes did not finish leaving within bound");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    clean = clean && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  g_children.clear();
  hollow::Stats all;
  for (uint32_t k = 0; k < o.processes; ++k) {
    hollow::Stats s;
    if (!hollow::ReadStats(absl::StrCat(work, "/client", k, ".stats"), &s)) {
      Fail(absl::StrCat("client process ", k, " left no results"));
    }
    all.Merge(s);
  }
  all.Merge(status_stats);
  const double journal_bytes = static_cast<double>(fs::file_size(work + "/dispatcher/journal"));
  // Across a restart: the old dispatcher's share of the window, and the new one's whole life.
  const double cpu_s = o.kill_after >= 0 ? restart.old_cpu_s - cpu0 + cpu1 : cpu1 - cpu0;
  const double write_bytes =
      o.kill_after >= 0 ? restart.old_write_bytes - wbytes0 + wbytes1 : wbytes1 - wbytes0;
  const double wchar_bytes =
      o.kill_after >= 0 ? restart.old_wchar - wchar0 + wchar1 : wchar1 - wchar0;

  // The summary's recovery fields, "" without a kill.
  const std::string recovery =
      o.kill_after >= 0 ? RecoveryReport(restart, bin, work, o.consumers, o.producers, o.jobs,
                                         o.kill_after, sh, cfg, all, status_back_s)
                        : "";
  KillAll();
  if (restarter.joinable()) {
    restart.release = true;
    restarter.join();
  }

  const double s = o.seconds;
  for (int k = 0; k < hollow::kKinds; ++k) {
    std::vector<float>& v = all.latency_ms[k];
    const bool windowed = k != hollow::kConsumerRegister && k != hollow::kProducerRegister &&
                          k != hollow::kConsumerLeave && k != hollow::kProducerLeave;
    std::printf(
        "{\"bench\": \"hollow\", \"case\": \"rpc\", \"consumers\": %u, \"rpc\": \"%s\", "
        "\"phase\": \"%s\", \"calls\": %zu, \"per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
        "\"max_ms\": %.3f, \"errors\": %llu}\n",
        o.consumers, hollow::KindName(k), windowed ? "window" : "whole run", v.size(),
        windowed ? v.size() / s : 0.0, Percentile(v, 0.5), Percentile(v, 0.99), Max(v),
        static_cast<unsigned long long>(all.errors[k]));
  }
  uint64_t errors = 0;
  for (int k = 0; k < hollow::kKinds; ++k) errors += all.errors[k];
  if (!all.first_error.empty()) std::fprintf(stderr, "bench_hollow: %s\n", all.first_error.c_str());
  std::vector<float>& hb = all.latency_ms[hollow::kConsumerHeartbeat];
  std::vector<float>& status = all.latency_ms[hollow::kGetStatus];
  std::vector<float>& summary_status = all.latency_ms[hollow::kGetStatusSummary];
  // The producer advisor's figure over every hollow producer (docs/operations.md, "How many
  // producers"): the policy the autoscalers follow, run at this scale.
  std::string advice_json;
  google::protobuf::util::JsonPrintOptions json_options;
  json_options.preserve_proto_field_names = true;
  json_options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(advice, &advice_json, json_options).ok()) {
    advice_json = "null";
  }
  const double hb_p99 = Percentile(hb, 0.99);
  const bool met_period = all.consumers_missed == 0 && all.producers_missed == 0 &&
                          all.late_answers == 0 && errors == 0 && clean;
  std::printf(
      "{\"bench\": \"scale\", \"case\": \"hollow\", \"consumers\": %u, \"producers\": %u, "
      "\"jobs\": %u, \"processes\": %u, \"threads\": %u, \"steps_per_beat\": %u, \"pin\": %s, "
      "\"connection_per_consumer\": %s, \"client_keepalive\": %s, "
      "\"seconds\": %.1f, \"register_s\": %.2f, \"heartbeat_interval_s\": %.3g, "
      "\"takeover_s\": %.3g, \"consumer_heartbeats_per_s\": %.1f, "
      "\"producer_heartbeats_per_s\": %.1f, \"locates_per_s\": %.1f, \"heartbeat_p50_ms\": %.3f, "
      "\"heartbeat_p99_ms\": %.3f, \"heartbeat_max_ms\": %.3f, \"send_late_p99_ms\": %.3f, "
      "\"cpu_cores\": %.4f, \"peak_rss_mib\": %.1f, \"disk_write_bytes_per_s\": %.0f, "
      "\"write_call_bytes_per_s\": %.0f, \"journal_bytes_at_end\": %.0f, "
      "\"syncs_per_s\": %.1f, \"status_bytes\": %llu, "
      "\"status_p50_ms\": %.2f, \"status_max_ms\": %.2f, \"summary_status_bytes\": %llu, "
      "\"summary_status_p50_ms\": %.2f, \"summary_status_max_ms\": %.2f, \"consumers_missed\": %llu, "
      "\"producers_missed\": %llu, \"late_answers\": %llu, \"max_consumer_gap_s\": %.3f, "
      "\"max_producer_gap_s\": %.3f, \"unlocated\": %llu, \"skipped_beats\": %llu, "
      "\"client_cpu_cores\": %.3f, \"tasks_taken\": %llu, "
      "\"tasks_finished\": %llu, \"tasks_revoked\": %llu, \"errors\": %llu, "
      "\"load_before\": %.2f, \"load_after\": %.2f, \"met_period\": %s, \"met\": %s, "
      "\"advice\": %s%s}\n",
      o.consumers, o.producers, o.jobs, o.processes, o.threads, o.steps_per_beat,
      o.pin ? "true" : "false", o.connection_per_consumer ? "true" : "false", o.keepalive ? "true" : "false", s, register_s, all.interval_s, all.takeover_s, hb.size() / s,
      (all.latency_ms[hollow::kProducerHeartbeat].size() +
       all.latency_ms[hollow::kProducerWait].size()) /
          s,
      all.latency_ms[hollow::kLocate].size() / s, Percentile(hb, 0.5), hb_p99, Max(hb),
      Percentile(all.lateness_ms, 0.99), cpu_s / s, peak_rss_mib, write_bytes / s, wchar_bytes / s,
      journal_bytes, syncs_counted && syncs >= 0 ? syncs / s : -1.0,
      static_cast<unsigned long long>(status_bytes), Percentile(status, 0.5), Max(status),
      static_cast<unsigned long long>(summary_bytes), Percentile(summary_status, 0.5),
      Max(summary_status),
      static_cast<unsigned long long>(all.consumers_missed),
      static_cast<unsigned long long>(all.producers_missed),
      static_cast<unsigned long long>(all.late_answers), all.max_consumer_gap_s,
      all.max_producer_gap_s, static_cast<unsigned long long>(all.unlocated),
      static_cast<unsigned long long>(all.skipped), (clients1 - clients0) / s,
      static_cast<unsigned long long>(all.tasks_taken),
      static_cast<unsigned long long>(all.tasks_finished),
      static_cast<unsigned long long>(all.tasks_revoked), static_cast<unsigned long long>(errors),
      load0, load1, met_period ? "true" : "false", met_period && hb_p99 <= 50 ? "true" : "false",
      advice_json.c_str(), autoscale ? autoscale->Report(sh, s).c_str() : recovery.c_str());
  std::fflush(stdout);
  return 0;
}
