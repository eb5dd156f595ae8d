#include "src/dispatcher/work_waiters.h"

#include <utility>

namespace croupier {

WorkWaiters::WorkWaiters() : thread_([this] { Run(); }) {}

WorkWaiters::~WorkWaiters() {
  Stop();
  thread_.join();
}

void WorkWaiters::Wait(absl::Time deadline, Callback done) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      auto it = waiters_.emplace(deadline, std::move(done));
      // A new earliest deadline: the thread sleeps until the old one, so it must look again.
      if (it == waiters_.begin()) {
        rescan_ = true;
        wake_.Signal();
      }
      return;
    }
  }
  std::move(done)(Wake::kStopped);
}

void WorkWaiters::Notify() {
  absl::MutexLock lock(&mu_);
  if (waiters_.empty()) return;
  notified_ = true;
  wake_.Signal();
}

void WorkWaiters::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  wake_.Signal();
  while (!stopped_) stopped_cv_.Wait(&mu_);
}

size_t WorkWaiters::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

void WorkWaiters::Run() {
  while (true) {
    std::vector<std::pair<Callback, Wake>> due;
    bool done = false;
    {
      absl::MutexLock lock(&mu_);
      while (!notified_ && !stopping_ && !rescan_) {
        const absl::Time until =
            waiters_.empty() ? absl::InfiniteFuture() : waiters_.begin()->first;
        if (absl::Now() >= until) break;
        wake_.WaitWithDeadline(&mu_, until);
      }
      rescan_ = false;
      const absl::Time now = absl::Now();
      if (stopping_ || notified_) {
        const Wake why = stopping_ ? Wake::kStopped : Wake::kWorkMayBeAvailable;
        for (auto& [deadline, callback] : waiters_) due.emplace_back(std::move(callback), why);
        waiters_.clear();
        notified_ = false;
      } else {
        while (!waiters_.empty() && waiters_.begin()->first <= now) {
          due.emplace_back(std::move(waiters_.begin()->second), Wake::kDeadline);
          waiters_.erase(waiters_.begin());
        }
      }
      done = stopping_;
    }
    for (auto& [callback, why] : due) std::move(callback)(why);
    if (done) {
      absl::MutexLock lock(&mu_);
      // Waits that came in while the callbacks ran were answered by Wait itself (stopping_).
      stopped_ = true;
      stopped_cv_.SignalAll();
      return;
    }
  }
}

}  // namespace croupier
