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
// would); then every client leaves. With --pin the dispatcher runs on CPU 0 and everything else on
// CPU 1.
//
// JSON lines on stdout: one per RPC kind ({"bench": "hollow", "case": "rpc", "rpc": ...}: calls/s
// in the window, latency p50/p99/max, errors) and one summary ({"bench": "scale", "case": "hollow",
// ...}: the dispatcher's CPU in cores (utime + stime from /proc/PID/stat), peak RSS (VmHWM), the
// bytes it wrote to the disk (/proc/PID/io write_bytes; wchar, the bytes of its write calls) and
// its syncs/s (fdatasync + fsync calls, -1 when they cannot be counted), GetStatus's size and time,
// and whether every client met its heartbeat period: no consumer or producer went longer than the
// takeover time without an answered heartbeat).
//
// usage: build/bench/bench_hollow [--consumers N] [--producers P] [--jobs J] [--processes K]
//            [--threads T] [--seconds S] [--warmup W] [--steps-per-beat B] [--pin] [--quick]
//   the croupier binary: $CROUPIER_BIN, else ../bin/croupier beside this program.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/hollow_clients.h"

namespace {

namespace fs = std::filesystem;
namespace hollow = croupier::bench::hollow;
using hollow::Clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What Fail cleans up: every process this program started, and the work directory.
std::vector<pid_t> g_children;
pid_t g_dispatcher = 0;
std::string g_work;
std::string g_trace;  // the tracefs instance counting the dispatcher's syncs, once made

// Counts the fdatasync and fsync calls of a process and of every thread it starts, in a tracefs
// instance of its own (the syscall tracepoints, pid-filtered with event-fork), no strace: the
// events of a window are the ring buffer's entries (and overruns) between Start and Stop. Needs
// root and tracefs; without them Create returns "".
std::string WriteTrace(const std::string& file, const std::string& text) {
  std::ofstream out(g_trace + "/" + file);
  out << text;
  out.flush();
  return out ? "" : file;
}

bool CreateSyncCounter(pid_t pid) {
  const std::string root = "/sys/kernel/tracing/instances";
  if (access(root.c_str(), W_OK) != 0) return false;
  g_trace = absl::StrCat(root, "/croupier-hollow-", getpid());
  if (mkdir(g_trace.c_str(), 0755) != 0) {
    g_trace.clear();
    return false;
  }
  const std::string event = g_trace + "/events/syscalls/sys_enter_fdatasync/enable";
  for (int i = 0; i < 100 && access(event.c_str(), W_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the instance fills in
  }
  std::string tids;
  for (const auto& e : fs::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    absl::StrAppend(&tids, e.path().filename().string(), " ");
  }
  const std::string failed = WriteTrace("buffer_size_kb", "16384") +
                             WriteTrace("options/event-fork", "1") +
                             WriteTrace("set_event_pid", tids) +
                             WriteTrace("events/syscalls/sys_enter_fdatasync/enable", "1") +
                             WriteTrace("events/syscalls/sys_enter_fsync/enable", "1");
  if (!failed.empty())
    std::fprintf(stderr, "bench_hollow: tracefs: cannot write %s\n", failed.c_str());
  return failed.empty();
}

// The syncs recorded since the last call (the buffer is cleared); -1 if none can be counted.
double SyncsSinceLast() {
  if (g_trace.empty()) return -1;
  WriteTrace("tracing_on", "0");
  double n = 0;
  for (const auto& e : fs::directory_iterator(g_trace + "/per_cpu")) {
    std::istringstream in(ReadFile(e.path().string() + "/stats"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("entries:", 0) == 0) n += std::atof(line.c_str() + 8);
      if (line.rfind("overrun:", 0) == 0) n += std::atof(line.c_str() + 8);
    }
  }
  WriteTrace("trace", "");
  WriteTrace("tracing_on", "1");
  return n;
}

void RemoveSyncCounter() {
  if (g_trace.empty()) return;
  WriteTrace("events/enable", "0");
  rmdir(g_trace.c_str());
  g_trace.clear();
}

void KillAll() {
  for (pid_t p : g_children) kill(p, SIGKILL);
  for (pid_t p : g_children) waitpid(p, nullptr, 0);
  g_children.clear();
  if (g_dispatcher > 0) {
    kill(g_dispatcher, SIGKILL);
    waitpid(g_dispatcher, nullptr, 0);
  }
  g_dispatcher = 0;
  RemoveSyncCounter();
  if (!g_work.empty()) {
    std::error_code ignored;
    fs::remove_all(g_work, ignored);
    g_work.clear();
  }
}

[[noreturn]] void Fail(const std::string& message) {
  // Once: the time bound's thread and the main thread may fail together, and the second must not
  // race the first's cleanup (it waits for the first to end the process).
  static std::atomic<bool> failing{false};
  if (failing.exchange(true)) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "bench_hollow: %s\n", message.c_str());
  KillAll();
  std::_Exit(1);
}

std::string Tail(const std::string& path) {
  const std::string log = ReadFile(path);
  return log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
}

std::string CroupierBin() {
  if (const char* bin = std::getenv("CROUPIER_BIN"); bin != nullptr && *bin) return bin;
  return (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin" / "croupier")
      .string();
}

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// Starts argv (on CPU `cpu` if >= 0) with stdout and stderr going to `log`; returns its pid. The
// child dies with this process.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, int cpu = -1) {
  pid_t pid = fork();
  if (pid < 0) Fail("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (cpu >= 0) Pin(cpu);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void RunOrFail(const std::vector<std::string>& argv, const std::string& log) {
  int status = 0;
  waitpid(Spawn(argv, log), &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Fail(absl::StrCat(argv[0], " ", argv[1], " failed: ", ReadFile(log)));
  }
}

// utime + stime of a process, in seconds; -1 once it has exited.
double CpuSeconds(pid_t pid) {
  const std::string text = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (text.rfind(')') == std::string::npos) return -1;
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A "key: value" field of a /proc file (VmHWM in kB of status; write_bytes of io).
double ProcField(pid_t pid, const std::string& file, const std::string& key) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/", file)));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1));
  }
  return 0;
}

double Percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

double Max(const std::vector<float>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Options {
  uint32_t consumers = 1000, producers = 0, jobs = 1, processes = 2, threads = 0;
  uint32_t steps_per_beat = 1;
  double seconds = 30, warmup = 5;
  bool pin = false, quick = false;
  std::string commit_interval;  // the dispatcher's --journal-commit-interval; empty: its default
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
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      Fail(
          "usage: bench_hollow [--consumers N] [--producers P] [--jobs J] [--processes K] "
          "[--threads T] [--seconds S] [--warmup W] [--steps-per-beat B] [--commit-interval D] "
          "[--pin] [--quick]");
    }
  }
  if (o.quick) o.seconds = std::min(o.seconds, 10.0);
  if (!producers_given) o.producers = std::max<uint32_t>(1, o.consumers / 10);
  if (o.jobs < 1 || o.jobs > hollow::kMaxJobs) Fail("--jobs must be 1 to 64");
  if (o.consumers < o.jobs) Fail("--consumers must be at least --jobs");
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
  const Options o = Parse(argc, argv);
  const std::string bin = CroupierBin();
  if (access(bin.c_str(), X_OK) != 0) Fail(bin + " is not an executable: build croupier first");
  char tmpl[] = "/tmp/croupier-bench-hollow-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Fail("mkdtemp failed");
  const std::string work = tmpl;
  g_work = work;
  fs::create_directories(work + "/dispatcher");
  signal(SIGPIPE, SIG_IGN);
  // Bounded: registration, the warm-up, the window, leaving, and slack.
  const double bound_s = 120 + o.consumers / 100.0 + o.warmup + o.seconds;
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
  std::vector<std::string> dispatcher_args = {bin,         "dispatcher", "--port",
                                               "0",         "--port-file", port_file,
                                               "--work-dir", work + "/dispatcher"};
  if (!o.commit_interval.empty()) {
    dispatcher_args.insert(dispatcher_args.end(),
                           {"--journal-commit-interval", o.commit_interval});
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
  const size_t shared_bytes = hollow::Shared::Bytes(o.consumers);
  void* mem =
      mmap(nullptr, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) Fail("mmap of the shared memory failed");
  auto* sh = new (mem) hollow::Shared();
  for (uint32_t j = 0; j < o.jobs; ++j) sh->world[j] = world[j];
  for (uint32_t c = 0; c < o.consumers; ++c) new (&sh->position[c]) std::atomic<uint64_t>(0);
  hollow::Config cfg;
  cfg.address = address;
  cfg.consumers = o.consumers;
  cfg.producers = o.producers;
  cfg.jobs = o.jobs;
  cfg.processes = o.processes;
  cfg.threads = o.threads;
  cfg.steps_per_beat = o.steps_per_beat;
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

  // Registration: until every client is registered.
  while (sh->registered_consumers.load() < o.consumers ||
         sh->registered_producers.load() < o.producers) {
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

  // The window: the dispatcher's counters at both ends, GetStatus once a second.
  std::this_thread::sleep_until(window_start);
  const double cpu0 = CpuSeconds(g_dispatcher);
  double clients0 = 0;
  for (pid_t p : g_children) clients0 += std::max(0.0, CpuSeconds(p));
  const double wbytes0 = ProcField(g_dispatcher, "io", "write_bytes");
  const double wchar0 = ProcField(g_dispatcher, "io", "wchar");
  SyncsSinceLast();  // clears what registration and the warm-up synced
  auto status_client = hollow::NewClient(cfg);
  hollow::Stats status_stats;
  uint64_t status_bytes = 0;
  for (auto next = window_start; next < window_end; next += std::chrono::seconds(1)) {
    std::this_thread::sleep_until(next);
    croupier::v1::StatusRequest req;
    const auto sent = Clock::now();
    auto r = status_client->GetStatus(req);
    status_stats.Add(hollow::kGetStatus, Clock::now() - sent, true);
    if (!r.ok()) {
      status_stats.Fail(hollow::kGetStatus, r.status());
    } else {
      status_bytes = std::max<uint64_t>(status_bytes, r->ByteSizeLong());
    }
  }
  std::this_thread::sleep_until(window_end);
  const double cpu1 = CpuSeconds(g_dispatcher);
  double clients1 = 0;
  for (pid_t p : g_children) clients1 += std::max(0.0, CpuSeconds(p));
  const double wbytes1 = ProcField(g_dispatcher, "io", "write_bytes");
  const double wchar1 = ProcField(g_dispatcher, "io", "wchar");
  const double syncs = SyncsSinceLast();
  const double peak_rss_mib = ProcField(g_dispatcher, "status", "VmHWM") / 1024;
  if (cpu0 < 0 || cpu1 < 0)
    Fail("the dispatcher exited during the window: " + Tail(work + "/dispatcher.log"));
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
  KillAll();

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
  const double hb_p99 = Percentile(hb, 0.99);
  const bool met_period = all.consumers_missed == 0 && all.producers_missed == 0 &&
                          all.late_answers == 0 && errors == 0 && clean;
  std::printf(
      "{\"bench\": \"scale\", \"case\": \"hollow\", \"consumers\": %u, \"producers\": %u, "
      "\"jobs\": %u, \"processes\": %u, \"threads\": %u, \"steps_per_beat\": %u, \"pin\": %s, "
      "\"seconds\": %.1f, \"register_s\": %.2f, \"heartbeat_interval_s\": %.3g, "
      "\"takeover_s\": %.3g, \"consumer_heartbeats_per_s\": %.1f, "
      "\"producer_heartbeats_per_s\": %.1f, \"locates_per_s\": %.1f, \"heartbeat_p50_ms\": %.3f, "
      "\"heartbeat_p99_ms\": %.3f, \"heartbeat_max_ms\": %.3f, \"send_late_p99_ms\": %.3f, "
      "\"cpu_cores\": %.4f, \"peak_rss_mib\": %.1f, \"disk_write_bytes_per_s\": %.0f, "
      "\"write_call_bytes_per_s\": %.0f, \"journal_bytes_at_end\": %.0f, "
      "\"syncs_per_s\": %.1f, \"status_bytes\": %llu, "
      "\"status_p50_ms\": %.2f, \"status_max_ms\": %.2f, \"consumers_missed\": %llu, "
      "\"producers_missed\": %llu, \"late_answers\": %llu, \"max_consumer_gap_s\": %.3f, "
      "\"max_producer_gap_s\": %.3f, \"unlocated\": %llu, \"skipped_beats\": %llu, "
      "\"client_cpu_cores\": %.3f, \"tasks_taken\": %llu, "
      "\"tasks_finished\": %llu, \"tasks_revoked\": %llu, \"errors\": %llu, "
      "\"load_before\": %.2f, \"load_after\": %.2f, \"met_period\": %s, \"met\": %s}\n",
      o.consumers, o.producers, o.jobs, o.processes, o.threads, o.steps_per_beat,
      o.pin ? "true" : "false", s, register_s, all.interval_s, all.takeover_s, hb.size() / s,
      (all.latency_ms[hollow::kProducerHeartbeat].size() +
       all.latency_ms[hollow::kProducerWait].size()) /
          s,
      all.latency_ms[hollow::kLocate].size() / s, Percentile(hb, 0.5), hb_p99, Max(hb),
      Percentile(all.lateness_ms, 0.99), (cpu1 - cpu0) / s, peak_rss_mib, (wbytes1 - wbytes0) / s,
      (wchar1 - wchar0) / s, journal_bytes, syncs_counted && syncs >= 0 ? syncs / s : -1.0,
      static_cast<unsigned long long>(status_bytes), Percentile(status, 0.5), Max(status),
      static_cast<unsigned long long>(all.consumers_missed),
      static_cast<unsigned long long>(all.producers_missed),
      static_cast<unsigned long long>(all.late_answers), all.max_consumer_gap_s,
      all.max_producer_gap_s, static_cast<unsigned long long>(all.unlocated),
      static_cast<unsigned long long>(all.skipped), (clients1 - clients0) / s,
      static_cast<unsigned long long>(all.tasks_taken),
      static_cast<unsigned long long>(all.tasks_finished),
      static_cast<unsigned long long>(all.tasks_revoked), static_cast<unsigned long long>(errors),
      load0, load1, met_period ? "true" : "false", met_period && hb_p99 <= 50 ? "true" : "false");
  std::fflush(stdout);
  return 0;
}
