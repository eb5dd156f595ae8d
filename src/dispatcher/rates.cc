#include "src/dispatcher/rates.h"

#include <algorithm>
#include <cmath>

namespace croupier {

void ProducerRates::Report(const v1::ProducerStats& stats, absl::Time now) {
  const uint64_t made = stats.batches_made();
  const double cpu = stats.cpu_seconds();
  const double making = stats.make_seconds();
  const uint32_t threads = stats.threads();
  const bool due = !has_sample_ || now - sample_time_ >= kRateSpan;
  if (has_sample_ && due) {
    const double dt = absl::ToDoubleSeconds(now - sample_time_);
    batches_per_second_ = made < sample_batches_ ? 0 : (made - sample_batches_) / dt;
    cpu_cores_ = cpu < sample_cpu_seconds_ ? 0 : (cpu - sample_cpu_seconds_) / dt;
    busy_share_ = threads == 0 || making < sample_make_seconds_
                      ? 0
                      : std::clamp((making - sample_make_seconds_) / (threads * dt), 0.0, 1.0);
    measured_ = true;
  }
  if (due) {
    has_sample_ = true;
    sample_time_ = now;
    sample_batches_ = made;
    sample_cpu_seconds_ = cpu;
    sample_make_seconds_ = making;
  }
}

void ConsumerRates::Report(uint64_t batches_received, double wait_seconds, absl::Time now) {
  if (!has_sample_ || batches_received < sample_batches_ || wait_seconds < sample_wait_seconds_) {
    has_sample_ = true;  // the first figures, or counters that went back
    sample_time_ = now;
    sample_batches_ = batches_received;
    sample_wait_seconds_ = wait_seconds;
    return;
  }
  if (now - sample_time_ < kRateSpan) return;
  const double dt = absl::ToDoubleSeconds(now - sample_time_);
  const double rate = (batches_received - sample_batches_) / dt;
  const double bound = std::clamp((wait_seconds - sample_wait_seconds_) / dt, 0.0, 1.0);
  const double alpha = 1 - std::exp(-dt / absl::ToDoubleSeconds(kConsumerRateSmoothing));
  const double keep = measured_ ? 1 - alpha : 0;  // the first rates are taken whole
  batches_per_second_ = keep * batches_per_second_ + (1 - keep) * rate;
  input_bound_ = keep * input_bound_ + (1 - keep) * bound;
  measured_ = true;
  sample_time_ = now;
  sample_batches_ = batches_received;
  sample_wait_seconds_ = wait_seconds;
}

}  // namespace croupier
