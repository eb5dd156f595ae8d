#include "src/consumer/prefetcher.h"

#include <algorithm>

namespace croupier {

Prefetcher::Prefetcher(Options options, FetchFn fetch, FetchGroupFn fetch_group)
    : options_(options), fetch_(std::move(fetch)),
      fetch_group_(options.any_order ? nullptr : std::move(fetch_group)),
      next_issue_(options.first), next_take_(options.first) {
  const uint32_t n = options_.max_batches == 0 ? kAutoBatches : options_.max_batches;
  for (uint32_t i = 0; i < n; ++i) workers_.emplace_back([this] { Work(); });
}

Prefetcher::~Prefetcher() {
  Cancel();
  {
    // A Next() on another thread (a fetch of its own, or woken by the cancel) leaves first.
    absl::MutexLock lock(&mu_);
    auto left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return callers_ == 0; };
    mu_.Await(absl::Condition(&left));
  }
  for (auto& w : workers_) w.join();
}

bool Prefetcher::CanIssue() const {
  if (cancelled_ || failed_.has_value() || next_issue_ >= options_.end) return false;
  // The window: batches held or in flight, and bytes held. One batch always fits, so a batch
  // larger than max_bytes still moves.
  const uint64_t held = ready_.size() + deferred_.size() + in_flight_;
  if (held >= Window()) return false;
  if (held == 0) return true;
  // A fetch's size is known only when it lands, so each one in flight counts at the size of the
  // last batch received, and until one has landed fetches go one at a time. (Counting them as
  // free let every worker start at once and overshoot max_bytes.)
  if (last_bytes_ == 0) return in_flight_ == 0;
  return bytes_ + in_flight_ * last_bytes_ < options_.max_bytes;
}

uint32_t Prefetcher::IssueCount() const {
  // Groups once the batches are known to be small; one at a time until then.
  if (!Grouping()) return 1;
  const uint64_t window = Window();
  const uint64_t held = ready_.size() + deferred_.size() + in_flight_;
  uint64_t free = window - std::min(window, held);
  // The byte bound, at the size of the last batch received.
  if (bytes_ + in_flight_ * last_bytes_ < options_.max_bytes) {
    free = std::min<uint64_t>(free,
                              (options_.max_bytes - bytes_ - in_flight_ * last_bytes_ +
                               last_bytes_ - 1) / last_bytes_);
  }
  free = std::max<uint64_t>(free, 1);  // CanIssue said one fits
  const uint64_t left = options_.end - next_issue_;
  // Wait for half the window (two groups in flight hide each other's round trip), unless the
  // caller has nothing to take or the epoch ends sooner.
  const uint64_t half = (window + 1) / 2;
  if (free < std::min(half, left) && held > 0) return 0;
  return static_cast<uint32_t>(std::min(free, left));
}

void Prefetcher::WakeAWorkerIfUseful() {
  if (CanIssue() && IssueCount() > 0) can_issue_.Signal();
}

void Prefetcher::Work() {
  while (true) {
    uint64_t slot;
    uint32_t count;
    {
      absl::MutexLock lock(&mu_);
      while (!cancelled_ && !failed_.has_value() && next_issue_ < options_.end &&
             !(CanIssue() && IssueCount() > 0)) {
        can_issue_.Wait(&mu_);
      }
      if (!CanIssue()) {
        ++workers_done_;
        changed_.SignalAll();
        can_issue_.SignalAll();  // the others stop too
        return;
      }
      slot = next_issue_;
      count = IssueCount();
      next_issue_ += count;
      in_flight_ += count;
      if (next_issue_ >= options_.end) {
        can_issue_.SignalAll();  // nothing left to issue: the idle workers end
      } else if (CanIssue() && IssueCount() > 0) {
        can_issue_.Signal();  // room for another fetch: pass the turn on
      }
    }
    if (count > 1) {
      absl::MutexLock lock(&mu_);
      FetchGroup(slot, count);
      WakeAWorkerIfUseful();
      continue;
    }
    absl::StatusOr<Batch> result = fetch_(slot);
    absl::MutexLock lock(&mu_);
    --in_flight_;
    changed_.SignalAll();
    if (options_.any_order && absl::IsOutOfRange(result.status())) {
      // The epoch has nothing more to give this worker. The others may be waiting for this
      // fetch to land before they issue (one at a time until a batch has landed): wake them, so
      // that each finds the end for itself and the last one ends the caller's wait.
      ++workers_done_;
      can_issue_.SignalAll();
      return;
    }
    if (result.ok()) {
      bytes_ += result->bytes().size();
      last_bytes_ = result->bytes().size();
    }
    ready_.emplace(slot, std::move(result));
    WakeAWorkerIfUseful();
  }
}

uint64_t Prefetcher::Window() const {
  if (options_.max_batches != 0) return options_.max_batches;
  if (!Grouping()) return kAutoBatches;
  return std::clamp<uint64_t>(kAutoGroupedBytes / last_bytes_, kAutoBatches, kAutoMaxBatches);
}

bool Prefetcher::Grouping() const {
  return fetch_group_ != nullptr && last_bytes_ != 0 && last_bytes_ <= options_.group_below_bytes;
}

void Prefetcher::FetchInline() {
  // The caller would only wait: it fetches the whole free window itself, with no hand-over
  // between threads at all.
  const uint64_t slot = next_issue_;
  const uint64_t window = Window();
  const uint64_t held = ready_.size() + deferred_.size() + in_flight_;
  uint64_t count = std::min<uint64_t>(window - std::min(window, held), options_.end - slot);
  if (bytes_ < options_.max_bytes) {
    count = std::min<uint64_t>(count,
                               (options_.max_bytes - bytes_ + last_bytes_ - 1) / last_bytes_);
  }
  count = std::max<uint64_t>(count, 1);
  next_issue_ += count;
  in_flight_ += count;
  FetchGroup(slot, static_cast<uint32_t>(count));
  if (next_issue_ >= options_.end) can_issue_.SignalAll();  // the idle workers end
}

void Prefetcher::FetchGroup(uint64_t first, uint32_t count) {
  std::vector<bool> landed(count, false);
  ++groups_in_flight_;
  mu_.Unlock();
  const absl::Time start = absl::Now();
  fetch_group_(first, count, [&](uint32_t k, absl::StatusOr<Batch> result) {
    if (k >= count || landed[k]) return;
    landed[k] = true;
    const bool prompt = absl::Now() - start >= kPromptLanding;
    absl::MutexLock lock(&mu_);
    --in_flight_;
    Land(first + k, std::move(result), prompt);
  });
  const absl::Duration took = absl::Now() - start;
  mu_.Lock();
  NoteFetch(took);
  --groups_in_flight_;
  for (uint32_t k = 0; k < count; ++k) {
    if (landed[k]) continue;
    --in_flight_;
    Land(first + k, absl::UnavailableError("not fetched with its group"), /*prompt=*/false);
  }
  changed_.SignalAll();  // the group is in: one wake-up for what landed without one
}

void Prefetcher::Land(uint64_t slot, absl::StatusOr<Batch> result, bool prompt) {
  if (absl::IsUnavailable(result.status())) {
    deferred_.insert(slot);  // fetched alone when the caller reaches it
  } else {
    if (result.ok()) {
      bytes_ += result->bytes().size();
      last_bytes_ = result->bytes().size();
    }
    ready_.emplace(slot, std::move(result));
  }
  // The caller waits for exactly one slot: a batch landing ahead of it wakes nobody.
  if (prompt && slot == next_take_) changed_.SignalAll();
}

bool Prefetcher::FetchInlineNow() const {
  return !options_.any_order && Grouping() && !cancelled_ && next_take_ == next_issue_ &&
         next_issue_ < options_.end && ready_.empty() && CanIssue() && fetch_ns_ > 0 &&
         fetch_ns_ <= absl::ToDoubleNanoseconds(kInlineGroupFetch);
}

absl::StatusOr<Batch> Prefetcher::FetchDeferred(uint64_t slot) {
  deferred_.erase(slot);
  ++in_flight_;
  mu_.Unlock();
  absl::StatusOr<Batch> result = fetch_(slot);
  mu_.Lock();
  --in_flight_;
  if (result.ok()) bytes_ += result->bytes().size();  // taken at once by the caller
  return result;
}

void Prefetcher::NoteFetch(absl::Duration took) {
  const double ns = absl::ToDoubleNanoseconds(took);
  fetch_ns_ = fetch_ns_ == 0 ? ns : 0.8 * fetch_ns_ + 0.2 * ns;
}

bool Prefetcher::WorthPrefetching() const {
  // The batches the caller has left to take, at its pace, against a group's round trip: when
  // they outlast it, a worker fetching now keeps the caller from waiting; when the caller would
  // drain them long before, it waits either way, and fetching itself then costs no hand-over.
  uint64_t ahead = 0;
  for (uint64_t s = next_take_; ready_.contains(s); ++s) ++ahead;
  return static_cast<double>(ahead) * step_ns_ >= fetch_ns_;
}

absl::StatusOr<std::optional<Batch>> Prefetcher::Next() {
  const absl::Time entered = absl::Now();
  absl::MutexLock lock(&mu_);
  ++callers_;
  if (last_return_ != absl::InfinitePast()) {
    // Clipped at a group's round trip: one step that long already says "slow", and a caller
    // descheduled for a while (a loaded machine) must not look slow for many steps after.
    double ns = absl::ToDoubleNanoseconds(entered - last_return_);
    if (fetch_ns_ > 0) ns = std::min(ns, fetch_ns_);
    step_ns_ = step_ns_ == 0 ? ns : 0.8 * step_ns_ + 0.2 * ns;
  }
  struct NoteReturn {
    Prefetcher* p;
    ~NoteReturn() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // runs under mu_
      p->last_return_ = absl::Now();
      --p->callers_;
    }
  } note_return{this};
  if (failed_.has_value()) return *failed_;
  if (FetchInlineNow()) {
    FetchInline();
  } else if (ready_.empty() && deferred_.empty() && in_flight_ == 0) {
    WakeAWorkerIfUseful();  // nothing is coming: a worker fetches while the caller waits
  }
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancelled_) return true;
    if (options_.any_order) return !ready_.empty() || workers_done_ == workers_.size();
    return next_take_ >= options_.end || ready_.count(next_take_) > 0 ||
           deferred_.count(next_take_) > 0;
  };
  while (!ready()) {
    // While a group is in flight, its batches may land without a wake-up (kPromptLanding).
    if (groups_in_flight_ > 0) {
      changed_.WaitWithTimeout(&mu_, kPromptLanding);
    } else {
      changed_.Wait(&mu_);
    }
  }
  if (cancelled_) return absl::CancelledError("the consumer was closed");
  if (ready_.empty() && (options_.any_order || next_take_ >= options_.end)) {
    return std::optional<Batch>();
  }
  absl::StatusOr<Batch> result = absl::UnknownError("nothing taken");
  if (!options_.any_order && deferred_.count(next_take_) > 0) {
    // A group could not fetch this one: the caller fetches it now, with fetch_'s retries, having
    // taken every batch before it.
    result = FetchDeferred(next_take_);
    if (cancelled_) return absl::CancelledError("the consumer was closed");
  } else {
    auto it = options_.any_order ? ready_.begin() : ready_.find(next_take_);
    result = std::move(it->second);
    ready_.erase(it);
  }
  ++next_take_;
  if (!result.ok()) {
    failed_ = result.status();
    can_issue_.SignalAll();
    return result.status();
  }
  bytes_ -= result->bytes().size();
  // Wake one worker, and only when it can issue now: it takes every free slot (a group), and a
  // worker waiting for half the window would otherwise wake at every take just to sleep again.
  // (Waking them all cost a wake-up per worker per batch with a wide window.) With groups, only
  // while the caller still has batches to take: a caller that has taken everything fetches the
  // next group itself (FetchInline), which costs no wake-up of another thread.
  if (!Grouping() || WorthPrefetching()) WakeAWorkerIfUseful();
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
  can_issue_.SignalAll();
}

}  // namespace croupier
