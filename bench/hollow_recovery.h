// Recovery at scale (bench_hollow --kill-after; issue 36, item 3): the kill and the restart of the
// dispatcher on the same work directory and port, the check of the positions on the journal the
// kill left, and the report. bench/bench_hollow.cc's comment says what is measured and checked.
#ifndef CROUPIER_BENCH_HOLLOW_RECOVERY_H_
#define CROUPIER_BENCH_HOLLOW_RECOVERY_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/hollow_clients.h"
#include "bench/hollow_process.h"

namespace croupier::bench::hollow_driver {

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
inline void KillAndRestart(const std::vector<std::string>& args, int cpu, const std::string& work,
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
inline PositionCheck CheckPositions(const std::string& bin, const std::string& work,
                                    uint32_t consumers, uint32_t jobs, hollow::Shared* sh,
                                    const hollow::Config& cfg) {
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

// After the run (the clients gone, the new dispatcher still up): checks the positions and returns
// the summary line's recovery fields (a JSON fragment starting with ", "); the same in words on
// stderr.
inline std::string RecoveryReport(Restart& restart, const std::string& bin, const std::string& work,
                                  uint32_t consumers, uint32_t producers, uint32_t jobs,
                                  double kill_after, hollow::Shared* sh, const hollow::Config& cfg,
                                  const hollow::Stats& all, double status_back_s) {
  if (!restart.journal_kept) Fail("the journal could not be kept at the kill (link failed)");
  const PositionCheck pc = CheckPositions(bin, work, consumers, jobs, sh, cfg);
  const int64_t kill_ns = sh->kill_ns.load();
  auto since_kill = [&](int64_t ns) { return (ns - kill_ns) / 1e9; };
  std::vector<double> consumers_back, producers_back;
  uint64_t consumers_stopped = 0;
  for (uint32_t c = 0; c < consumers; ++c) {
    const hollow::ConsumerSlot& slot = sh->consumer(c);
    consumers_stopped += slot.lost.load() != 0;
    if (const int64_t ns = slot.back_ns.load(); ns != 0) consumers_back.push_back(since_kill(ns));
  }
  for (uint32_t p = 0; p < producers; ++p) {
    if (const int64_t ns = sh->producer_back_ns(p).load(); ns != 0) {
      producers_back.push_back(since_kill(ns));
    }
  }
  std::sort(consumers_back.begin(), consumers_back.end());
  std::sort(producers_back.begin(), producers_back.end());
  const uint64_t consumers_not_back = consumers - consumers_back.size();
  const uint64_t producers_not_back = producers - producers_back.size();
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
                      absl::StrFormat("%.1f", p.at_s), ", ", p.accept_queue, ", ", p.syn_recv, ", ",
                      p.established, ", ", p.close_wait, ", ", p.syn_sent, "]");
    }
  }
  const std::string restarted_log = ReadFile(work + "/dispatcher-restarted.log");
  // gRPC's "Failed accept4: Too many open files" (its own listener, before src/rpc/grpc_listener)
  // or the listener's "failed to accept N times": the new dispatcher at its descriptor limit.
  // And the connections the listener closed at once to keep its reserve of descriptors.
  uint64_t accept_failures = 0, shed = 0;
  for (size_t at = restarted_log.find("Failed accept4"); at != std::string::npos;
       at = restarted_log.find("Failed accept4", at + 1)) {
    ++accept_failures;
  }
  const auto sum_after = [&restarted_log](const std::string& words) {
    uint64_t total = 0;
    for (size_t at = restarted_log.find(words); at != std::string::npos;
         at = restarted_log.find(words, at + 1)) {
      total += std::strtoull(restarted_log.c_str() + at + words.size(), nullptr, 10);
    }
    return total;
  };
  accept_failures += sum_after("dispatcher failed to accept ");
  shed = sum_after("dispatcher closed ");
  const double replay_s =
      DurationSeconds(Between(restarted_log, work + "/dispatcher/journal in ", ": "));
  const double compact_s = DurationSeconds(
      Between(restarted_log, "then the entries written meanwhile) in ", ", the dispatcher's lock"));
  const bool same_replay = !pc.replayed_restart.empty() && pc.replayed_restart == pc.replayed_check;
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
                            pc.went_back == 0 && pc.checked == consumers && same_replay;
  const bool recovery_met = serving_s >= 0 && serving_s <= 10 && all_back_s >= 0 &&
                            all_back_s <= 30 && positions_ok && consumers_stopped == 0;
  const std::string recovery = absl::StrFormat(
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
      "\"restarted_accept_failures\": %llu, \"restarted_connections_shed\": %llu, "
      "\"recovery_met\": %s",
      kill_after, status_back_s, Seconds(restart.dead - restart.kill), listen_s, serving_s,
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
      static_cast<unsigned long long>(accept_failures), static_cast<unsigned long long>(shed),
      recovery_met ? "true" : "false");
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
      "descriptors peaked at %d (the old one had %d), %llu failed accepts and %llu connections "
      "closed at once for its reserve of descriptors in its log\n",
      kill_after, listen_s, replay_s, compact_s, serving_s,
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
      static_cast<unsigned long long>(pc.lost), static_cast<unsigned long long>(pc.lost_max_steps),
      static_cast<unsigned long long>(pc.never_sent),
      static_cast<unsigned long long>(pc.unanswered_kept),
      static_cast<unsigned long long>(pc.went_back),
      same_replay ? "the same entries" : "NOT the same entries",
      by_code_words.empty() ? "none" : by_code_words.c_str(), fds_max, restart.old_fds,
      static_cast<unsigned long long>(accept_failures), static_cast<unsigned long long>(shed));
  return recovery;
}

}  // namespace croupier::bench::hollow_driver

#endif  // CROUPIER_BENCH_HOLLOW_RECOVERY_H_
