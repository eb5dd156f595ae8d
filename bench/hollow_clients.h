// Hollow clients: simulated consumers and producers that speak the real protocol to a real
// dispatcher, with the real client (rpc::DispatcherClient) and the real messages, and no data
// plane. One client process (RunClientProcess) runs a share of them on a few threads; the driver,
// bench_hollow.cc, forks several such processes against one `croupier dispatcher`.
//
// A hollow consumer does what src/consumer/ does with the dispatcher: it registers its rank
// (ConsumerHeartbeat with resume), then every heartbeat interval takes `steps_per_beat` steps and
// acknowledges the new position in its heartbeat (so each heartbeat is a journaled
// ConsumerAcknowledged), and for each step whose batch's task it has not located yet it calls
// Locate(job, epoch, batch, 1, remake_if_finished) as Peers::Locate does (one Locate per task: the
// answer is cached per task range). A step whose batch has no producer yet is not taken (a real
// consumer would wait for it); it is located again at the next beat. At the end it leaves (a
// heartbeat with `leaving`). Batches are never fetched.
//
// A hollow producer does what ProducerNode::Heartbeat and HeartbeatLoop send: it registers with a
// data address (never dialled), beats every interval with its held and finished tasks,
// `held_tasks_reported`, its free slots and its statistics; beats again at once while the last
// answer brought tasks and a slot is free; and with a slot free and no work, sends heartbeats that
// wait for work (wait_for_work_ms = the interval), one after another. Its tasks stand for what a
// TaskRunner holds: a task holds one of `max_tasks` slots while it is being made (`make_us` per
// batch over 4 worker threads), is made once at most `made_cap` made tasks are held (the buffer
// bound: a full buffer keeps the tasks being made in their slots), and is served, so reported in
// `finished_tasks`, once every rank of its job has acknowledged a position past its last batch
// (the consumers' positions are in memory shared by the client processes). Revoked tasks are
// dropped. At the end it leaves (a heartbeat with `leaving` and its finished tasks).
//
// With the supply model on (bench_hollow --autoscale; bench/hollow_autoscale.h), producer p runs
// only while p is below the number the autoscaler wants: it registers when it becomes wanted and
// leaves when it no longer is. The rates both kinds report (batches received and seconds waited;
// batches made and busy seconds) are then the model's, not the steps and tasks above.
//
// Across a dispatcher restart (bench_hollow --kill-after) both behave as src/consumer/ and
// src/node/ do: a consumer's heartbeat is given up after the takeover time (CallDeadline, as
// PositionReporter's beat), the next one tries again; its position is what its trainer has taken
// (kept whether or not the heartbeat that carried it was answered), and it takes a step only while
// its rank is surely its own (its last answered heartbeat sent less than 0.9 takeover ago, as
// ConfirmRank); NOT_FOUND or PERMISSION_DENIED end it (a real consumer returns ABORTED). A producer
// answered NOT_FOUND drops its tasks and registers again, as ProducerNode does. Both note in the
// shared memory when the new dispatcher first answered them, and each consumer the positions the
// old one acknowledged and was sent, which the driver checks against what the new one replayed.
#ifndef CROUPIER_BENCH_HOLLOW_CLIENTS_H_
#define CROUPIER_BENCH_HOLLOW_CLIENTS_H_

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/croupier.pb.h"
#include "src/common/logging.h"
#include "src/control/call_deadline.h"
#include "src/rpc/dispatcher_client.h"

namespace croupier::bench::hollow {

using Clock = std::chrono::steady_clock;

// The RPC kinds reported, each with its own latency samples.
enum Kind : int {
  kConsumerRegister,
  kConsumerHeartbeat,
  kConsumerLeave,
  kLocate,
  kProducerRegister,
  kProducerHeartbeat,  // answered at once (no wait for work asked)
  kProducerWait,       // asked to wait for work: its latency is mostly the wait
  kProducerLeave,
  kGetStatus,         // with every client listed
  kGetStatusSummary,  // omit_clients: jobs and counts
  kKinds
};
inline const char* KindName(int k) {
  static const char* const kNames[] = {"ConsumerHeartbeat(register)",
                                       "ConsumerHeartbeat",
                                       "ConsumerHeartbeat(leave)",
                                       "Locate",
                                       "ProducerHeartbeat(register)",
                                       "ProducerHeartbeat",
                                       "ProducerHeartbeat(wait for work)",
                                       "ProducerHeartbeat(leave)",
                                       "GetStatus",
                                       "GetStatus(omit_clients)"};
  return kNames[k];
}

constexpr int kMaxJobs = 64;
constexpr int kCodes = 17;  // absl::StatusCode 0 to 16

// One consumer's entry in the shared memory. Positions are epoch * steps_per_epoch + step.
struct ConsumerSlot {
  std::atomic<uint64_t> position{0};  // the last one acknowledged (an answered heartbeat)
  // Across a restart: the last position acknowledged by the old dispatcher (answered before it
  // was seen dead), the highest one sent while it may have been alive, and the one the first
  // heartbeat answered by the new dispatcher carried, with when (0: not yet).
  std::atomic<uint64_t> acked_before_kill{0}, sent_before_kill{0}, first_back_position{0};
  std::atomic<int64_t> back_ns{0};
  std::atomic<uint32_t> lost{0};  // refused NOT_FOUND or PERMISSION_DENIED: it stopped
};

// Memory shared by the driver and every client process (an anonymous MAP_SHARED mapping made
// before the fork), followed by a ConsumerSlot per consumer and a time per producer. steady_clock
// is CLOCK_MONOTONIC, the same in every process of the machine.
struct Shared {
  std::atomic<int64_t> start_ns{0};  // when the beats begin (0: not yet)
  std::atomic<int64_t> window_start_ns{0}, window_end_ns{0};
  // A restart (--kill-after): when the driver sent SIGKILL, saw the old dispatcher dead, and saw
  // the new one listening (its port file written); 0: not yet. An answer read before dead_ns came
  // from the old one; one read from listen_ns on, from the new one.
  std::atomic<int64_t> kill_ns{0}, dead_ns{0}, listen_ns{0};
  std::atomic<uint32_t> registered_consumers{0}, registered_producers{0};
  std::atomic<uint32_t> failed{0};  // a client process gave up
  uint32_t consumers = 0, producers = 0;
  // The supply model (bench_hollow --autoscale; bench/hollow_autoscale.h): every consumer would
  // take `demand` batches/s, every producer makes at most `capacity`; off while demand is 0.
  // Producer p is registered while p < wanted_producers (the autoscaler's figure), and counted in
  // live_producers while it is.
  double demand = 0, capacity = 0;
  std::atomic<uint32_t> wanted_producers{~0u};
  std::atomic<uint32_t> live_producers{0};
  bool modelled() const { return demand > 0; }
  // The share of the consumers' demand the live producers meet, and the share of the live
  // producers' capacity that demand uses (their busy share).
  double Delivered() const {
    return std::min(1.0, live_producers.load() * capacity / (consumers * demand));
  }
  double Busy() const {
    const uint32_t live = live_producers.load();
    return live == 0 ? 0 : std::min(1.0, consumers * demand / (live * capacity));
  }
  // Per job, learnt by the consumers at registration.
  std::atomic<uint64_t> steps_per_epoch[kMaxJobs];
  std::atomic<uint32_t> world[kMaxJobs];
  // Consumer c: job c % jobs, rank c / jobs.
  ConsumerSlot& consumer(uint32_t c) { return reinterpret_cast<ConsumerSlot*>(this + 1)[c]; }
  // When producer p was first answered by the new dispatcher (0: not yet).
  std::atomic<int64_t>& producer_back_ns(uint32_t p) {
    return reinterpret_cast<std::atomic<int64_t>*>(&consumer(consumers))[p];
  }
  static size_t Bytes(uint32_t consumers, uint32_t producers) {
    return sizeof(Shared) + sizeof(ConsumerSlot) * consumers +
           sizeof(std::atomic<int64_t>) * producers;
  }
};
static_assert(sizeof(Shared) % alignof(ConsumerSlot) == 0);
static_assert(sizeof(ConsumerSlot) % alignof(std::atomic<int64_t>) == 0);

struct Config {
  std::string address;
  uint32_t consumers = 0, producers = 0, jobs = 1, processes = 1;
  uint32_t threads = 4;  // consumer threads per client process (each producer has its own)
  // Each consumer on a connection of its own, as separate trainer processes are; otherwise the
  // consumers of a thread share one.
  bool connection_per_consumer = false;
  // The clients' keepalive pings (rpc::kKeepaliveTime); off, for a baseline without them.
  bool keepalive = true;
  uint32_t steps_per_beat = 1;
  uint32_t max_tasks = 2, made_cap = 2;
  double make_us = 5;  // per batch, over 4 worker threads
  // The dispatcher's --producer-timeout-ms: a producer silent longer missed its period.
  double producer_timeout_s = 10;
  std::string JobName(uint32_t j) const { return absl::StrCat("hollow", j); }
};

// What one thread measured; merged per process, then by the driver.
struct Stats {
  std::vector<float> latency_ms[kKinds];  // in the window (registration and leave: all)
  uint64_t calls[kKinds] = {}, errors[kKinds] = {};
  uint64_t errors_by_code[kCodes] = {};  // every kind's, by absl::StatusCode
  std::string first_error;
  std::vector<float> lateness_ms;  // how late after its due time each consumer beat was sent
  // Longer than the takeover (a consumer) or the producer timeout (a producer) without an answer.
  uint64_t consumers_missed = 0, producers_missed = 0;
  uint64_t late_answers = 0;  // heartbeats answered after more than one interval
  uint64_t unlocated = 0;     // Locate answers without a producer for the batch
  // Beats a consumer thread could not send within an interval of their due time (the client side
  // fell behind), skipped as a real consumer's heartbeat thread skips them; they show as silence.
  uint64_t skipped = 0;
  double cpu_s = 0;  // the client process's CPU time
  uint64_t tasks_taken = 0, tasks_finished = 0, tasks_revoked = 0;
  double max_consumer_gap_s = 0, max_producer_gap_s = 0;
  // The longest time a consumer went without an answered heartbeat from the window's start until
  // the kill (--kill-after): how long the client side takes to beat every consumer at all.
  double max_consumer_gap_before_kill_s = 0;
  uint64_t consumers_lost = 0;          // refused NOT_FOUND/PERMISSION_DENIED, and stopped
  uint64_t producers_reregistered = 0;  // refused NOT_FOUND, and registered again
  // The dispatcher's, from a consumer's registration (until then, its defaults); `told` once read.
  double takeover_s = 3, interval_s = 1;
  bool told = false;

  void Add(int kind, Clock::duration took, bool in_window) {
    ++calls[kind];
    if (in_window || kind == kConsumerRegister || kind == kProducerRegister ||
        kind == kConsumerLeave || kind == kProducerLeave) {
      latency_ms[kind].push_back(std::chrono::duration<float, std::milli>(took).count());
    }
  }
  void Fail(int kind, const absl::Status& s) {
    ++errors[kind];
    ++errors_by_code[std::min<int>(kCodes - 1, static_cast<int>(s.code()))];
    if (first_error.empty()) first_error = absl::StrCat(KindName(kind), ": ", s.ToString());
  }
  void Merge(const Stats& o) {
    for (int k = 0; k < kKinds; ++k) {
      latency_ms[k].insert(latency_ms[k].end(), o.latency_ms[k].begin(), o.latency_ms[k].end());
      calls[k] += o.calls[k];
      errors[k] += o.errors[k];
    }
    for (int c = 0; c < kCodes; ++c) errors_by_code[c] += o.errors_by_code[c];
    max_consumer_gap_before_kill_s =
        std::max(max_consumer_gap_before_kill_s, o.max_consumer_gap_before_kill_s);
    consumers_lost += o.consumers_lost;
    producers_reregistered += o.producers_reregistered;
    if (first_error.empty()) first_error = o.first_error;
    lateness_ms.insert(lateness_ms.end(), o.lateness_ms.begin(), o.lateness_ms.end());
    consumers_missed += o.consumers_missed;
    producers_missed += o.producers_missed;
    late_answers += o.late_answers;
    unlocated += o.unlocated;
    skipped += o.skipped;
    cpu_s += o.cpu_s;
    tasks_taken += o.tasks_taken;
    tasks_finished += o.tasks_finished;
    tasks_revoked += o.tasks_revoked;
    max_consumer_gap_s = std::max(max_consumer_gap_s, o.max_consumer_gap_s);
    max_producer_gap_s = std::max(max_producer_gap_s, o.max_producer_gap_s);
    if (o.told) {
      takeover_s = o.takeover_s;
      interval_s = o.interval_s;
      told = true;
    }
  }
};

// Written by a client process, read by the driver: the counters, then each kind's samples.
inline bool WriteStats(const Stats& s, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const uint64_t counts[] = {
      s.consumers_missed, s.producers_missed,      s.late_answers,  s.unlocated,
      s.tasks_taken,      s.tasks_finished,        s.tasks_revoked, s.skipped,
      s.consumers_lost,   s.producers_reregistered, uint64_t{s.told}};
  const double gaps[] = {s.max_consumer_gap_s,
                         s.max_producer_gap_s,
                         s.takeover_s,
                         s.interval_s,
                         s.cpu_s,
                         s.max_consumer_gap_before_kill_s};
  std::fwrite(counts, sizeof(counts), 1, f);
  std::fwrite(gaps, sizeof(gaps), 1, f);
  std::fwrite(s.calls, sizeof(s.calls), 1, f);
  std::fwrite(s.errors, sizeof(s.errors), 1, f);
  std::fwrite(s.errors_by_code, sizeof(s.errors_by_code), 1, f);
  auto vec = [&](const std::vector<float>& v) {
    const uint64_t n = v.size();
    std::fwrite(&n, sizeof(n), 1, f);
    if (n) std::fwrite(v.data(), sizeof(float), n, f);
  };
  for (int k = 0; k < kKinds; ++k) vec(s.latency_ms[k]);
  vec(s.lateness_ms);
  const uint64_t n = s.first_error.size();
  std::fwrite(&n, sizeof(n), 1, f);
  std::fwrite(s.first_error.data(), 1, n, f);
  return std::fclose(f) == 0;
}

inline bool ReadStats(const std::string& path, Stats* s) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint64_t counts[11];
  double gaps[6];
  bool ok = std::fread(counts, sizeof(counts), 1, f) == 1 &&
            std::fread(gaps, sizeof(gaps), 1, f) == 1 &&
            std::fread(s->calls, sizeof(s->calls), 1, f) == 1 &&
            std::fread(s->errors, sizeof(s->errors), 1, f) == 1 &&
            std::fread(s->errors_by_code, sizeof(s->errors_by_code), 1, f) == 1;
  auto vec = [&](std::vector<float>* v) {
    uint64_t n = 0;
    if (!ok || std::fread(&n, sizeof(n), 1, f) != 1) return void(ok = false);
    v->resize(n);
    if (n && std::fread(v->data(), sizeof(float), n, f) != n) ok = false;
  };
  for (int k = 0; k < kKinds; ++k) vec(&s->latency_ms[k]);
  vec(&s->lateness_ms);
  uint64_t n = 0;
  if (ok && std::fread(&n, sizeof(n), 1, f) == 1 && n < 100000) {
    s->first_error.resize(n);
    if (n) ok = std::fread(s->first_error.data(), 1, n, f) == n;
  }
  std::fclose(f);
  if (!ok) return false;
  s->consumers_missed = counts[0];
  s->producers_missed = counts[1];
  s->late_answers = counts[2];
  s->unlocated = counts[3];
  s->tasks_taken = counts[4];
  s->tasks_finished = counts[5];
  s->tasks_revoked = counts[6];
  s->skipped = counts[7];
  s->consumers_lost = counts[8];
  s->producers_reregistered = counts[9];
  s->told = counts[10] != 0;
  s->cpu_s = gaps[4];
  s->max_consumer_gap_before_kill_s = gaps[5];
  s->max_consumer_gap_s = gaps[0];
  s->max_producer_gap_s = gaps[1];
  s->takeover_s = gaps[2];
  s->interval_s = gaps[3];
  return true;
}

inline Clock::time_point FromNs(int64_t ns) {
  return Clock::time_point(std::chrono::nanoseconds(ns));
}
inline int64_t ToNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct Consumer {
  uint32_t index = 0, job = 0, rank = 0;
  uint64_t id = 0;
  std::string lease;
  // The steps its trainer has taken, epoch * steps_per_epoch + step: what it reports, whether or
  // not the heartbeat that carried it was answered.
  uint64_t position = 0;
  uint64_t batches = 0;
  bool lost = false;  // refused NOT_FOUND/PERMISSION_DENIED: stopped, as a real one aborts
  // The last task range located with a producer: epoch, [first, end) of its global batches.
  uint64_t located_epoch = ~0ull, located_first = 0, located_end = 0;
  Clock::time_point last_answered, last_answered_before_kill;
  Clock::time_point confirmed_sent;  // when its last answered heartbeat was sent
  double max_gap_s = 0, max_gap_before_kill_s = 0;
  // The supply model's counters: batches its trainer received and seconds it waited for data,
  // advanced at each beat at the delivered share of the moment.
  double model_batches = 0, model_wait_s = 0;
  Clock::time_point model_at;
  std::shared_ptr<rpc::DispatcherClient> own;  // its connection (Config::connection_per_consumer)
  // What the next heartbeat reports (the steps it took, or the model's), as src/consumer does.
  void Count(const Shared* sh, v1::ConsumerHeartbeatRequest& req) {
    if (!sh->modelled()) {
      req.set_batches_received(batches);
      req.set_bytes_received(batches * 64);
      return;
    }
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - model_at).count(), d = sh->Delivered();
    model_at = now;
    model_batches += sh->demand * d * dt;
    model_wait_s += (1 - d) * dt;
    req.set_batches_received(static_cast<uint64_t>(model_batches));
    req.set_bytes_received(static_cast<uint64_t>(model_batches) * 64);
    req.set_wait_seconds(model_wait_s);
  }
};

// The answer to a heartbeat read at `answered`, sent at `sent` (a consumer or a producer): from
// the old dispatcher (read before the driver saw it dead), from the new one (read once the driver
// saw it listening), or, in between, not told apart (neither counts).
enum class From { kOld, kNew, kEither };
inline From AnsweredBy(const Shared* sh, Clock::time_point answered) {
  const int64_t dead = sh->dead_ns.load(), listen = sh->listen_ns.load();
  if (dead == 0 || ToNs(answered) < dead) return From::kOld;
  return listen != 0 && ToNs(answered) >= listen ? From::kNew : From::kEither;
}

inline void StoreMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t seen = a.load();
  while (seen < v && !a.compare_exchange_weak(seen, v)) {
  }
}

inline std::unique_ptr<rpc::DispatcherClient> NewClient(const Config& c) {
  rpc::DispatcherClientOptions options;
  // A dispatcher that stopped answering ends the run within seconds, not the library's 60 s.
  options.call_timeout = absl::Seconds(10);
  options.timeout = absl::Seconds(10);
  options.own_connection = true;  // as separate processes have
  if (!c.keepalive) options.keepalive_time = absl::Milliseconds(INT32_MAX);  // gRPC's "never"
  return rpc::DispatcherClient::Create(c.address, options);
}

// The window's bounds, once the driver has set them (all clients registered); until then the
// window starts and ends at the end of time.
inline Clock::time_point WindowStart(const Shared* sh) {
  const int64_t ns = sh->window_start_ns.load();
  return ns ? FromNs(ns) : Clock::time_point::max();
}
inline Clock::time_point WindowEnd(const Shared* sh) {
  const int64_t ns = sh->window_end_ns.load();
  return ns ? FromNs(ns) : Clock::time_point::max();
}

// Registers one consumer (as RegisterConsumer does, with resume); false if refused.
inline bool Register(const Config& cfg, Shared* sh, rpc::DispatcherClient& client, Consumer& c,
                     Stats& st) {
  v1::ConsumerHeartbeatRequest req;
  req.set_job(cfg.JobName(c.job));
  req.set_rank(c.rank);
  req.set_world(sh->world[c.job].load());
  req.set_resume(true);
  const auto sent = Clock::now();
  auto r = client.ConsumerHeartbeat(req);
  st.Add(kConsumerRegister, Clock::now() - sent, false);
  if (!r.ok()) {
    st.Fail(kConsumerRegister, r.status());
    return false;
  }
  c.id = r->consumer_id();
  c.lease = r->lease();
  const uint64_t spe = r->job().steps_per_epoch();
  sh->steps_per_epoch[c.job] = spe;
  c.position = r->epoch() * spe + r->step();
  c.confirmed_sent = sent;
  c.model_at = Clock::now();
  // Whole batches come to the ranks in turn, not to all at once: consumer i of N has received
  // i / N of a batch at the start, so that at a low delivered share the ranks' first batches
  // are spread as a real job's steps spread them.
  c.model_batches = static_cast<double>(c.index) / cfg.consumers;
  ConsumerSlot& slot = sh->consumer(c.index);
  slot.position.store(c.position, std::memory_order_relaxed);
  StoreMax(slot.acked_before_kill, c.position);
  StoreMax(slot.sent_before_kill, c.position);
  if (r->heartbeat_interval_ms()) st.interval_s = r->heartbeat_interval_ms() / 1000.0;
  if (r->takeover_ms()) st.takeover_s = r->takeover_ms() / 1000.0;
  st.told = true;
  sh->registered_consumers.fetch_add(1);
  return true;
}

// Takes the steps due at one beat, each one's batch located first (one Locate per task, as
// Peers::Locate caches); returns the position reached. Stops at a batch without a producer.
inline uint64_t TakeSteps(const Config& cfg, Shared* sh, rpc::DispatcherClient& client, Consumer& c,
                          bool in_window, Stats& st) {
  const uint64_t spe = sh->steps_per_epoch[c.job].load();
  const uint32_t world = sh->world[c.job].load();
  uint64_t next = c.position;
  for (uint32_t s = 0; s < cfg.steps_per_beat; ++s) {
    const uint64_t epoch = next / spe, g = (next % spe) * world + c.rank;
    if (!(epoch == c.located_epoch && c.located_first <= g && g < c.located_end)) {
      v1::LocateRequest lr;
      lr.set_job(cfg.JobName(c.job));
      lr.set_epoch(epoch);
      lr.set_first_batch(g);
      lr.set_num_batches(1);
      lr.set_remake_if_finished(true);
      const auto sent = Clock::now();
      auto r = client.Locate(lr);
      st.Add(kLocate, Clock::now() - sent, in_window);
      if (!r.ok()) {
        st.Fail(kLocate, r.status());
        break;
      }
      bool found = false;
      for (const v1::TaskLocation& t : r->tasks()) {
        const uint64_t first = t.task().first_batch(), end = first + t.task().num_batches();
        if (first <= g && g < end && !t.producer_address().empty()) {
          c.located_epoch = epoch;
          c.located_first = first;
          c.located_end = end;
          found = true;
        }
      }
      if (!found) {
        if (in_window) ++st.unlocated;
        break;  // no producer has it yet: a real consumer would wait for this batch
      }
    }
    ++next;
    ++c.batches;
  }
  return next;
}

// One consumer thread: from the start, each of its consumers registers at its first due time and
// then beats every interval until the window's end (set by the driver once every client is
// registered), then leaves.
inline void RunConsumers(const Config& cfg, Shared* sh, std::vector<Consumer>& mine, Stats& st) {
  std::shared_ptr<rpc::DispatcherClient> shared = NewClient(cfg);
  if (cfg.connection_per_consumer) {
    for (Consumer& c : mine) c.own = NewClient(cfg);
  }
  const auto start = FromNs(sh->start_ns.load());
  const uint32_t n = cfg.consumers;
  for (uint64_t k = 0; !sh->failed.load(); ++k) {
    bool any = false;
    for (Consumer& c : mine) {
      // The interval the dispatcher's answers give (Register reads it), as PositionReporter's.
      const auto interval =
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(st.interval_s));
      // Consumer c beats at start + (k + c / N) intervals: spread evenly over the interval.
      const auto due = start + k * interval + interval * c.index / n;
      if (due >= WindowEnd(sh) || Clock::now() >= WindowEnd(sh)) continue;
      any = true;
      std::this_thread::sleep_until(due);
      rpc::DispatcherClient* client = c.own ? c.own.get() : shared.get();
      if (c.id != 0 && Clock::now() > due + interval) {
        if (due >= WindowStart(sh)) ++st.skipped;
        continue;
      }
      if (c.id == 0) {
        Register(cfg, sh, *client, c, st);  // a refused one tries again at its next beat
        continue;
      }
      if (c.lost) continue;
      const auto window_start = WindowStart(sh);
      const bool in_window = due >= window_start;
      // One beat, given up after the takeover time as PositionReporter's (the next one tries
      // again), so that a dispatcher that is gone holds the thread's other consumers no longer.
      const CallDeadline bounded(absl::Now() + absl::Seconds(st.takeover_s));
      // Steps are taken only while the rank is surely this consumer's (ConfirmRank); past that,
      // the heartbeat alone, which confirms it again.
      const bool confirmed =
          Clock::now() < c.confirmed_sent + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(0.9 * st.takeover_s));
      const uint64_t next = confirmed ? TakeSteps(cfg, sh, *client, c, in_window, st) : c.position;
      c.position = next;  // its trainer has these batches, answered or not
      ConsumerSlot& slot = sh->consumer(c.index);
      const uint64_t spe = sh->steps_per_epoch[c.job].load();
      v1::ConsumerHeartbeatRequest req;
      req.set_consumer_id(c.id);
      req.set_lease(c.lease);
      req.set_job(cfg.JobName(c.job));
      req.set_rank(c.rank);
      req.set_world(sh->world[c.job].load());
      req.set_epoch(next / spe);
      req.set_step(next % spe);
      c.Count(sh, req);
      const auto sent = Clock::now();
      if (sh->dead_ns.load() == 0) StoreMax(slot.sent_before_kill, next);
      auto r = client->ConsumerHeartbeat(req);
      const auto answered = Clock::now();
      st.Add(kConsumerHeartbeat, answered - sent, in_window);
      if (in_window) {
        st.lateness_ms.push_back(std::chrono::duration<float, std::milli>(sent - due).count());
      }
      if (!r.ok()) {
        st.Fail(kConsumerHeartbeat, r.status());
        if (absl::IsNotFound(r.status()) || absl::IsPermissionDenied(r.status())) {
          c.lost = true;  // a real consumer stops: serving on would deal the rank twice
          slot.lost = 1;
          ++st.consumers_lost;
        }
        continue;
      }
      if (in_window && answered - sent > interval) ++st.late_answers;
      c.confirmed_sent = std::max(c.confirmed_sent, sent);
      slot.position.store(next, std::memory_order_relaxed);
      switch (AnsweredBy(sh, answered)) {
        case From::kOld:
          StoreMax(slot.acked_before_kill, next);
          break;
        case From::kNew:
          if (slot.back_ns.load() == 0) {
            slot.first_back_position = next;
            slot.back_ns = ToNs(answered);
          }
          break;
        case From::kEither:
          break;
      }
      if (answered > window_start) {
        const auto from = std::max(c.last_answered, window_start);
        c.max_gap_s = std::max(c.max_gap_s, std::chrono::duration<double>(answered - from).count());
        const int64_t kill = sh->kill_ns.load();
        if (kill == 0 || ToNs(answered) < kill) {
          c.max_gap_before_kill_s = std::max(
              c.max_gap_before_kill_s, std::chrono::duration<double>(answered - from).count());
          c.last_answered_before_kill = answered;
        }
      }
      c.last_answered = answered;
    }
    if (!any) break;
  }
  if (sh->failed.load()) return;
  const auto window_start = WindowStart(sh), window_end = WindowEnd(sh);
  for (Consumer& c : mine) {
    // Silent from the last answer to the window's end counts too.
    const auto from = std::max(c.last_answered, window_start);
    c.max_gap_s = std::max(c.max_gap_s, std::chrono::duration<double>(window_end - from).count());
    st.max_consumer_gap_s = std::max(st.max_consumer_gap_s, c.max_gap_s);
    if (c.max_gap_s > st.takeover_s) ++st.consumers_missed;
    if (const int64_t kill = sh->kill_ns.load(); kill != 0) {
      const auto upto = std::max(c.last_answered_before_kill, window_start);
      c.max_gap_before_kill_s = std::max(
          c.max_gap_before_kill_s, std::chrono::duration<double>(FromNs(kill) - upto).count());
      st.max_consumer_gap_before_kill_s =
          std::max(st.max_consumer_gap_before_kill_s, c.max_gap_before_kill_s);
    }
    if (c.id == 0 || c.lost) continue;
    rpc::DispatcherClient* client = c.own ? c.own.get() : shared.get();
    v1::ConsumerHeartbeatRequest req;
    req.set_consumer_id(c.id);
    req.set_lease(c.lease);
    req.set_job(cfg.JobName(c.job));
    req.set_rank(c.rank);
    req.set_world(sh->world[c.job].load());
    const uint64_t spe = sh->steps_per_epoch[c.job].load();
    req.set_epoch(c.position / spe);
    req.set_step(c.position % spe);
    c.Count(sh, req);
    req.set_leaving(true);
    const auto sent = Clock::now();
    // Given up after an interval, as a real consumer's Close gives its final heartbeat up.
    const CallDeadline bounded(absl::Now() + absl::Seconds(st.interval_s));
    auto r = client->ConsumerHeartbeat(req);
    st.Add(kConsumerLeave, Clock::now() - sent, false);
    if (!r.ok()) st.Fail(kConsumerLeave, r.status());
  }
}

// The served frontier of each job, in global batches (epoch * batches_per_epoch + batch): every
// rank has acknowledged a position past it. Refreshed by one thread of each client process.
struct Frontiers {
  std::atomic<uint64_t> batch[kMaxJobs] = {};
  void Refresh(const Config& cfg, Shared* sh) {
    for (uint32_t j = 0; j < cfg.jobs; ++j) {
      uint64_t least = ~0ull;
      for (uint32_t c = j; c < cfg.consumers; c += cfg.jobs) {
        least = std::min(least, sh->consumer(c).position.load(std::memory_order_relaxed));
      }
      // position p (epoch * S + step) is past global batch p * world of the job's numbering.
      batch[j] = least == ~0ull ? 0 : least * sh->world[j].load();
    }
  }
};

struct HeldTask {
  v1::Task task;
  uint32_t job = 0;
  uint64_t end = 0;  // its last batch + 1, numbered as Frontiers numbers them
  Clock::time_point made_at;
  bool made = false;
};

// One producer on a thread of its own, as ProducerNode's heartbeat thread.
inline void RunProducer(const Config& cfg, Shared* sh, const Frontiers& frontiers, uint32_t index,
                        Stats& st) {
  auto client = NewClient(cfg);
  const std::string address = absl::StrCat("10.", (index >> 16) & 255, ".", (index >> 8) & 255, ".",
                                           index & 255, ":7000");  // never dialled
  uint64_t id = 0;
  std::map<uint64_t, HeldTask> held;
  std::vector<uint64_t> unreported;
  std::map<std::string, uint64_t> batches_per_epoch;  // from the JobInfos sent
  uint64_t made_batches = 0, served_batches = 0;
  // The supply model's counters (Shared::modelled): batches made and its threads' busy seconds.
  double model_made = 0, model_make_s = 0;
  Clock::time_point model_at = Clock::now();
  bool work_available = false, waits = false, last_ok = true;
  auto interval =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(st.interval_s));
  auto update = [&](Clock::time_point now) {
    size_t made = 0;
    for (auto& [tid, t] : held) made += t.made;
    for (auto& [tid, t] : held) {
      if (!t.made && now >= t.made_at && made < cfg.made_cap) {
        t.made = true;
        ++made;
        made_batches += t.task.num_batches();
      }
    }
    for (auto it = held.begin(); it != held.end();) {
      if (it->second.made && frontiers.batch[it->second.job].load() >= it->second.end) {
        served_batches += it->second.task.num_batches();
        unreported.push_back(it->first);
        ++st.tasks_finished;
        it = held.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto free_slots = [&] {
    uint32_t making = 0, made = 0;
    for (auto& [tid, t] : held) (t.made ? made : making) += 1;
    if (made >= 64) return 0u;
    return cfg.max_tasks > making ? cfg.max_tasks - making : 0u;
  };
  // One heartbeat; returns whether it was answered.
  auto beat = [&](bool wait, int kind, bool in_window) {
    update(Clock::now());
    v1::ProducerHeartbeatRequest req;
    req.set_producer_id(id);
    req.set_data_address(address);
    for (uint64_t t : unreported) req.add_finished_tasks(t);
    for (auto& [tid, t] : held) req.add_held_tasks(tid);
    req.set_held_tasks_reported(true);
    req.set_free_task_slots(free_slots());
    v1::ProducerStats* stats = req.mutable_stats();
    stats->set_buffer_capacity_bytes(256ull << 20);
    stats->set_threads(4);
    if (sh->modelled()) {
      // The model's: it makes its share of the demand, busy that share of its 4 threads' time.
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - model_at).count(), busy = sh->Busy();
      model_at = now;
      model_made += sh->capacity * busy * dt;
      model_make_s += 4 * busy * dt;
      stats->set_batches_made(static_cast<uint64_t>(model_made));
      stats->set_batches_served(static_cast<uint64_t>(model_made));
      stats->set_make_seconds(model_make_s);
    } else {
      stats->set_batches_made(made_batches);
      stats->set_batches_served(served_batches);
      stats->set_bytes_served(served_batches * 64);
    }
    if (wait && id != 0) req.set_wait_for_work_ms(static_cast<uint32_t>(st.interval_s * 1000));
    if (kind == kProducerHeartbeat && req.wait_for_work_ms() > 0) kind = kProducerWait;
    const auto sent = Clock::now();
    auto r = client->ProducerHeartbeat(req);
    const auto answered = Clock::now();
    st.Add(kind, answered - sent, in_window);
    if (!r.ok()) {
      st.Fail(kind, r.status());
      if (absl::IsNotFound(r.status()) && id != 0) {
        // Presumed dead, its work given to others: drop it all and register again, as
        // ProducerNode::Heartbeat does.
        held.clear();
        unreported.clear();
        id = 0;
        ++st.producers_reregistered;
      }
      return false;
    }
    if (AnsweredBy(sh, answered) == From::kNew && sh->producer_back_ns(index).load() == 0) {
      sh->producer_back_ns(index) = ToNs(answered);
    }
    unreported.clear();
    id = r->producer_id();
    if (r->heartbeat_interval_ms() > 0) {
      interval = std::chrono::milliseconds(r->heartbeat_interval_ms());
    }
    work_available = r->new_tasks_size() > 0;
    if (req.wait_for_work_ms() > 0) waits = r->waits_for_work();
    for (uint64_t t : r->revoked_tasks()) st.tasks_revoked += held.erase(t);
    for (const v1::JobInfo& j : r->jobs())
      batches_per_epoch[j.spec().name()] = j.batches_per_epoch();
    const auto now = Clock::now();
    for (const v1::Task& t : r->new_tasks()) {
      HeldTask h;
      h.task = t;
      for (uint32_t j = 0; j < cfg.jobs; ++j) {
        if (cfg.JobName(j) == t.job()) h.job = j;
      }
      h.end = t.epoch() * batches_per_epoch[t.job()] + t.first_batch() + t.num_batches();
      h.made_at =
          now + std::chrono::microseconds(static_cast<int64_t>(cfg.make_us * t.num_batches() / 4));
      held[t.task_id()] = std::move(h);
      ++st.tasks_taken;
    }
    return true;
  };
  // Leaves, as ProducerNode::Leave: the finished tasks and `leaving`; its tasks go to the others.
  auto leave = [&] {
    update(Clock::now());
    v1::ProducerHeartbeatRequest req;
    req.set_producer_id(id);
    req.set_data_address(address);
    for (uint64_t t : unreported) req.add_finished_tasks(t);
    req.set_leaving(true);
    const auto sent = Clock::now();
    const CallDeadline bounded(absl::Now() + absl::Seconds(st.interval_s));
    auto r = client->ProducerHeartbeat(req);
    st.Add(kProducerLeave, Clock::now() - sent, false);
    if (!r.ok()) st.Fail(kProducerLeave, r.status());
    held.clear();
    unreported.clear();
    id = 0;
    work_available = waits = false;
    last_ok = true;
  };
  // Registers at its share of the first interval, as the consumers do; then, while it is wanted
  // (Shared::wanted_producers), registers, beats and leaves when it is no longer wanted, until the
  // window's end. Its silences count while it is registered.
  std::this_thread::sleep_until(FromNs(sh->start_ns.load()) + interval * index / cfg.producers);
  bool live = false, counted = false;
  auto last = Clock::now();
  auto last_answered = last;
  double max_gap_s = 0;
  auto note_gap = [&](Clock::time_point upto) {
    const auto window_start = WindowStart(sh);
    if (live && upto > window_start) {
      max_gap_s = std::max(
          max_gap_s,
          std::chrono::duration<double>(upto - std::max(last_answered, window_start)).count());
    }
  };
  while (!sh->failed.load()) {
    const auto now = Clock::now();
    if (now >= WindowEnd(sh)) break;
    const bool wanted = index < sh->wanted_producers.load();
    if (!live) {
      if (!wanted) {
        // Looked at once a second: a thousand idle producers cost the client side little, and a
        // producer wanted registers within a second, well inside the autoscaler's round.
        std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;
      }
      if (!beat(false, kProducerRegister, false)) {
        std::this_thread::sleep_for(interval);  // refused: again at the next beat
        continue;
      }
      if (!counted) sh->registered_producers.fetch_add(1);
      counted = live = true;
      sh->live_producers.fetch_add(1);
      last = last_answered = Clock::now();
      continue;
    }
    if (!wanted) {
      note_gap(now);
      leave();
      live = false;
      sh->live_producers.fetch_sub(1);
      continue;
    }
    update(now);
    const bool free = free_slots() > 0;
    const bool due = now - last >= interval;
    const bool eager = work_available && free;
    const bool wait = !work_available && free && waits && last_ok;
    if (!due && !eager && !wait) {
      // Sleep to the next event: the interval or a task made. Served tasks are looked for at the
      // beat, as a real producer takes its finished tasks when it beats. One no longer wanted
      // leaves at its next beat.
      auto next = last + interval;
      for (auto& [tid, t] : held) {
        // A task already due to be made but held back by a full buffer waits for a serve.
        if (!t.made && t.made_at > now) next = std::min(next, t.made_at);
      }
      std::this_thread::sleep_until(next);
      continue;
    }
    last_ok = beat(wait, kProducerHeartbeat, now >= WindowStart(sh));
    last = Clock::now();
    if (last_ok) {
      note_gap(last);
      last_answered = last;
    }
  }
  if (sh->failed.load()) return;
  note_gap(WindowEnd(sh));
  st.max_producer_gap_s = std::max(st.max_producer_gap_s, max_gap_s);
  if (max_gap_s > cfg.producer_timeout_s) ++st.producers_missed;
  if (!live) return;
  leave();
  sh->live_producers.fetch_sub(1);
}

// A client process: consumers c with c % processes == k on `threads` threads, producers p with
// p % processes == k on a thread each, and one thread refreshing the served frontiers. Returns
// its merged statistics.
inline Stats RunClientProcess(const Config& cfg, Shared* sh, uint32_t k) {
  std::vector<Consumer> all;
  for (uint32_t c = k; c < cfg.consumers; c += cfg.processes) {
    Consumer x;
    x.index = c;
    x.job = c % cfg.jobs;
    x.rank = c / cfg.jobs;
    all.push_back(x);
  }
  const uint32_t threads = std::max<uint32_t>(1, std::min<uint32_t>(cfg.threads, all.size()));
  std::vector<std::vector<Consumer>> shares(threads);
  for (size_t i = 0; i < all.size(); ++i) shares[i % threads].push_back(all[i]);
  std::vector<uint32_t> mine;
  for (uint32_t p = k; p < cfg.producers; p += cfg.processes) mine.push_back(p);
  std::vector<Stats> stats(threads + mine.size());
  Frontiers frontiers;
  std::atomic<bool> done{false};
  std::thread refresher([&] {
    while (!done.load()) {
      frontiers.Refresh(cfg, sh);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads && !all.empty(); ++t) {
    pool.emplace_back([&, t] { RunConsumers(cfg, sh, shares[t], stats[t]); });
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    pool.emplace_back([&, i] { RunProducer(cfg, sh, frontiers, mine[i], stats[threads + i]); });
  }
  for (std::thread& t : pool) t.join();
  done = true;
  refresher.join();
  Stats merged;
  for (const Stats& s : stats) merged.Merge(s);
  return merged;
}

}  // namespace croupier::bench::hollow

#endif  // CROUPIER_BENCH_HOLLOW_CLIENTS_H_
