// The data plane side by side: croupier over TCP and over shared memory, ZeroMQ PUSH/PULL (the
// "one data process, many trainers" baseline users write themselves), and the limits of the
// machine (memory copy bandwidth, plain TCP with large writes), in one run on the same bytes.
//
// Every case forks its producer(s) and its consumers into processes of their own, so that each
// side's CPU time and peak RSS come from its own rusage:
//   producer process: serves one pre-built batch of the case's size for every request (croupier:
//     a data server over the transport; ZeroMQ: a PUSH socket sending zero-copy messages);
//   consumer process: K consumers, each with its own client (croupier: a DataClient fetching one
//     batch after another, or, for small batches, also through a Consumer's prefetch window of 4,
//     of 64, and the automatic one (the default, prefetch_batches 0: 4, grown to up to 64
//     for small batches) (its Prefetcher: groups of batches pipelined on one connection with
//     DataClient::FetchBatches), "window": 4, 64 or 0 (automatic); ZeroMQ: a PULL socket,
//     whose queue holds up to 1,000 messages), timing every fetch
//     (p50/p99 latency; with the window, the wait in Prefetcher::Next, as a trainer sees it).
//     The consumers do not read the batches' bytes.
// Output: one JSON line per case (see bench/run.py, which turns them into the tables and goals):
//   {"bench": "dataplane", "system": "croupier-tcp"|"croupier-shm"|"zeromq"|"memcpy"|"plain-tcp",
//    "bytes": S, "producers": P, "consumers": K, "gbps": .., "batches_per_s": .., "p50_us": ..,
//    "p99_us": .., "consumer_cpu_s_per_gb": .., "producer_cpu_s_per_gb": ..,
//    "consumer_rss_mib": .., "producer_rss_mib": ..}
// usage: bench_dataplane [--quick] [--only-bytes N] [--only-consumers K] [--only-system S]
//                        [--only-window W]
//   --only-*: just the cases of that batch size, consumer count, system ("tcp", "shm", "zeromq")
//   or window (1, 4, 64, 0: automatic), e.g. to profile one case under perf.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/fixed_source.h"
#include "croupier/batch.h"
#include "src/consumer/prefetcher.h"
#include "src/transport/batch_source.h"
#include "src/transport/transport.h"

namespace croupier {
namespace {

using bench::Die;
using bench::FixedSource;
using bench::MakeBatch;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double PeakRssMiB() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}


// --- process plumbing: a child reads commands and writes results on pipes ---
struct Pipe {
  int r = -1, w = -1;
  static Pipe Make() {
    int fds[2];
    if (::pipe(fds) != 0) Die("pipe");
    return Pipe{fds[0], fds[1]};
  }
};

void WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::write(fd, c, n);
    if (k <= 0) Die("pipe write");
    c += k;
    n -= k;
  }
}
void ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::read(fd, c, n);
    if (k <= 0) Die("pipe read");
    c += k;
    n -= k;
  }
}
void WriteString(int fd, const std::string& s) {
  const uint32_t n = s.size();
  WriteAll(fd, &n, 4);
  WriteAll(fd, s.data(), n);
}
std::string ReadString(int fd) {
  uint32_t n;
  ReadAll(fd, &n, 4);
  std::string s(n, '\0');
  ReadAll(fd, s.data(), n);
  return s;
}

struct SideResult {
  double cpu_s = 0;
  double rss_mib = 0;
};

struct ConsumerResult {
  SideResult side;
  double seconds = 0;
  uint64_t batches = 0;
  double p50_us = 0, p99_us = 0;
};

// A child process running `body(to_parent, from_parent)`; returns its pid.
template <typename Fn>
pid_t Spawn(Pipe& to_child, Pipe& to_parent, Fn body) {
  const pid_t pid = ::fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    ::close(to_child.w);
    ::close(to_parent.r);
    body(to_parent.w, to_child.r);
    std::fflush(stdout);
    std::_Exit(0);
  }
  ::close(to_child.r);
  ::close(to_parent.w);
  return pid;
}

void Reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("a child process failed");
}

// --- producers ---
// Tells the parent its address, then serves until told to stop; reports CPU and RSS of the time
// between "go" and "stop".
void CroupierProducer(Transport* transport, size_t bytes, int out, int in) {
  FixedSource source(MakeBatch(bytes));
  auto server = transport->StartServer(DataServerOptions{}, &source);
  if (!server.ok()) Die(std::string(server.status().message()));
  WriteString(out, (*server)->address());
  char c;
  ReadAll(in, &c, 1);  // go
  const double cpu0 = CpuSeconds();
  ReadAll(in, &c, 1);  // stop
  SideResult r{CpuSeconds() - cpu0, PeakRssMiB()};
  (*server)->Shutdown();
  WriteAll(out, &r, sizeof(r));
}

void ZmqProducer(size_t bytes, uint64_t total, int out, int in) {
  const Batch batch = MakeBatch(bytes);
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  push.bind("tcp://127.0.0.1:*");
  WriteString(out, push.get(zmq::sockopt::last_endpoint));
  char c;
  ReadAll(in, &c, 1);  // go
  const double cpu0 = CpuSeconds();
  for (uint64_t i = 0; i < total; ++i) {
    // Zero-copy: the message points at the batch buffer, which outlives the socket's use of it.
    zmq::message_t msg(const_cast<char*>(batch.bytes().data()), batch.bytes().size(), nullptr);
    if (!push.send(msg, zmq::send_flags::none)) Die("zmq send");
  }
  ReadAll(in, &c, 1);  // stop
  SideResult r{CpuSeconds() - cpu0, PeakRssMiB()};
  WriteAll(out, &r, sizeof(r));
}

// --- consumers ---
ConsumerResult Percentiles(std::vector<std::vector<double>>& lat, double seconds, double cpu) {
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ConsumerResult r;
  r.seconds = seconds;
  r.batches = all.size();
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2] * 1e6;
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)] * 1e6;
  }
  r.side = {cpu, PeakRssMiB()};
  return r;
}

// The measured part of a consumer process: says it is ready on `out`, waits for the go on `in`,
// runs consume(k, latencies) on a thread per consumer k, then writes the latencies' percentiles
// and the run's times to `out`. A consume that returns false (a batch missing or of the wrong
// size) ends the process, naming `what`.
void MeasureConsumers(int consumers, int out, int in, const char* what,
                      const std::function<bool(int k, std::vector<double>& latencies)>& consume) {
  char c;
  WriteAll(out, "r", 1);
  ReadAll(in, &c, 1);  // go
  std::vector<std::vector<double>> lat(consumers);
  std::atomic<bool> failed{false};
  const double cpu0 = CpuSeconds(), t0 = Now();
  std::vector<std::thread> threads;
  for (int k = 0; k < consumers; ++k) {
    threads.emplace_back([&, k] {
      if (!consume(k, lat[k])) failed = true;
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = Now() - t0, cpu = CpuSeconds() - cpu0;
  if (failed) Die(what);
  ConsumerResult r = Percentiles(lat, seconds, cpu);
  WriteAll(out, &r, sizeof(r));
}

// `window` fetches in flight per consumer, through the Consumer's own prefetch window (a
// Prefetcher of prefetch_batches = `window` over the DataClient: small batches in groups, each
// group one pipelined DataClient::FetchBatches call, handed over together; 0 is the automatic
// window). 1 is a bare Fetch loop.
void CroupierConsumers(Transport* transport, const std::vector<std::string>& addresses,
                       int consumers, int window, uint64_t per_consumer, size_t bytes, int out,
                       int in) {
  std::vector<std::vector<std::unique_ptr<DataClient>>> clients(consumers);
  for (int c = 0; c < consumers; ++c) {
    for (const std::string& a : addresses) {
      auto client = transport->Connect(a, DataClientOptions{});
      if (!client.ok()) Die(std::string(client.status().message()));
      if (!(*client)->Fetch({"bench", 0, 0}, absl::Now() + absl::Seconds(30)).ok()) {
        Die("warm-up fetch failed");
      }
      clients[c].push_back(*std::move(client));
    }
  }
  MeasureConsumers(consumers, out, in, "a fetch failed", [&](int k, std::vector<double>& lat) {
    bool ok = true;
    lat.reserve(per_consumer);
    // Alternates between the producers, as a rank's batches are spread over them.
    auto client_of = [&](uint64_t i) -> DataClient& { return *clients[k][i % clients[k].size()]; };
    if (window == 1) {
      for (uint64_t i = 0; i < per_consumer; ++i) {
        const double s = Now();
        auto batch = client_of(i).Fetch({"bench", 0, i}, absl::Now() + absl::Seconds(30));
        if (!batch.ok() || batch->bytes().size() != bytes) ok = false;
        lat.push_back(Now() - s);
      }
      return ok;
    }
    Prefetcher prefetcher(
        {.first = 0, .end = per_consumer, .max_batches = static_cast<uint32_t>(window)},
        [&](uint64_t i) {
          return client_of(i).Fetch({"bench", 0, i}, absl::Now() + absl::Seconds(30));
        },
        [&](uint64_t first, uint32_t count, const LandFn& land) {
          std::vector<uint64_t> keys(count);
          for (uint32_t j = 0; j < count; ++j) keys[j] = first + j;
          client_of(first).FetchBatches(
              "bench", 0, keys, absl::Now() + absl::Seconds(30),
              [&](size_t j, absl::StatusOr<Batch> batch) {
                land(static_cast<uint32_t>(j), std::move(batch));
              });
        });
    for (uint64_t i = 0; i < per_consumer; ++i) {
      const double s = Now();
      auto batch = prefetcher.Next();
      if (!batch.ok() || !batch->has_value() || (*batch)->bytes().size() != bytes) ok = false;
      lat.push_back(Now() - s);
    }
    return ok;
  });
}

void ZmqConsumers(const std::string& endpoint, int consumers, uint64_t total, size_t bytes,
                  int out, int in) {
  zmq::context_t ctx(1);
  std::vector<zmq::socket_t> pulls;
  for (int k = 0; k < consumers; ++k) {
    pulls.emplace_back(ctx, zmq::socket_type::pull);
    pulls.back().set(zmq::sockopt::rcvtimeo, 100);
    pulls.back().set(zmq::sockopt::linger, 0);
    pulls.back().connect(endpoint);
  }
  // PUSH only deals to connected peers: let every connection complete first.
  ::usleep(200 * 1000);
  std::atomic<uint64_t> received{0};
  MeasureConsumers(consumers, out, in, "a zmq message of the wrong size",
                   [&](int k, std::vector<double>& lat) {
                     bool ok = true;
                     while (received.load() < total) {
                       zmq::message_t msg;
                       const double s = Now();
                       auto got = pulls[k].recv(msg, zmq::recv_flags::none);
                       if (!got) continue;  // timed out: has every message arrived?
                       lat.push_back(Now() - s);
                       if (msg.size() != bytes) ok = false;
                       received.fetch_add(1);
                     }
                     return ok;
                   });
}

void Print(const std::string& system, size_t bytes, int producers, int consumers,
           const ConsumerResult& c, const SideResult& p, int window = 1) {
  const double gb = static_cast<double>(c.batches) * bytes / 1e9;
  std::printf(
      "{\"bench\": \"dataplane\", \"system\": \"%s\", \"bytes\": %zu, \"producers\": %d, "
      "\"consumers\": %d, \"window\": %d, \"gbps\": %.4f, \"batches_per_s\": %.1f, \"p50_us\": %.1f, "
      "\"p99_us\": %.1f, \"consumer_cpu_s_per_gb\": %.4f, \"producer_cpu_s_per_gb\": %.4f, "
      "\"consumer_rss_mib\": %.1f, \"producer_rss_mib\": %.1f}\n",
      system.c_str(), bytes, producers, consumers, window, gb / c.seconds, c.batches / c.seconds,
      c.p50_us, c.p99_us, c.side.cpu_s / gb, p.cpu_s / gb, c.side.rss_mib, p.rss_mib);
  std::fflush(stdout);
}

// The --only-* filters of main (0 or empty: every case).
struct CaseFilter {
  int consumers = 0;
  int window = -1;  // -1: every window
  std::string system;
};
CaseFilter filter;

// One case of croupier (transport) or ZeroMQ (transport == nullptr).
void RunCase(Transport* transport, size_t bytes, int producers, int consumers, uint64_t total,
             int window = 1) {
  const std::string name = transport == nullptr ? "zeromq" : std::string(transport->name());
  if ((filter.consumers != 0 && filter.consumers != consumers) ||
      (filter.window != -1 && filter.window != window) ||
      (!filter.system.empty() && filter.system != name)) {
    return;
  }
  const uint64_t step = window == 0 ? Prefetcher::kAutoMaxBatches : window;
  const uint64_t per_consumer = std::max<uint64_t>(step, total / consumers / step * step);
  total = per_consumer * consumers;
  std::vector<Pipe> p_in, p_out;
  std::vector<pid_t> p_pids;
  std::vector<std::string> addresses;
  for (int p = 0; p < producers; ++p) {
    p_in.push_back(Pipe::Make());
    p_out.push_back(Pipe::Make());
    const uint64_t share = total / producers + (p < static_cast<int>(total % producers));
    p_pids.push_back(Spawn(p_in[p], p_out[p], [&](int out, int in) {
      if (transport != nullptr) {
        CroupierProducer(transport, bytes, out, in);
      } else {
        ZmqProducer(bytes, share, out, in);
      }
    }));
    addresses.push_back(ReadString(p_out[p].r));
  }
  Pipe c_in = Pipe::Make(), c_out = Pipe::Make();
  const pid_t c_pid = Spawn(c_in, c_out, [&](int out, int in) {
    if (transport != nullptr) {
      CroupierConsumers(transport, addresses, consumers, window, per_consumer, bytes, out, in);
    } else {
      ZmqConsumers(addresses[0], consumers, total, bytes, out, in);
    }
  });
  char c;
  ReadAll(c_out.r, &c, 1);  // consumers ready
  for (auto& p : p_in) WriteAll(p.w, "g", 1);
  WriteAll(c_in.w, "g", 1);
  ConsumerResult cr;
  ReadAll(c_out.r, &cr, sizeof(cr));
  SideResult pr;
  for (int p = 0; p < producers; ++p) {
    WriteAll(p_in[p].w, "s", 1);
    SideResult one;
    ReadAll(p_out[p].r, &one, sizeof(one));
    pr.cpu_s += one.cpu_s;
    pr.rss_mib = std::max(pr.rss_mib, one.rss_mib);
  }
  Reap(c_pid);
  for (pid_t pid : p_pids) Reap(pid);
  for (auto& p : p_in) ::close(p.w);
  for (auto& p : p_out) ::close(p.r);
  ::close(c_in.w);
  ::close(c_out.r);
  const std::string system =
      transport == nullptr ? "zeromq" : absl::StrCat("croupier-", transport->name());
  Print(system, bytes, producers, consumers, cr, pr, window);
}

// --- limits ---
void MemcpyLimit(size_t bytes, uint64_t total_bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // both faulted in
  const uint64_t reps = std::max<uint64_t>(4, total_bytes / bytes);
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    const double t0 = Now();
    for (uint64_t i = 0; i < reps; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    best = std::min(best, Now() - t0);
  }
  ConsumerResult c;
  c.seconds = best;
  c.batches = reps;
  Print("memcpy", bytes, 1, 1, c, SideResult{});
}

// Plain blocking TCP on loopback, one sender process writing `bytes` at a time with large
// writes, one receiver reading into one reused buffer: what the kernel's TCP can move.
void PlainTcpLimit(size_t bytes, uint64_t total_bytes) {
  auto [listener, addr] = bench::ListenOnLoopback(4);
  const uint64_t reps = std::max<uint64_t>(4, total_bytes / bytes);
  Pipe to_child = Pipe::Make(), to_parent = Pipe::Make();
  const pid_t pid = Spawn(to_child, to_parent, [&](int out, int in) {
    const int fd = ::accept(listener, nullptr, nullptr);
    std::vector<char> buf(bytes, 7);
    const double cpu0 = CpuSeconds();
    for (uint64_t i = 0; i < reps; ++i) bench::SendFully(fd, buf.data(), bytes);
    char c;
    ReadAll(in, &c, 1);
    SideResult r{CpuSeconds() - cpu0, PeakRssMiB()};
    WriteAll(out, &r, sizeof(r));
    ::close(fd);
  });
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Die("connect");
  ::close(listener);
  std::vector<char> buf(bytes);
  const double cpu0 = CpuSeconds(), t0 = Now();
  for (uint64_t i = 0; i < reps; ++i) bench::RecvFully(fd, buf.data(), bytes);
  ConsumerResult c;
  c.seconds = Now() - t0;
  c.batches = reps;
  c.side = {CpuSeconds() - cpu0, 0};
  WriteAll(to_child.w, "s", 1);
  SideResult p;
  ReadAll(to_parent.r, &p, sizeof(p));
  Reap(pid);
  ::close(fd);
  ::close(to_child.w);
  ::close(to_parent.r);
  Print("plain-tcp", bytes, 1, 1, c, p);
}

}  // namespace
}  // namespace croupier

int main(int argc, char** argv) {
  using namespace croupier;
  bool quick = false;
  size_t only_bytes = 0;  // --only-bytes N: just the cases of that batch size (for profiling)
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") quick = true;
    if (arg == "--only-bytes" && i + 1 < argc) only_bytes = std::strtoull(argv[++i], nullptr, 10);
    if (arg == "--only-consumers" && i + 1 < argc) filter.consumers = std::atoi(argv[++i]);
    if (arg == "--only-system" && i + 1 < argc) filter.system = argv[++i];
    if (arg == "--only-window" && i + 1 < argc) filter.window = std::atoi(argv[++i]);
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: bench_dataplane [--quick] [--only-bytes N] [--only-consumers K]\n"
          "                       [--only-system tcp|shm|zeromq] [--only-window 1|4|64|0]\n");
      return 0;
    }
  }
  // Bytes and batches moved per case: enough for a stable figure, little enough for --quick.
  const uint64_t volume = quick ? (uint64_t{384} << 20) : (uint64_t{2} << 30);
  const uint64_t max_batches = quick ? 6000 : 40000;
  std::vector<size_t> sizes = {size_t{4} << 10, size_t{64} << 10, size_t{1} << 20,
                               size_t{4} << 20, size_t{16} << 20};
  if (only_bytes != 0) sizes = {only_bytes};
  const std::vector<int> consumer_counts =
      quick ? std::vector<int>{1, 4} : std::vector<int>{1, 4, 16};
  if (only_bytes == 0) {
    MemcpyLimit(size_t{4} << 20, volume * 4);
    PlainTcpLimit(size_t{4} << 20, volume);
  }
  for (size_t bytes : sizes) {
    const uint64_t total = std::clamp<uint64_t>(volume / bytes, 32, max_batches);
    for (int k : consumer_counts) {
      RunCase(Transport::Tcp(), bytes, 1, k, total);
      RunCase(Transport::Shm(), bytes, 1, k, total);
      RunCase(nullptr, bytes, 1, k, total);
      if (bytes <= (size_t{64} << 10)) {
        // Small batches as a Consumer fetches them: 4 in flight per rank, 64 (a window sized for
        // small batches: 256 KiB of 4 KiB ones), and the automatic window (the default).
        for (int window : {4, 64, 0}) {
          RunCase(Transport::Tcp(), bytes, 1, k, total, window);
          RunCase(Transport::Shm(), bytes, 1, k, total, window);
        }
      }
    }
    if (!quick || bytes == (size_t{4} << 20)) {
      RunCase(Transport::Tcp(), bytes, 2, 4, total);
      RunCase(Transport::Shm(), bytes, 2, 4, total);
    }
  }
  if (quick && only_bytes == 0) {
    // The 16-consumer goal case only.
    RunCase(Transport::Tcp(), size_t{4} << 20, 1, 16, volume / (size_t{4} << 20));
    RunCase(Transport::Shm(), size_t{4} << 20, 1, 16, volume / (size_t{4} << 20));
  }
  return 0;
}
