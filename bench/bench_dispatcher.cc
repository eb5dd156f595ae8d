// The dispatcher under 1,000 simulated consumers' heartbeats (the issue's scale goal: "keeps its
// CPU use and its RPC latency stated in the docs").
//
// Starts a real `croupier dispatcher` process (journal on, fdatasync per entry, as deployed),
// creates a job for N consumers (default 1,000) over a small `croupier synth` dataset, registers
// ranks 0..N-1 over gRPC (rpc::DispatcherClient) and sends each one's ConsumerHeartbeat every
// heartbeat interval (the interval the dispatcher answers, 1 s, which the consumer library uses),
// spread evenly over the interval, from a few client threads, each heartbeat acknowledging a
// position one step further (so each one is journaled, as a training consumer's is). Two
// simulated producers heartbeat every interval too. Over the measurement window it reports the
// dispatcher's CPU in cores (/proc/PID/stat utime+stime), its peak RSS (VmHWM), the heartbeat
// RPC latency p50/p99/max seen by the clients, heartbeats/s handled, and the journal entries
// written per second (each one fdatasync'd under the dispatcher's mutex: src/dispatcher/journal.h).
// All consumers are served if every heartbeat succeeded and no consumer went longer than the
// takeover gap (3 intervals) without an answered heartbeat.
//
// One JSON line on stdout ({"bench": "scale", "case": "dispatcher", ...}), read by bench/run.py.
//
// usage: build/bench/bench_dispatcher [--quick] [--seconds S] [--consumers N] [--threads T]
//                                 [--shared-connection]
//   the croupier binary: $CROUPIER_BIN, else ../bin/croupier beside this program.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/croupier.pb.h"
#include "src/rpc/dispatcher_client.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// What Die cleans up: the dispatcher process and the work directory, once made.
pid_t g_dispatcher = 0;
std::string g_work;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_dispatcher: %s\n", message.c_str());
  if (g_dispatcher > 0) {
    kill(g_dispatcher, SIGKILL);
    waitpid(g_dispatcher, nullptr, 0);
  }
  if (!g_work.empty()) {
    std::error_code ignored;
    fs::remove_all(g_work, ignored);
  }
  std::exit(1);
}

std::string CroupierBin() {
  if (const char* bin = std::getenv("CROUPIER_BIN"); bin != nullptr && *bin) return bin;
  return (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin" / "croupier")
      .string();
}

// Starts argv with stdout and stderr going to `log`; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void RunOrDie(const std::vector<std::string>& argv, const std::string& log) {
  int status = 0;
  waitpid(Spawn(argv, log), &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    Die(absl::StrCat(argv[0], " ", argv[1], " failed: ", text.str()));
  }
}

// utime + stime of a process, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.rfind(')') == std::string::npos) Die(absl::StrCat("process ", pid, " has exited"));
  // Fields after the command name (in parentheses, which may hold spaces): state is field 3;
  // utime and stime are fields 14 and 15.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A /proc/PID/status field in kB (VmHWM: peak RSS).
double StatusKb(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1));
  }
  return 0;
}

// Entries in the dispatcher's journal (src/dispatcher/journal.h: a 16-byte header, then entries
// of uint64 length | uint32 CRC | payload | uint32 CRC). Each Append is one fdatasync.
uint64_t JournalEntries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(16);
  uint64_t entries = 0;
  while (true) {
    uint64_t length = 0;
    if (!in.read(reinterpret_cast<char*>(&length), 8)) break;
    in.seekg(static_cast<std::streamoff>(4 + length + 4), std::ios::cur);
    if (!in) break;
    ++entries;
  }
  return entries;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

struct SimConsumer {
  uint32_t rank = 0;
  uint64_t id = 0;
  uint64_t epoch = 0, step = 0, batches = 0;
  std::string lease;  // what its registration returned; every later heartbeat carries it
  Clock::time_point last_answered;
  double max_gap_s = 0;  // the longest time without an answered heartbeat, in the window
};

struct ThreadResult {
  std::vector<double> latency_ms;   // calls due in the window
  std::vector<double> lateness_ms;  // how late after its due time each was sent
  uint64_t heartbeats = 0, errors = 0, not_found = 0;
  uint64_t answer_bytes = 0;  // of the heartbeats counted
  std::string first_error;
  double max_gap_s = 0;
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  double seconds = 30;
  uint32_t consumers = 1000;
  int threads = 16;
  bool shared_connection = false;  // all client threads over one connection (before 29 November)
  const int producers = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") {
      quick = true;
    } else if (a == "--seconds") {
      seconds = std::stod(next());
    } else if (a == "--consumers") {
      consumers = static_cast<uint32_t>(std::stoul(next()));
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--shared-connection") {
      shared_connection = true;
    } else {
      Die(
          "usage: bench_dispatcher [--quick] [--seconds S] [--consumers N] [--threads T] "
          "[--shared-connection]");
    }
  }
  if (quick) seconds = std::min(seconds, 10.0);
  const std::string bin = CroupierBin();
  if (access(bin.c_str(), X_OK) != 0) Die(bin + " is not an executable: build croupier first");

  char tmpl[] = "/tmp/croupier-bench-dispatcher-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  const std::string work = tmpl;
  g_work = work;
  fs::create_directories(work + "/dispatcher");

  // A small dataset: 100 steps per epoch per consumer, batch size 1; epochs without end, so that
  // positions can advance for as long as the run lasts.
  const uint64_t records = uint64_t{consumers} * 100;
  RunOrDie({bin, "synth", "--out", work + "/data", "--files", "4", "--records",
            std::to_string(records), "--image-bytes", "16", "--quiet"},
           work + "/synth.log");
  const std::string port_file = work + "/port";
  const pid_t dispatcher =
      Spawn({bin, "dispatcher", "--port", "0", "--port-file", port_file, "--work-dir",
             work + "/dispatcher"},
            work + "/dispatcher.log");
  g_dispatcher = dispatcher;
  std::string port;
  for (int i = 0; i < 300 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(port_file);
    in >> port;
  }
  auto cleanup = [&] {
    kill(dispatcher, SIGTERM);
    int status = 0;
    waitpid(dispatcher, &status, 0);
    g_dispatcher = 0;
    fs::remove_all(work);
    g_work.clear();
  };
  if (port.empty()) {
    cleanup();
    Die("the dispatcher wrote no port within 15 s");
  }
  const std::string address = "127.0.0.1:" + port;
  RunOrDie({bin, "job", "create", "--dispatcher", address, "--name", "hb", "--files",
            work + "/data/*.tfrecord", "--features", "id:int64,label:int64,image:bytes",
            "--batch-size", "1", "--consumers", std::to_string(consumers), "--seed", "1",
            "--epochs", "0"},
           work + "/job.log");

  // Register every rank (as Consumer::Connect does), spread over the threads.
  std::vector<SimConsumer> sims(consumers);
  std::vector<std::unique_ptr<croupier::rpc::DispatcherClient>> clients;
  for (int t = 0; t < threads + producers; ++t) {
    // A dispatcher that stopped answering ends the run within seconds, not the library's 60 s.
    croupier::rpc::DispatcherClientOptions options;
    options.call_timeout = absl::Seconds(5);
    options.timeout = absl::Seconds(5);
    // Each thread stands in for separate consumer processes: a connection of its own (sharing
    // one, every call of the run went over a single HTTP/2 connection).
    options.own_connection = !shared_connection;
    clients.push_back(croupier::rpc::DispatcherClient::Create(address, options));
  }
  std::atomic<bool> unreachable{false};
  std::atomic<uint64_t> steps_per_epoch{0};
  std::atomic<bool> failed{false};
  std::string fail_message;
  std::mutex fail_mu;
  const auto reg_start = Clock::now();
  {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (uint32_t r = t; r < consumers; r += threads) {
          croupier::v1::ConsumerHeartbeatRequest request;
          request.set_job("hb");
          request.set_rank(r);
          request.set_world(consumers);
          auto response = clients[t]->ConsumerHeartbeat(request);
          if (!response.ok()) {
            std::lock_guard<std::mutex> lock(fail_mu);
            failed = true;
            fail_message = response.status().ToString();
            return;
          }
          sims[r].rank = r;
          sims[r].id = response->consumer_id();
          sims[r].lease = response->lease();
          steps_per_epoch = response->job().steps_per_epoch();
        }
      });
    }
    for (std::thread& th : pool) th.join();
  }
  const double register_s = std::chrono::duration<double>(Clock::now() - reg_start).count();
  if (failed) {
    cleanup();
    Die("registration failed: " + fail_message);
  }

  const auto interval = std::chrono::milliseconds(1000);  // checked against the response below
  const auto warmup = std::chrono::seconds(3);
  const auto start = Clock::now();
  const auto window_start = start + warmup;
  const auto window_end = window_start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(seconds));
  std::atomic<uint32_t> interval_ms{0};
  std::vector<ThreadResult> results(threads + producers);
  double cpu0 = 0, cpu1 = 0;
  uint64_t journal0 = 0, journal1 = 0;
  const std::string journal_path = work + "/dispatcher/journal";
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ThreadResult& res = results[t];
      std::vector<SimConsumer*> mine;
      for (uint32_t r = t; r < consumers; r += threads) mine.push_back(&sims[r]);
      for (SimConsumer* c : mine) c->last_answered = start;
      for (uint64_t k = 0;; ++k) {
        for (SimConsumer* c : mine) {
          // Consumer r beats at start + (r / N + k) intervals: spread evenly over the interval.
          const auto due = start + k * interval + interval * c->rank / consumers;
          if (due >= window_end) return;
          std::this_thread::sleep_until(due);
          if (unreachable) return;
          if (++c->step >= steps_per_epoch) {
            c->step = 0;
            ++c->epoch;
          }
          c->batches += 1;
          croupier::v1::ConsumerHeartbeatRequest request;
          request.set_consumer_id(c->id);
          request.set_lease(c->lease);
          request.set_job("hb");
          request.set_rank(c->rank);
          request.set_world(consumers);
          request.set_epoch(c->epoch);
          request.set_step(c->step);
          request.set_batches_received(c->batches);
          request.set_bytes_received(c->batches * 64);
          const auto sent = Clock::now();
          auto response = clients[t]->ConsumerHeartbeat(request);
          const auto answered = Clock::now();
          const bool in_window = due >= window_start;  // due in the window (sent maybe later)
          if (!response.ok()) {
            ++res.errors;
            if (response.status().code() == absl::StatusCode::kNotFound) ++res.not_found;
            if (absl::IsUnavailable(response.status()) ||
                absl::IsDeadlineExceeded(response.status())) {
              unreachable = true;
            }
            if (res.first_error.empty()) res.first_error = response.status().ToString();
            continue;
          }
          interval_ms = response->heartbeat_interval_ms();
          if (in_window) {
            ++res.heartbeats;
            res.answer_bytes += response->ByteSizeLong();
            res.latency_ms.push_back(std::chrono::duration<double, std::milli>(answered - sent)
                                         .count());
            res.lateness_ms.push_back(
                std::chrono::duration<double, std::milli>(sent - due).count());
            res.max_gap_s = std::max(
                res.max_gap_s,
                std::chrono::duration<double>(answered - c->last_answered).count());
          }
          c->last_answered = answered;
        }
      }
    });
  }
  for (int p = 0; p < producers; ++p) {
    pool.emplace_back([&, p] {
      ThreadResult& res = results[threads + p];
      croupier::rpc::DispatcherClient& client = *clients[threads + p];
      uint64_t id = 0;
      for (uint64_t k = 0;; ++k) {
        const auto due = start + k * interval + interval * p / producers;
        if (due >= window_end) return;
        std::this_thread::sleep_until(due);
        if (unreachable) return;
        croupier::v1::ProducerHeartbeatRequest request;
        request.set_producer_id(id);
        request.set_data_address(absl::StrCat("127.0.0.1:", 1 + p));  // never dialled
        request.set_free_task_slots(0);
        request.mutable_stats()->set_threads(4);
        auto response = client.ProducerHeartbeat(request);
        if (!response.ok()) {
          ++res.errors;
          if (res.first_error.empty()) res.first_error = response.status().ToString();
          continue;
        }
        id = response->producer_id();
      }
    });
  }
  std::this_thread::sleep_until(window_start);
  const double self0 = CpuSeconds(getpid());
  cpu0 = CpuSeconds(dispatcher);
  journal0 = JournalEntries(journal_path);
  std::this_thread::sleep_until(window_end);
  cpu1 = CpuSeconds(dispatcher);
  const double self1 = CpuSeconds(getpid());
  double load = 0;
  getloadavg(&load, 1);
  journal1 = JournalEntries(journal_path);
  for (std::thread& th : pool) th.join();
  const bool exited = waitpid(dispatcher, nullptr, WNOHANG) != 0;
  if (exited) g_dispatcher = 0;  // reaped: nothing to kill
  if (unreachable || exited) {
    for (const ThreadResult& r : results) {
      if (!r.first_error.empty()) {
        std::fprintf(stderr, "bench_dispatcher: %s\n", r.first_error.c_str());
        break;
      }
    }
    std::ifstream in(work + "/dispatcher.log");
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Die("the dispatcher stopped answering or exited during the run; the end of its log:\n" +
        log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
  }
  const double peak_rss_mib = StatusKb(dispatcher, "VmHWM") / 1024;
  cleanup();

  std::vector<double> latency, lateness;
  uint64_t heartbeats = 0, errors = 0, not_found = 0, answer_bytes = 0;
  double max_gap_s = 0;
  std::string first_error;
  for (ThreadResult& r : results) {
    answer_bytes += r.answer_bytes;
    latency.insert(latency.end(), r.latency_ms.begin(), r.latency_ms.end());
    lateness.insert(lateness.end(), r.lateness_ms.begin(), r.lateness_ms.end());
    heartbeats += r.heartbeats;
    errors += r.errors;
    not_found += r.not_found;
    max_gap_s = std::max(max_gap_s, r.max_gap_s);
    if (first_error.empty()) first_error = r.first_error;
  }
  if (!first_error.empty()) std::fprintf(stderr, "bench_dispatcher: %s\n", first_error.c_str());
  const double interval_s = interval_ms ? interval_ms / 1000.0 : 1.0;
  if (interval_ms != 1000) {
    std::fprintf(stderr, "bench_dispatcher: the dispatcher answered an interval of %u ms, not "
                 "the 1000 ms this program beats at\n", interval_ms.load());
  }
  const double max_ms = latency.empty() ? 0 : *std::max_element(latency.begin(), latency.end());
  const double p50 = Percentile(latency, 0.5), p99 = Percentile(latency, 0.99);
  const double late_p99 = Percentile(lateness, 0.99);
  const double expected = consumers * seconds / interval_s;
  // Served: every heartbeat answered, about as many as due, and no rank silent long enough to
  // be taken over (3 intervals).
  const bool met = errors == 0 && heartbeats >= 0.95 * expected && max_gap_s < 3 * interval_s;
  std::printf(
      "{\"bench\": \"scale\", \"case\": \"dispatcher\", \"consumers\": %u, \"producers\": %d, "
      "\"client_threads\": %d, \"shared_connection\": %s, \"seconds\": %.1f, \"heartbeat_interval_s\": %.3g, "
      "\"register_s\": %.2f, \"heartbeats_per_s\": %.1f, \"heartbeats_due_per_s\": %.1f, "
      "\"cpu_cores\": %.4f, \"peak_rss_mib\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
      "\"max_ms\": %.3f, \"send_late_p99_ms\": %.3f, \"max_gap_s\": %.3f, "
      "\"journal_entries_per_s\": %.1f, \"answer_bytes_per_heartbeat\": %.1f, "
      "\"errors\": %llu, \"not_found\": %llu, "
      "\"client_cpu_cores\": %.3f, \"load_average\": %.2f, \"met\": %s}\n",
      consumers, producers, threads, shared_connection ? "true" : "false", seconds, interval_s, register_s, heartbeats / seconds,
      expected / seconds, (cpu1 - cpu0) / seconds, peak_rss_mib, p50, p99, max_ms, late_p99,
      max_gap_s, (journal1 - journal0) / seconds,
      heartbeats ? static_cast<double>(answer_bytes) / heartbeats : 0.0,
      static_cast<unsigned long long>(errors),
      static_cast<unsigned long long>(not_found), (self1 - self0) / seconds, load,
      met ? "true" : "false");
  std::fflush(stdout);
  return 0;
}
