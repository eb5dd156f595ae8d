// Rates the dispatcher measures between heartbeats, from the counters producers and consumers
// report: what `croupier status` shows and what the producer advice (producer_advice.h) reads.
// Plain values, fed one heartbeat at a time; no clock of their own.
#ifndef CROUPIER_SRC_DISPATCHER_RATES_H_
#define CROUPIER_SRC_DISPATCHER_RATES_H_

#include <cstdint>

#include "absl/time/time.h"
#include "proto/croupier.pb.h"

namespace croupier {

// Rates are measured over at least this span (producers beat more often while work flows).
inline constexpr absl::Duration kRateSpan = absl::Seconds(1);
// Consumers' rates are smoothed with this time constant.
inline constexpr absl::Duration kConsumerRateSmoothing = absl::Seconds(5);

// A producer's batches made per second, CPU cores used and the busy share of its worker threads,
// each between two reports at least kRateSpan apart. A counter that went back (a restarted
// producer) gives 0. Thread-compatible.
class ProducerRates {
 public:
  void Report(const v1::ProducerStats& stats, absl::Time now);

  bool measured() const { return measured_; }  // two reports kRateSpan apart were seen
  double batches_per_second() const { return batches_per_second_; }
  double cpu_cores() const { return cpu_cores_; }
  double busy_share() const { return busy_share_; }  // 0 to 1; 0 without threads reported

 private:
  bool has_sample_ = false;
  absl::Time sample_time_;
  uint64_t sample_batches_ = 0;
  double sample_cpu_seconds_ = 0;
  double sample_make_seconds_ = 0;
  bool measured_ = false;
  double batches_per_second_ = 0;
  double cpu_cores_ = 0;
  double busy_share_ = 0;
};

// A consumer's batches received per second and its input-bound share (the share of wall time
// spent waiting for data, 0 to 1), between reports at least kRateSpan apart, smoothed
// exponentially over kConsumerRateSmoothing (the first rates are taken whole). Counters that
// went back start the measure again. Thread-compatible.
class ConsumerRates {
 public:
  void Report(uint64_t batches_received, double wait_seconds, absl::Time now);

  bool measured() const { return measured_; }
  double batches_per_second() const { return batches_per_second_; }
  double input_bound() const { return input_bound_; }

 private:
  bool has_sample_ = false;
  absl::Time sample_time_;
  uint64_t sample_batches_ = 0;
  double sample_wait_seconds_ = 0;
  bool measured_ = false;
  double batches_per_second_ = 0;
  double input_bound_ = 0;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_RATES_H_
