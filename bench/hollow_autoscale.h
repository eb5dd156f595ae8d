// The autoscaler's policy over hollow producers (issue 36, item 4; bench_hollow --autoscale N):
// the dispatcher's recommended number of producers (src/dispatcher/producer_advice.h), followed
// as croupier.autoscale.Autoscaler follows it, with up to `pool` hollow producers to start and
// stop.
//
// The supply model (hollow_clients.h, Shared): every consumer would take `demand` batches/s (its
// steps per beat over the heartbeat interval) and every producer makes at most `capacity`, set so
// that N producers meet the demand exactly. At each heartbeat a consumer reports the batches it
// received and the seconds it waited at the share the live producers deliver, min(1, live *
// capacity / total demand), and a producer the batches it made and its threads' busy seconds at
// the share of its capacity the demand uses: the figures the dispatcher measures a real
// cluster's by (src/dispatcher/rates.h). The protocol is the real one (registration, beats,
// leaving, task assignment); only the rates are the model's.
//
// The loop, as Autoscaler.step: every `interval_s` it reads producer_advice.recommended from a
// status without the client lists and, when it is not 0 (still measuring), sets the producers
// wanted to it, within [1, pool]. Producer p runs while p < wanted: it registers when it becomes
// wanted and leaves when it no longer is. It starts with one.
//
// Measured, from the window's start (the loop's first round): when the figure first came, when
// the live producers first reached 90% and 100% of N, the highest number running, the changes
// made, and the delivered share each second: its mean over the window against the best fixed
// count's (N from the start, which delivers all the demand: 1.0), and over the last 60 s.
#ifndef CROUPIER_BENCH_HOLLOW_AUTOSCALE_H_
#define CROUPIER_BENCH_HOLLOW_AUTOSCALE_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/hollow_clients.h"
#include "proto/croupier.pb.h"

namespace croupier::bench::hollow {

class AutoscaleRun {
 public:
  AutoscaleRun(uint32_t needed, uint32_t pool, double interval_s)
      : needed_(needed), pool_(pool), interval_s_(interval_s) {}

  double interval_s() const { return interval_s_; }

  // One round at `t` seconds into the window, on the advice of a status just read.
  void Round(double t, const v1::ProducerAdvice& advice, Shared* sh) {
    const uint32_t recommended = advice.recommended();
    if (recommended == 0) return;  // the dispatcher is still measuring
    if (first_figure_s_ < 0) first_figure_s_ = t;
    const uint32_t wanted = std::clamp<uint32_t>(recommended, 1, pool_);
    const uint32_t before = sh->wanted_producers.load();
    if (wanted == before) return;
    sh->wanted_producers = wanted;
    ++changes_;
    std::fprintf(stderr,
                 "bench_hollow --autoscale: %6.1f s: %u -> %u producers (%u live; delivered %.3f; "
                 "target %.1f; %s)\n",
                 t, before, wanted, sh->live_producers.load(), sh->Delivered(), advice.target(),
                 advice.reason().c_str());
  }

  // The model's state at `t` seconds into the window, sampled once a second.
  void Sample(double t, const Shared* sh) {
    const uint32_t live = sh->live_producers.load();
    max_live_ = std::max(max_live_, live);
    if (reached90_s_ < 0 && live * 10 >= needed_ * 9) reached90_s_ = t;
    if (reached_s_ < 0 && live >= needed_) reached_s_ = t;
    delivered_.emplace_back(t, sh->Delivered());
  }

  // The summary's fields, as JSON members after a comma.
  std::string Report(const Shared* sh, double seconds) const {
    double sum = 0, last_sum = 0;
    size_t last_n = 0;
    for (const auto& [t, d] : delivered_) {
      sum += d;
      if (t >= seconds - 60) {
        last_sum += d;
        ++last_n;
      }
    }
    const double mean = delivered_.empty() ? 0 : sum / delivered_.size();
    return absl::StrFormat(
        ", \"autoscale\": {\"needed\": %u, \"pool\": %u, \"interval_s\": %.3g, "
        "\"first_figure_s\": %.1f, \"reached_90_s\": %.1f, \"reached_s\": %.1f, "
        "\"final_wanted\": %u, \"final_live\": %u, \"max_live\": %u, \"changes\": %u, "
        "\"delivered_mean\": %.3f, \"delivered_last_60s\": %.3f, \"best_fixed\": 1.0}",
        needed_, pool_, interval_s_, first_figure_s_, reached90_s_, reached_s_,
        sh->wanted_producers.load(), sh->live_producers.load(), max_live_, changes_, mean,
        last_n == 0 ? 0 : last_sum / last_n);
  }

 private:
  const uint32_t needed_, pool_;
  const double interval_s_;
  double first_figure_s_ = -1, reached90_s_ = -1, reached_s_ = -1;  // -1: not (yet)
  uint32_t max_live_ = 0, changes_ = 0;
  std::vector<std::pair<double, double>> delivered_;  // (t, delivered share), once a second
};

}  // namespace croupier::bench::hollow

#endif  // CROUPIER_BENCH_HOLLOW_AUTOSCALE_H_
