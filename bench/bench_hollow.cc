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
// usage: build/bench/bench_hollow [--consumers N] [--producers P] [--jobs J] [--processes K]
//            [--threads T] [--seconds S] [--warmup W] [--steps-per-beat B] [--pin] [--quick]
//            [--commit-interval D] [--kill-after A] [--logs DIR]
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
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
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
std::atomic<pid_t> g_dispatcher{0};  // replaced by the restart's thread
std::string g_work;
std::string g_trace;  // the tracefs instance counting the dispatcher's syncs, once made
std::string g_logs;   // --logs: where the work directory's logs are copied before it is removed

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
    if (!g_logs.empty()) {
      fs::create_directories(g_logs, ignored);
      for (const auto& e : fs::directory_iterator(g_work, ignored)) {
        if (e.path().extension() == ".log") {
          fs::copy_file(e.path(), fs::path(g_logs) / e.path().filename(),
                        fs::copy_options::overwrite_existing, ignored);
        }
      }
    }
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
  // A log's tail may follow the reason: the reason again, last, for whoever reads only the end.
  if (const size_t nl = message.find('\n'); nl != std::string::npos) {
    std::fprintf(stderr, "bench_hollow: %s\n", message.substr(0, nl).c_str());
  }
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
  // Made before the fork: the restart forks from a process with gRPC's threads running.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
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

// The port a dispatcher wrote to `port_file`, polled every 2 ms; fails if it exits first or
// writes none within `seconds`.
std::string WaitForPort(const std::string& port_file, pid_t pid, double seconds,
                        const std::string& log) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
  while (Clock::now() < until) {
    std::string port;
    std::ifstream in(port_file);
    in >> port;
    if (!port.empty()) return port;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != 0) {
      Fail(absl::StrCat("the dispatcher started on ", port_file,
                        " exited before it listened; the end of its log:\n", Tail(log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Fail(absl::StrCat("the dispatcher wrote no port within ", seconds, " s; the end of its log:\n",
                    Tail(log)));
}

// The text between the first `from` and the next `to` in `text`; "" if either is missing.
std::string Between(const std::string& text, const std::string& from, const std::string& to) {
  const size_t a = text.find(from);
  if (a == std::string::npos) return "";
  const size_t b = text.find(to, a + from.size());
  return b == std::string::npos ? "" : text.substr(a + from.size(), b - a - from.size());
}

double DurationSeconds(const std::string& text) {
  absl::Duration d;
  return absl::ParseDuration(text, &d) ? absl::ToDoubleSeconds(d) : -1;
}

int OpenFds(pid_t pid) {
  std::error_code error;
  int n = 0;
  for (fs::directory_iterator it(absl::StrCat("/proc/", pid, "/fd"), error), end;
       !error && it != end; it.increment(error)) {
    ++n;
  }
  return n;
}

// The TCP sockets of a local port, from /proc/net/tcp and tcp6 (gRPC listens on an IPv6 socket,
// the clients connect over IPv4): the listener's accept queue, the server side's established and
// close-wait connections and half-open ones (SYN received), and the clients' connections still
// waiting for the answer to their SYN.
struct PortSockets {
  double at_s = 0;  // when sampled, from the kill
  int accept_queue = 0, established = 0, close_wait = 0, syn_sent = 0, syn_recv = 0;
};
PortSockets SocketsOf(int port) {
  PortSockets p;
  std::istringstream in(ReadFile("/proc/net/tcp") + ReadFile("/proc/net/tcp6"));
  std::string line;
  const std::string hex = absl::StrFormat(":%04X", port);
  while (std::getline(in, line)) {  // the two headers match no state below
    std::istringstream f(line);
    std::string sl, local, remote, state, queues;
    f >> sl >> local >> remote >> state >> queues;
    const bool server = local.size() >= 5 && local.compare(local.size() - 5, 5, hex) == 0;
    const bool client = remote.size() >= 5 && remote.compare(remote.size() - 5, 5, hex) == 0;
    if (state == "0A" && server) {  // LISTEN: rx_queue is the accept queue
      p.accept_queue = static_cast<int>(std::strtol(queues.substr(9).c_str(), nullptr, 16));
    } else if (state == "01" && server) {
      ++p.established;
    } else if (state == "08" && server) {
      ++p.close_wait;
    } else if (state == "03" && server) {
      ++p.syn_recv;
    } else if (state == "02" && client) {
      ++p.syn_sent;
    }
  }
  return p;
}

// What the restart measured (--kill-after), times from the driver's clock.
struct Restart {
  Clock::time_point kill, dead, listen, serving;
  double old_cpu_s = 0, old_write_bytes = 0, old_wchar = 0, old_rss_mib = 0;
  bool journal_kept = false;
  uint64_t probes = 0;  // Locate calls until one was answered (or the window's end)
  bool answered = false;
  // The new dispatcher's open descriptors, once a second from when it listens to the window's end
  // (its connections: gRPC stops accepting at its limit), and the old one's just before the kill.
  std::mutex mu;
  std::vector<int> fds;              // guarded by mu
  std::vector<PortSockets> sockets;  // guarded by mu, sampled with fds
  int port = 0;
  int old_fds = 0;
  std::atomic<bool> serving_again{false};
  // The thread that started the new dispatcher must outlive it: the dispatcher is started with
  // PR_SET_PDEATHSIG, which fires when the thread that forked it ends, not the process.
  std::atomic<bool> release{false};
};

// SIGKILLs the dispatcher at `at`, keeps its journal as the kill left it, starts it again with
// `args` (the same work directory and port) and waits until it answers a Locate.
void KillAndRestart(const std::vector<std::string>& args, int cpu, const std::string& work,
                    const std::string& port_file, const std::string& address,
                    const std::string& job, hollow::Shared* sh, Clock::time_point at,
                    Clock::time_point end, Restart* r) {
  std::this_thread::sleep_until(at);
  const pid_t old = g_dispatcher;
  r->old_fds = OpenFds(old);
  r->old_cpu_s = CpuSeconds(old);
  r->old_write_bytes = ProcField(old, "io", "write_bytes");
  r->old_wchar = ProcField(old, "io", "wchar");
  r->old_rss_mib = ProcField(old, "status", "VmHWM") / 1024;
  r->kill = Clock::now();
  sh->kill_ns = hollow::ToNs(r->kill);
  kill(old, SIGKILL);
  waitpid(old, nullptr, 0);
  g_dispatcher = 0;
  r->dead = Clock::now();
  sh->dead_ns = hollow::ToNs(r->dead);
  // A hard link, not a copy (the restart is not delayed): the new dispatcher cuts a torn tail in
  // place (never replayed either way), then compacts by renaming a new file over the journal.
  r->journal_kept =
      link((work + "/dispatcher/journal").c_str(), (work + "/journal.at-kill").c_str()) == 0;
  unlink(port_file.c_str());
  const std::string log = work + "/dispatcher-restarted.log";
  g_dispatcher = Spawn(args, log, cpu);
  WaitForPort(port_file, g_dispatcher, 120, log);
  r->listen = Clock::now();
  sh->listen_ns = hollow::ToNs(r->listen);
  croupier::rpc::DispatcherClientOptions options;
  options.call_timeout = absl::Seconds(1);
  options.timeout = absl::Seconds(1);
  options.own_connection = true;
  auto probe = croupier::rpc::DispatcherClient::Create(address, options);
  croupier::v1::LocateRequest req;
  req.set_job(job);
  req.set_num_batches(1);
  // Its descriptors and sockets meanwhile, once a second from now to the window's end, on a
  // thread of their own.
  std::thread sampler([r, end] {
    for (auto next = Clock::now(); next < end && !r->release.load();
         next += std::chrono::seconds(1)) {
      std::this_thread::sleep_until(next);
      const int n = g_dispatcher > 0 ? OpenFds(g_dispatcher) : 0;
      PortSockets sockets = SocketsOf(r->port);
      // Reading /proc/net/tcp6 with 20,000 sockets under load can take longer than the period.
      sockets.at_s = Seconds(Clock::now() - r->kill);
      std::lock_guard<std::mutex> lock(r->mu);
      r->fds.push_back(n);
      r->sockets.push_back(sockets);
    }
  });
  // Until the window's end: a dispatcher that never answers is a result, not a failure.
  while (Clock::now() < end) {
    ++r->probes;
    if (probe->Locate(req).ok()) {
      r->answered = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r->serving = Clock::now();
  r->serving_again = true;
  while (!r->release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  sampler.join();
}

// What the positions showed (see the file's comment): per consumer, A (acknowledged by the old
// dispatcher), H (held after the restart), S (sent to the old one).
struct PositionCheck {
  uint64_t checked = 0, missing = 0;      // consumers compared; ranks GetJob did not list
  uint64_t lost = 0, lost_max_steps = 0;  // H < A
  uint64_t never_sent = 0;                // H > S
  uint64_t unanswered_kept = 0;           // A < H <= S
  uint64_t went_back = 0;  // the first position the new dispatcher acknowledged was below H
  std::string replayed_restart, replayed_check;  // "N entries (B bytes)" of each log
};

// Replays the kept journal in a dispatcher of its own (port 0) and compares each rank's position.
PositionCheck CheckPositions(const std::string& bin, const std::string& work, uint32_t consumers,
                             uint32_t jobs, hollow::Shared* sh, const hollow::Config& cfg) {
  PositionCheck pc;
  const std::string dir = work + "/check", port_file = work + "/check.port";
  fs::create_directories(dir);
  if (rename((work + "/journal.at-kill").c_str(), (dir + "/journal").c_str()) != 0) {
    Fail("the journal kept at the kill cannot be moved for the check");
  }
  const pid_t check =
      Spawn({bin, "dispatcher", "--port", "0", "--port-file", port_file, "--work-dir", dir},
            work + "/check.log");
  g_children.push_back(check);
  const std::string port = WaitForPort(port_file, check, 120, work + "/check.log");
  std::vector<uint64_t> held(consumers, 0);
  std::vector<bool> listed(consumers, false);
  {
    croupier::rpc::DispatcherClientOptions options;
    options.timeout = absl::Seconds(30);
    auto client = croupier::rpc::DispatcherClient::Create("127.0.0.1:" + port, options);
    for (uint32_t j = 0; j < jobs; ++j) {
      croupier::v1::GetJobRequest req;
      req.set_name(cfg.JobName(j));
      auto r = client->GetJob(req);
      if (!r.ok()) Fail("GetJob of the check dispatcher: " + r.status().ToString());
      const uint64_t spe = sh->steps_per_epoch[j].load();
      for (const croupier::v1::RankPosition& p : r->rank_positions()) {
        const uint64_t c = uint64_t{p.rank()} * jobs + j;
        if (c >= consumers) continue;
        held[c] = p.epoch() * spe + p.step();
        listed[c] = true;
      }
    }
  }
  kill(check, SIGKILL);
  waitpid(check, nullptr, 0);
  g_children.pop_back();
  for (uint32_t c = 0; c < consumers; ++c) {
    hollow::ConsumerSlot& slot = sh->consumer(c);
    if (!listed[c]) {
      ++pc.missing;
      continue;
    }
    ++pc.checked;
    const uint64_t a = slot.acked_before_kill.load(), s = slot.sent_before_kill.load();
    const uint64_t h = held[c];
    if (h < a) {
      ++pc.lost;
      pc.lost_max_steps = std::max(pc.lost_max_steps, a - h);
    } else if (h > s) {
      ++pc.never_sent;
    } else if (h > a) {
      ++pc.unanswered_kept;
    }
    if (slot.back_ns.load() != 0 && slot.first_back_position.load() < h) ++pc.went_back;
  }
  pc.replayed_restart =
      Between(ReadFile(work + "/dispatcher-restarted.log"), "replayed ", " of journal");
  pc.replayed_check = Between(ReadFile(work + "/check.log"), "replayed ", " of journal");
  return pc;
}

struct Options {
  uint32_t consumers = 1000, producers = 0, jobs = 1, processes = 2, threads = 0;
  uint32_t steps_per_beat = 1;
  double seconds = 30, warmup = 5;
  double kill_after = -1;  // seconds into the window; < 0: no kill
  std::string logs;        // where the work directory's logs are copied at the end
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
    } else if (a == "--kill-after") {
      o.kill_after = std::stod(next());
    } else if (a == "--logs") {
      o.logs = next();
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      Fail(
          "usage: bench_hollow [--consumers N] [--producers P] [--jobs J] [--processes K] "
          "[--threads T] [--seconds S] [--warmup W] [--steps-per-beat B] [--commit-interval D] "
          "[--kill-after A] [--logs DIR] [--pin] [--quick]");
    }
  }
  if (o.quick) o.seconds = std::min(o.seconds, 10.0);
  if (!producers_given) o.producers = std::max<uint32_t>(1, o.consumers / 10);
  if (o.jobs < 1 || o.jobs > hollow::kMaxJobs) Fail("--jobs must be 1 to 64");
  if (o.consumers < o.jobs) Fail("--consumers must be at least --jobs");
  if (o.kill_after >= o.seconds) Fail("--kill-after must be within the window (--seconds)");
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
  uint64_t status_bytes = 0;
  double status_back_s = -1;  // with a kill: when the driver's own client was answered again
  for (auto next = window_start; next < window_end; next += std::chrono::seconds(1)) {
    std::this_thread::sleep_until(next);
    croupier::v1::StatusRequest req;
    const auto sent = Clock::now();
    // With a kill, within its second: a dispatcher away does not hold the loop past the window.
    const croupier::CallDeadline bounded(o.kill_after >= 0 ? absl::Now() + absl::Seconds(1)
                                                           : absl::InfiniteFuture());
    auto r = status_client->GetStatus(req);
    status_stats.Add(hollow::kGetStatus, Clock::now() - sent, true);
    if (!r.ok()) {
      status_stats.Fail(hollow::kGetStatus, r.status());
    } else {
      status_bytes = std::max<uint64_t>(status_bytes, r->ByteSizeLong());
      const int64_t kill = sh->kill_ns.load();
      if (kill != 0 && status_back_s < 0) status_back_s = (hollow::ToNs(Clock::now()) - kill) / 1e9;
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

  std::string recovery;  // the summary's recovery fields, "" without a kill
  if (o.kill_after >= 0) {
    if (!restart.journal_kept) Fail("the journal could not be kept at the kill (link failed)");
    const PositionCheck pc = CheckPositions(bin, work, o.consumers, o.jobs, sh, cfg);
    const int64_t kill_ns = sh->kill_ns.load();
    auto since_kill = [&](int64_t ns) { return (ns - kill_ns) / 1e9; };
    std::vector<double> consumers_back, producers_back;
    uint64_t consumers_stopped = 0;
    for (uint32_t c = 0; c < o.consumers; ++c) {
      const hollow::ConsumerSlot& slot = sh->consumer(c);
      consumers_stopped += slot.lost.load() != 0;
      if (const int64_t ns = slot.back_ns.load(); ns != 0) consumers_back.push_back(since_kill(ns));
    }
    for (uint32_t p = 0; p < o.producers; ++p) {
      if (const int64_t ns = sh->producer_back_ns(p).load(); ns != 0) {
        producers_back.push_back(since_kill(ns));
      }
    }
    std::sort(consumers_back.begin(), consumers_back.end());
    std::sort(producers_back.begin(), producers_back.end());
    const uint64_t consumers_not_back = o.consumers - consumers_back.size();
    const uint64_t producers_not_back = o.producers - producers_back.size();
    auto last = [](const std::vector<double>& v) { return v.empty() ? -1.0 : v.back(); };
    auto median = [](const std::vector<double>& v) { return v.empty() ? -1.0 : v[v.size() / 2]; };
    const double all_back_s = consumers_not_back + producers_not_back == 0
                                  ? std::max(last(consumers_back), last(producers_back))
                                  : -1.0;
    const double listen_s = Seconds(restart.listen - restart.kill);
    const double serving_s = restart.answered ? Seconds(restart.serving - restart.kill) : -1;
    std::string fds_by_second, sockets_by_second;
    int fds_max = 0;
    {
      std::lock_guard<std::mutex> lock(restart.mu);
      for (int n : restart.fds) {
        absl::StrAppend(&fds_by_second, fds_by_second.empty() ? "" : ", ", n);
        fds_max = std::max(fds_max, n);
      }
      for (const PortSockets& p : restart.sockets) {
        absl::StrAppend(&sockets_by_second, sockets_by_second.empty() ? "" : ", ", "[",
                        absl::StrFormat("%.1f", p.at_s), ", ", p.accept_queue, ", ", p.syn_recv,
                        ", ", p.established, ", ", p.close_wait, ", ", p.syn_sent, "]");
      }
    }
    const std::string restarted_log = ReadFile(work + "/dispatcher-restarted.log");
    // gRPC's "Failed accept4: Too many open files": the new dispatcher at its descriptor limit.
    uint64_t accept_failures = 0;
    for (size_t at = restarted_log.find("Failed accept4"); at != std::string::npos;
         at = restarted_log.find("Failed accept4", at + 1)) {
      ++accept_failures;
    }
    const double replay_s =
        DurationSeconds(Between(restarted_log, work + "/dispatcher/journal in ", ": "));
    const double compact_s = DurationSeconds(Between(
        restarted_log, "then the entries written meanwhile) in ", ", the dispatcher's lock"));
    const bool same_replay =
        !pc.replayed_restart.empty() && pc.replayed_restart == pc.replayed_check;
    std::string by_code, by_code_words;
    for (int c = 1; c < hollow::kCodes; ++c) {
      if (all.errors_by_code[c] == 0) continue;
      const std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
      absl::StrAppend(&by_code, by_code.empty() ? "" : ", ", "\"", name,
                      "\": ", all.errors_by_code[c]);
      absl::StrAppend(&by_code_words, by_code_words.empty() ? "" : ", ", all.errors_by_code[c], " ",
                      name);
    }
    const bool positions_ok = pc.lost == 0 && pc.never_sent == 0 && pc.missing == 0 &&
                              pc.went_back == 0 && pc.checked == o.consumers && same_replay;
    const bool recovery_met = serving_s >= 0 && serving_s <= 10 && all_back_s >= 0 &&
                              all_back_s <= 30 && positions_ok && consumers_stopped == 0;
    recovery = absl::StrFormat(
        ", \"kill_after_s\": %.1f, \"recovery_status_client_s\": %.3f, \"recovery_dead_s\": %.3f, "
        "\"recovery_listen_s\": %.3f, "
        "\"recovery_serving_s\": %.3f, \"recovery_serving_probes\": %llu, "
        "\"recovery_replay_s\": %.3f, \"recovery_compact_s\": %.3f, \"replayed\": \"%s\", "
        "\"recovery_consumers_back_p50_s\": %.3f, \"recovery_consumers_back_max_s\": %.3f, "
        "\"recovery_producers_back_p50_s\": %.3f, \"recovery_producers_back_max_s\": %.3f, "
        "\"recovery_all_back_s\": %.3f, \"consumers_not_back\": %llu, "
        "\"producers_not_back\": %llu, \"consumers_stopped\": %llu, "
        "\"producers_registered_again\": %llu, \"max_consumer_gap_before_kill_s\": %.3f, "
        "\"positions_checked\": %llu, \"positions_missing\": %llu, \"positions_lost\": %llu, "
        "\"positions_lost_max_steps\": %llu, \"positions_never_sent\": %llu, "
        "\"positions_unanswered_kept\": %llu, \"positions_went_back\": %llu, "
        "\"replay_checked_same\": %s, \"errors_by_code\": {%s}, \"dispatcher_fds_before_kill\": "
        "%d, "
        "\"restarted_fds_max\": %d, \"restarted_fds_by_second_from_listening\": [%s], "
        "\"sockets_by_second\": \"seconds from the kill, accept queue, SYN received, established, "
        "close-wait, "
        "clients in SYN-SENT\", \"restarted_sockets_by_second_from_listening\": [%s], "
        "\"restarted_accept_failures\": %llu, \"recovery_met\": %s",
        o.kill_after, status_back_s, Seconds(restart.dead - restart.kill), listen_s, serving_s,
        static_cast<unsigned long long>(restart.probes), replay_s, compact_s, pc.replayed_restart,
        median(consumers_back), last(consumers_back), median(producers_back), last(producers_back),
        all_back_s, static_cast<unsigned long long>(consumers_not_back),
        static_cast<unsigned long long>(producers_not_back),
        static_cast<unsigned long long>(consumers_stopped),
        static_cast<unsigned long long>(all.producers_reregistered),
        all.max_consumer_gap_before_kill_s, static_cast<unsigned long long>(pc.checked),
        static_cast<unsigned long long>(pc.missing), static_cast<unsigned long long>(pc.lost),
        static_cast<unsigned long long>(pc.lost_max_steps),
        static_cast<unsigned long long>(pc.never_sent),
        static_cast<unsigned long long>(pc.unanswered_kept),
        static_cast<unsigned long long>(pc.went_back), same_replay ? "true" : "false", by_code,
        restart.old_fds, fds_max, fds_by_second, sockets_by_second,
        static_cast<unsigned long long>(accept_failures), recovery_met ? "true" : "false");
    std::fprintf(
        stderr,
        "bench_hollow: recovery: SIGKILL at %.1f s of the window; listening again after %.2f s "
        "(replay %.2f s, compaction %.2f s), serving (a Locate answered) after %.2f s; every "
        "client back %s (consumers p50 %.2f s, max %.2f s; producers p50 %.2f s, max %.2f s; "
        "before the kill the longest silence of a consumer was %.1f s); %llu consumers stopped "
        "(NOT_FOUND/PERMISSION_DENIED), %llu producers registered again; positions of %llu "
        "consumers checked against the %s replayed: %llu lost (max %llu steps), %llu never "
        "sent, %llu acknowledgements journaled whose answer the kill cut off, %llu went back "
        "after the restart, replay of the kept journal %s; errors seen: %s; the new dispatcher's "
        "descriptors peaked at %d (the old one had %d), %llu failed accepts in its log\n",
        o.kill_after, listen_s, replay_s, compact_s, serving_s,
        all_back_s >= 0 ? absl::StrFormat("after %.2f s", all_back_s).c_str()
                        : absl::StrFormat("not reached: %llu consumers and %llu producers not back "
                                          "by the window's end",
                                          static_cast<unsigned long long>(consumers_not_back),
                                          static_cast<unsigned long long>(producers_not_back))
                              .c_str(),
        median(consumers_back), last(consumers_back), median(producers_back), last(producers_back),
        all.max_consumer_gap_before_kill_s, static_cast<unsigned long long>(consumers_stopped),
        static_cast<unsigned long long>(all.producers_reregistered),
        static_cast<unsigned long long>(pc.checked), pc.replayed_restart.c_str(),
        static_cast<unsigned long long>(pc.lost),
        static_cast<unsigned long long>(pc.lost_max_steps),
        static_cast<unsigned long long>(pc.never_sent),
        static_cast<unsigned long long>(pc.unanswered_kept),
        static_cast<unsigned long long>(pc.went_back),
        same_replay ? "the same entries" : "NOT the same entries",
        by_code_words.empty() ? "none" : by_code_words.c_str(), fds_max, restart.old_fds,
        static_cast<unsigned long long>(accept_failures));
  }
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
      "\"load_before\": %.2f, \"load_after\": %.2f, \"met_period\": %s, \"met\": %s%s}\n",
      o.consumers, o.producers, o.jobs, o.processes, o.threads, o.steps_per_beat,
      o.pin ? "true" : "false", s, register_s, all.interval_s, all.takeover_s, hb.size() / s,
      (all.latency_ms[hollow::kProducerHeartbeat].size() +
       all.latency_ms[hollow::kProducerWait].size()) /
          s,
      all.latency_ms[hollow::kLocate].size() / s, Percentile(hb, 0.5), hb_p99, Max(hb),
      Percentile(all.lateness_ms, 0.99), cpu_s / s, peak_rss_mib, write_bytes / s, wchar_bytes / s,
      journal_bytes, syncs_counted && syncs >= 0 ? syncs / s : -1.0,
      static_cast<unsigned long long>(status_bytes), Percentile(status, 0.5), Max(status),
      static_cast<unsigned long long>(all.consumers_missed),
      static_cast<unsigned long long>(all.producers_missed),
      static_cast<unsigned long long>(all.late_answers), all.max_consumer_gap_s,
      all.max_producer_gap_s, static_cast<unsigned long long>(all.unlocated),
      static_cast<unsigned long long>(all.skipped), (clients1 - clients0) / s,
      static_cast<unsigned long long>(all.tasks_taken),
      static_cast<unsigned long long>(all.tasks_finished),
      static_cast<unsigned long long>(all.tasks_revoked), static_cast<unsigned long long>(errors),
      load0, load1, met_period ? "true" : "false", met_period && hb_p99 <= 50 ? "true" : "false",
      recovery.c_str());
  std::fflush(stdout);
  return 0;
}
