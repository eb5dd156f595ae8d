#include "src/consumer/prefetcher.h"

namespace croupier {

Prefetcher::Prefetcher(Options options, FetchFn fetch)
    : options_(options), fetch_(std::move(fetch)), next_issue_(options.first),
      next_take_(options.first) {
  const uint32_t n = std::max<uint32_t>(1, options_.max_batches);
  for (uint32_t i = 0; i < n; ++i) workers_.emplace_back([this] { Work(); });
}

Prefetcher::~Prefetcher() {
  Cancel();
  for (auto& w : workers_) w.join();
}

bool Prefetcher::CanIssue() const {
  if (cancelled_ || failed_.has_value() || next_issue_ >= options_.end) return false;
  // The window: batches held or in flight, and bytes held. One batch always fits, so a batch
  // larger than max_bytes still moves.
  const uint64_t held = ready_.size() + in_flight_;
  if (held >= options_.max_batches) return false;
  if (held == 0) return true;
  // A fetch's size is known only when it lands, so each one in flight counts at the size of the
  // last batch received, and until one has landed fetches go one at a time. (Counting them as
  // free let every worker start at once and overshoot max_bytes.)
  if (last_bytes_ == 0) return in_flight_ == 0;
  return bytes_ + in_flight_ * last_bytes_ < options_.max_bytes;
}

void Prefetcher::Work() {
  while (true) {
    uint64_t slot;
    {
      absl::MutexLock lock(&mu_);
      while (!CanIssue() && !cancelled_ && !failed_.has_value() && next_issue_ < options_.end) {
        changed_.Wait(&mu_);
      }
      if (!CanIssue()) {
        ++workers_done_;
        changed_.SignalAll();
        return;
      }
      slot = next_issue_++;
      ++in_flight_;
    }
    absl::StatusOr<Batch> result = fetch_(slot);
    absl::MutexLock lock(&mu_);
    --in_flight_;
    changed_.SignalAll();
    if (options_.any_order && absl::IsOutOfRange(result.status())) {
      ++workers_done_;  // the epoch has nothing more to give this worker
      return;
    }
    if (result.ok()) {
      bytes_ += result->bytes().size();
      last_bytes_ = result->bytes().size();
    }
    ready_.emplace(slot, std::move(result));
  }
}

absl::StatusOr<std::optional<Batch>> Prefetcher::Next() {
  absl::MutexLock lock(&mu_);
  if (failed_.has_value()) return *failed_;
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancelled_) return true;
    if (options_.any_order) return !ready_.empty() || workers_done_ == workers_.size();
    return next_take_ >= options_.end || ready_.count(next_take_) > 0;
  };
  while (!ready()) changed_.Wait(&mu_);
  if (cancelled_) return absl::CancelledError("the consumer was closed");
  if (ready_.empty() && (options_.any_order || next_take_ >= options_.end)) {
    return std::optional<Batch>();
  }
  auto it = options_.any_order ? ready_.begin() : ready_.find(next_take_);
  absl::StatusOr<Batch> result = std::move(it->second);
  ready_.erase(it);
  ++next_take_;
  changed_.SignalAll();
  if (!result.ok()) {
    failed_ = result.status();
    return result.status();
  }
  bytes_ -= result->bytes().size();
  return std::optional<Batch>(*std::move(result));
}

uint64_t Prefetcher::next_slot() const {
  absl::MutexLock lock(&mu_);
  return next_take_;
}

void Prefetcher::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  changed_.SignalAll();
}

}  // namespace croupier
