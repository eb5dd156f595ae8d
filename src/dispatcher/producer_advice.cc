#include "src/dispatcher/producer_advice.h"

#include <algorithm>
#include <cmath>

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
    advice_.reason = "no consumer of a TFRecord job: nothing to measure demand by";
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
  for (const ConsumerLoad& c : consumers) {
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
  const uint32_t up =
      static_cast<uint32_t>(std::clamp(std::ceil(advice_.target - kUpTolerance), 1.0, max));
  const uint32_t down = static_cast<uint32_t>(
      std::clamp(std::ceil(advice_.target - kUpTolerance + kDownMargin), 1.0, max));
  const uint32_t current = advice_.recommended;
  int direction = 0;
  uint32_t candidate = current;
  if (current == 0) {
    // The first figure, once the averages have had time to settle: nothing to flap from.
    if (now - first_measured_ >= std::max(options_.hold, options_.smoothing)) {
      advice_.recommended = up;
    }
  } else if (up > current) {
    direction = 1;
    candidate = up;
  } else if (down < current) {
    direction = -1;
    candidate = down;
  }
  if (direction != pending_direction_) {
    pending_direction_ = direction;
    pending_since_ = now;
  }
  if (direction != 0 && now - pending_since_ >= options_.hold) {
    advice_.recommended = candidate;
    pending_direction_ = 0;
  }
  advice_.reason = absl::StrFormat(
      "the consumers would take %.1f batches/s; one producer could make %.1f: %.2f producers%s",
      advice_.demand, advice_.capacity, advice_.target,
      advice_.recommended == 0  ? " (measuring)"
      : pending_direction_ == 0 ? ""
      : pending_direction_ > 0  ? " (more, if it lasts)"
                                : " (fewer, if it lasts)");
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
