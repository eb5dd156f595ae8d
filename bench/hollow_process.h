// The driver side of bench_hollow (bench/bench_hollow.cc): the processes it starts (the
// dispatcher, the client processes), what it reads of them in /proc (CPU, memory, descriptors,
// the port's sockets), the tracefs counter of the dispatcher's syncs, and the one cleanup that
// every failure runs (Fail). Used by that one program; not thread-safe except where a comment
// says (g_dispatcher is replaced by the restart's thread).
#ifndef CROUPIER_BENCH_HOLLOW_PROCESS_H_
#define CROUPIER_BENCH_HOLLOW_PROCESS_H_

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/hollow_clients.h"

namespace croupier::bench::hollow_driver {

namespace fs = std::filesystem;
namespace hollow = croupier::bench::hollow;
using hollow::Clock;

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What Fail cleans up: every process this program started, and the work directory.
inline std::vector<pid_t> g_children;
inline std::atomic<pid_t> g_dispatcher{0};  // replaced by the restart's thread
inline std::string g_work;
inline std::string g_trace;  // the tracefs instance counting the dispatcher's syncs, once made
inline std::string
    g_logs;  // --logs: where the work directory's logs are copied before it is removed

// Counts the fdatasync and fsync calls of a process and of every thread it starts, in a tracefs
// instance of its own (the syscall tracepoints, pid-filtered with event-fork), no strace: the
// events of a window are the ring buffer's entries (and overruns) between Start and Stop. Needs
// root and tracefs; without them Create returns "".
inline std::string WriteTrace(const std::string& file, const std::string& text) {
  std::ofstream out(g_trace + "/" + file);
  out << text;
  out.flush();
  return out ? "" : file;
}

inline bool CreateSyncCounter(pid_t pid) {
  const std::string root = "/sys/kernel/tracing/instances";
  if (access(root.c_str(), W_OK) != 0) {
    std::fprintf(stderr,
                 "bench_hollow: the dispatcher's syncs are not counted: %s is not writable (as "
                 "root: mount -t tracefs nodev /sys/kernel/tracing)\n",
                 root.c_str());
    return false;
  }
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
inline double SyncsSinceLast() {
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

inline void RemoveSyncCounter() {
  if (g_trace.empty()) return;
  WriteTrace("events/enable", "0");
  rmdir(g_trace.c_str());
  g_trace.clear();
}

inline void KillAll() {
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

[[noreturn]] inline void Fail(const std::string& message) {
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

inline std::string Tail(const std::string& path) {
  const std::string log = ReadFile(path);
  return log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
}

inline std::string CroupierBin() {
  if (const char* bin = std::getenv("CROUPIER_BIN"); bin != nullptr && *bin) return bin;
  return (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin" / "croupier")
      .string();
}

inline void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// Starts argv (on CPU `cpu` if >= 0) with stdout and stderr going to `log`; returns its pid. The
// child dies with this process.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, int cpu = -1) {
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

inline void RunOrFail(const std::vector<std::string>& argv, const std::string& log) {
  int status = 0;
  waitpid(Spawn(argv, log), &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Fail(absl::StrCat(argv[0], " ", argv[1], " failed: ", ReadFile(log)));
  }
}

// utime + stime of a process, in seconds; -1 once it has exited.
inline double CpuSeconds(pid_t pid) {
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
inline double ProcField(pid_t pid, const std::string& file, const std::string& key) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/", file)));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1));
  }
  return 0;
}

inline double Percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

inline double Max(const std::vector<float>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The port a dispatcher wrote to `port_file`, polled every 2 ms; fails if it exits first or
// writes none within `seconds`.
inline std::string WaitForPort(const std::string& port_file, pid_t pid, double seconds,
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
inline std::string Between(const std::string& text, const std::string& from,
                           const std::string& to) {
  const size_t a = text.find(from);
  if (a == std::string::npos) return "";
  const size_t b = text.find(to, a + from.size());
  return b == std::string::npos ? "" : text.substr(a + from.size(), b - a - from.size());
}

inline double DurationSeconds(const std::string& text) {
  absl::Duration d;
  return absl::ParseDuration(text, &d) ? absl::ToDoubleSeconds(d) : -1;
}

inline int OpenFds(pid_t pid) {
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
inline PortSockets SocketsOf(int port) {
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

}  // namespace croupier::bench::hollow_driver

#endif  // CROUPIER_BENCH_HOLLOW_PROCESS_H_
