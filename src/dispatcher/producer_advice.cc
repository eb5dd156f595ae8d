#include "src/dispatcher/producer_advice.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace croupier {
namespace {

// Consumers that wait this much of the time, fed by producers busy less than this, are held up
// by something other than the producers.
constexpr double kWaitingConsumers = 0.25;
constexpr double kIdleProducers = 0.5;

}  // namespace

const ProducerAdvisor::Advice& ProducerAdvisor::Update(absl::Time now,
                                                       const std::vector<ConsumerLoad>& consumers,
                                                       const std::vector<ProducerLoad>& producers) {
  advice_.producers = static_cast<uint32_t>(producers.size());
  if (consumers.empty()) {
    advice_.reason =
        absl::StrCat("no consumer of ", consumers_of_, ": nothing to measure demand by");
    return advice_;
  }
  if (producers.empty()) {
    // Nothing can be measured without a producer, but one is needed.
    advice_.recommended = std::max<uint32_t>(advice_.recommended, 1);
    advice_.reason = "no producer: at least one is needed to measure";
    pending_direction_ = 0;
    return advice_;
  }
  double demand = 0, mean_bound = 0;
  bool bounded = false;  // a consumer's demand is only a bound (it waits nearly all the time)
  for (const ConsumerLoad& c : consumers) {
    bounded = bounded || c.input_bound >= kMaxInputBound;
    const double bound = std::clamp(c.input_bound, 0.0, kMaxInputBound);
    demand += std::max(0.0, c.batches_per_second) / (1 - bound);
    mean_bound += std::clamp(c.input_bound, 0.0, 1.0) / consumers.size();
  }
  double capacity = 0, busy = 0;
  int measured = 0, with_busy = 0;
  for (const ProducerLoad& p : producers) {
    if (p.batches_per_second <= 0) continue;  // made nothing lately: nothing to measure
    double c = p.batches_per_second;
    if (p.busy_share.has_value()) {
      const double share = std::clamp(*p.busy_share, kMinBusyShare, 1.0);
      c /= share;
      busy += share;
      ++with_busy;
    }
    capacity += c;
    ++measured;
  }
  if (measured > 0) capacity /= measured;
  if (demand <= 0 || capacity <= 0) {
    // Consumers that took nothing (paused, or done) or producers that made nothing (no work
    // yet): no measurement, the figure stays.
    advice_.reason = demand <= 0 ? "the consumers took no batch lately: figure kept"
                                 : "the producers made no batch lately: figure kept";
    return advice_;
  }

  const double latest_target = demand / capacity;
  const double mean_busy = with_busy > 0 ? busy / with_busy : 1.0;
  advice_.latest_target = latest_target;
  advice_.input_bound = mean_bound;
  advice_.busy = mean_busy;

  // Exponentially weighted averages, each sample weighted by the time it covers (the first one
  // as a second), and divided by the total weight so that the first samples are not pulled
  // towards 0: until `smoothing` has passed they are close to plain averages.
  const double tau = absl::ToDoubleSeconds(options_.smoothing);
  const double dt = weight_ == 0 ? 1.0 : std::max(0.0, absl::ToDoubleSeconds(now - last_));
  const double decay = std::exp(-dt / tau);
  if (weight_ == 0) first_measured_ = now;
  weight_ = weight_ * decay + (1 - decay);
  demand_sum_ = demand_sum_ * decay + (1 - decay) * demand;
  capacity_sum_ = capacity_sum_ * decay + (1 - decay) * capacity;
  advice_.demand = demand_sum_ / weight_;
  advice_.capacity = capacity_sum_ / weight_;
  last_ = now;
  advice_.target = advice_.demand / advice_.capacity;

  const double max = options_.max_producers;
  const bool starved = mean_bound >= kStarved;
  const bool saturated = mean_busy >= kSaturated;
  // A starved streak's wait is measured against its first sample, or the wait when the figure
  // last changed: a wait that falls is a change still showing in the consumers' smoothed rates.
  if (!starved || wait_reference_ < 0) wait_reference_ = mean_bound;
  const bool one_more =
      saturated && mean_bound >= kStillStarved && mean_bound >= kNotFalling * wait_reference_;
  const uint32_t current = advice_.recommended;
  // What is running (or recommended, if the figure is not followed yet): while a consumer's
  // demand is only a bound, a rise is at most twice that.
  const double base = std::max<double>(1, std::max<size_t>(current, producers.size()));
  const double ceiling = bounded ? std::min(max, 2 * base) : max;
  const auto rounded = [](double target, double add, double high) {
    return static_cast<uint32_t>(
        std::clamp(std::ceil(target - kUpTolerance + add), 1.0, std::max(1.0, high)));
  };
  int direction = 0;
  uint32_t candidate = current;
  if (current == 0) {
    // The first figure: nothing to flap from yet. Consumers that wait get it after up_hold, as a
    // rise; others after hold, as a fall (never more producers than there are).
    const double running = std::max<double>(1, producers.size());
    if (starved && now - first_measured_ >= options_.up_hold) {
      advice_.recommended = rounded(latest_target, 0, ceiling);
      if (one_more) {
        advice_.recommended =
            std::max(advice_.recommended, static_cast<uint32_t>(std::min(ceiling, running + 1)));
      }
    } else if (!starved && now - first_measured_ >= options_.hold) {
      advice_.recommended = rounded(advice_.target, kDownMargin, running);
    }
    // The cooldown counts from a figure that changes what runs.
    if (advice_.recommended != 0 && advice_.recommended != producers.size()) {
      last_change_ = now;
      wait_reference_ = mean_bound;
    }
  } else if (starved) {
    uint32_t up = rounded(latest_target, 0, ceiling);
    if (one_more) up = std::max<uint32_t>(up, static_cast<uint32_t>(std::min(ceiling, base + 1)));
    if (up > current) {
      direction = 1;
      candidate = up;
    }
  } else {
    const uint32_t down = rounded(advice_.target, kDownMargin, max);
    if (down < current) {
      direction = -1;
      candidate = down;
    }
  }
  if (direction != pending_direction_) {
    pending_direction_ = direction;
    pending_since_ = now;
  }
  const absl::Duration hold = direction > 0 ? options_.up_hold : options_.hold;
  const bool cooling = now - last_change_ < options_.cooldown;
  if (direction != 0 && !cooling && now - pending_since_ >= hold) {
    advice_.recommended = candidate;
    pending_direction_ = 0;
    last_change_ = now;
    wait_reference_ = mean_bound;
  }
  // A rise: the averages start again from the next measurement. What the consumers were
  // measured to demand while they waited is low (only a bound while they waited nearly all the
  // time), and a fall read from averages that still held it would take away producers the
  // demand needs.
  if (advice_.recommended > current && advice_.recommended > producers.size()) {
    weight_ = demand_sum_ = capacity_sum_ = 0;
  }
  advice_.reason = absl::StrFormat(
      "the consumers would take %.1f batches/s (%.1f now) and wait %.0f%% of the time; one "
      "producer could make %.1f (%.1f now), busy %.0f%%: %.2f producers (%.2f now)%s",
      advice_.demand, demand, 100 * mean_bound, advice_.capacity, capacity, 100 * mean_busy,
      advice_.target, latest_target,
      advice_.recommended == 0  ? " (measuring)"
      : pending_direction_ == 0 ? ""
      : pending_direction_ > 0
          ? (cooling ? " (more, after the cooldown)" : " (more, if it lasts)")
          : (cooling ? " (fewer, after the cooldown)" : " (fewer, if it lasts)"));
  if (with_busy > 0 && mean_bound >= kWaitingConsumers && busy / with_busy < kIdleProducers) {
    absl::StrAppendFormat(&advice_.reason,
                          "; the consumers wait %.0f%% of the time while the producers are busy "
                          "%.0f%%: the limit is not the producers (network, fetch latency, "
                          "prefetch)",
                          100 * mean_bound, 100 * busy / with_busy);
  }
  return advice_;
}

}  // namespace croupier
