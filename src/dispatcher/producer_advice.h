// The recommended number of producers: how many producers some consumers need, from what the
// dispatcher measures. Plain logic over figures, fed once a second by the dispatcher
// (DispatcherImpl::Tick, UpdateAdviceLocked) and tested alone. The dispatcher keeps one for the
// cluster (the `croupier producer` processes, for the consumers of every TFRecord job) and one per
// job (that job's consumers, and the producers that make its batches).
//
// The model. A consumer that received r batches/s and waited a share w of its wall time for data
// would take r / (1 - w) batches/s if its input never made it wait: that is its demand (w is
// capped at kMaxInputBound, so a consumer that waits all the time counts as demanding
// 1 / (1 - kMaxInputBound) times what it gets). A producer's capacity is the batches/s it made
// divided by its busy share, the share of its worker threads' time spent making batches (capped
// below at kMinBusyShare): a producer held back by its consumers (full buffer, or waiting for
// tasks) could make more than it does. A producer that does not report its busy share (a
// Python source) counts at its rate; one that made nothing lately is not counted. The target is
// the total demand over the mean capacity per producer.
//
// If the consumers wait for data while the producers are mostly idle, the limit is not the
// producers (the network, the latency of each fetch, the consumers' prefetch): the target then
// stays low, and the reason says so.
//
// The policy (docs/operations.md, "How many producers"). Rising is quick, falling is slow:
//  - rise: while the consumers wait for data (mean input-bound share >= kStarved), to
//    ceil(latest target - kUpTolerance) or, if the producers are saturated (mean busy share
//    >= kSaturated, or not reported) and the consumers' wait is kStillStarved or more and not
//    falling, at least one more than now; at most `max_producers`, and
//    at most twice the producers now while a consumer waits kMaxInputBound of its time or more
//    (its demand is then only a bound). The condition must
//    last `up_hold`. Consumers waiting on producers that are not saturated get no rise when the
//    model does not ask for one (the limit is elsewhere). After a rise the moving averages start
//    again: the demand measured while the consumers waited is low (only a bound while they waited
//    nearly all the time), and a fall read from averages that still held it would take away
//    producers the demand needs.
//  - fall: while the consumers do not wait (below kStarved) and the smoothed target (exponential
//    moving averages of demand and capacity, time constant `smoothing`) leaves a margin, to
//    ceil(smoothed target - kUpTolerance + kDownMargin) when that is lower; the condition must
//    last `hold` without a break.
//  - cooldown: no change within `cooldown` of the last one that changed what runs (the rates
//    measured after a change take that long to show it: consumer rates are smoothed over
//    kConsumerRateSmoothing).
// The first figure (0 until then) comes `up_hold` after the first measurement if the consumers
// wait, as a rise would, and `hold` after it if not, as a fall would (never above the producers
// running). The gap between the rise and fall thresholds (hysteresis), the
// hold and the cooldown keep noise from making it flap.
#ifndef CROUPIER_SRC_DISPATCHER_PRODUCER_ADVICE_H_
#define CROUPIER_SRC_DISPATCHER_PRODUCER_ADVICE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace croupier {

// The input-bound share above which a consumer's demand is taken as 1 / (1 - this) its rate.
inline constexpr double kMaxInputBound = 0.9;
// Consumers waiting this share of their time (on average) or more ask for more producers; below
// it, none are added, and only below it can some be removed.
inline constexpr double kStarved = 0.05;
// Producers busy this share of their time (on average) or more are saturated: one more is added
// for consumers that wait kStillStarved or more on them, whatever the model says, if their wait
// is not falling (at least kNotFalling times what it was when the figure last changed or the
// waiting began: a falling wait is the last change still showing in the smoothed rates).
inline constexpr double kSaturated = 0.85;
inline constexpr double kStillStarved = 0.10;
inline constexpr double kNotFalling = 0.8;
// A target this far above an integer does not ask for one more producer (measuring noise).
inline constexpr double kUpTolerance = 0.05;
// Going down, this is added before rounding: 3 producers become 2 only when the smoothed target
// falls to 1.8 (a 10% margin below what 2 producers make).
inline constexpr double kDownMargin = 0.25;
// Below this busy share a producer's capacity is not extrapolated further (20 times its rate).
inline constexpr double kMinBusyShare = 0.05;

// Not thread-safe (the dispatcher calls it under its lock).
class ProducerAdvisor {
 public:
  struct Options {
    absl::Duration smoothing = absl::Seconds(30);  // the moving averages' time constant
    absl::Duration hold = absl::Seconds(15);       // how long a fall must be asked for
    absl::Duration up_hold = absl::Seconds(2);     // how long a rise must be asked for
    absl::Duration cooldown = absl::Seconds(8);    // no change within this of the last one
    uint32_t max_producers = 1024;                 // never recommend more
  };
  // A live consumer's rates over its last heartbeats.
  struct ConsumerLoad {
    double batches_per_second = 0;
    double input_bound = 0;  // share of wall time spent waiting for data, in [0, 1]
  };
  // A live producer's rates over its last heartbeats.
  struct ProducerLoad {
    double batches_per_second = 0;
    // The share of its worker threads' time spent making batches, in [0, 1]; nullopt if the
    // producer does not report it.
    std::optional<double> busy_share;
  };
  struct Advice {
    uint32_t recommended = 0;  // 0 while measuring (1 at once without producers)
    double target = 0;         // the smoothed target, in producers (what falls follow)
    double latest_target = 0;  // the latest measurement's target (what rises follow)
    double input_bound = 0;    // the consumers' mean input-bound share, latest
    double busy = 0;           // the producers' mean busy share, latest (1 if not reported)
    double demand = 0;         // batches/s the consumers would take (smoothed)
    double capacity = 0;       // batches/s per producer (smoothed)
    uint32_t producers = 0;    // live producers counted
    std::string reason;        // one sentence: why the figure is what it is
  };

  // `consumers_of` names whose consumers it measures, for the reason without any ("no consumer
  // of <consumers_of>").
  explicit ProducerAdvisor(Options options, std::string consumers_of = "a TFRecord job")
      : options_(options), consumers_of_(std::move(consumers_of)) {}
  ProducerAdvisor() : ProducerAdvisor(Options()) {}

  // One measurement at `now` (non-decreasing between calls). Returns the advice.
  const Advice& Update(absl::Time now, const std::vector<ConsumerLoad>& consumers,
                       const std::vector<ProducerLoad>& producers);
  const Advice& advice() const { return advice_; }

 private:
  const Options options_;
  const std::string consumers_of_;
  Advice advice_;
  // The moving averages' weighted sums and total weight (0: nothing measured yet).
  double demand_sum_ = 0;
  double capacity_sum_ = 0;
  double weight_ = 0;
  absl::Time first_measured_;
  absl::Time last_;
  // Whether the smoothed target asks for more (1) or fewer (-1) producers than recommended, and
  // since when; 0: neither.
  int pending_direction_ = 0;
  absl::Time pending_since_;
  absl::Time last_change_ = absl::InfinitePast();
  double wait_reference_ = -1;  // the consumers' wait a rise by one is measured against
};

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_PRODUCER_ADVICE_H_
