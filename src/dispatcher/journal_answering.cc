// JournalWriter::WhenSynced: answering callers once the journal is durable, without holding their
// threads (journal.h). Two threads, started by the first call: the answering thread hands each
// caller its result and decides when a sync is due; the syncing thread does the fdatasync, so
// that one that hangs (a full or failing disk) holds no caller past its deadline.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/dispatcher/journal.h"

namespace croupier {

void JournalWriter::WhenSynced(uint64_t ticket, absl::Time deadline, SyncedCallback done) {
  absl::Status now;
  {
    absl::MutexLock lock(&sync_mu_);
    if (options_.sync && synced_ < ticket) {
      if (stopping_) {
        now = absl::UnavailableError(
            absl::StrCat("the dispatcher's journal ", path_, " is closing: the call's changes up to "
                         "byte ", ticket - base_, " may not be durable"));
      } else if (!broken_.ok()) {
        now = broken_;
      } else {
        StartThreadsLocked();
        waiters_.push_back(SyncWaiter{ticket, deadline, std::move(done)});
        threads_cv_.SignalAll();
        return;
      }
    }
  }
  std::move(done)(std::move(now));
}

void JournalWriter::StopAnswering() {
  {
    absl::MutexLock lock(&sync_mu_);
    stopping_ = true;
    ChangedLocked();
  }
  if (answerer_.joinable()) answerer_.join();
  if (syncer_.joinable()) syncer_.join();
}

void JournalWriter::StartThreadsLocked() {
  if (answerer_.joinable()) return;
  answerer_ = std::thread([this] { AnswerLoop(); });
  syncer_ = std::thread([this] { SyncLoop(); });
}

void JournalWriter::AnswerLoop() {
  std::vector<std::pair<SyncedCallback, absl::Status>> answers;
  absl::MutexLock lock(&sync_mu_);
  while (true) {
    // A stop lets the sync in progress end first, so that what it covers is answered OK.
    if (stopping_ && syncing_) {
      threads_cv_.Wait(&sync_mu_);
      continue;
    }
    // Who can be answered now, and what the rest need: the furthest ticket and the nearest
    // deadline.
    const absl::Time now = absl::Now();
    uint64_t wanted = 0;
    absl::Time wake = absl::InfiniteFuture();
    auto keep = waiters_.begin();
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      absl::Status result;
      if (synced_ >= it->ticket) {
        result = absl::OkStatus();
      } else if (!broken_.ok()) {
        result = broken_;
      } else if (now >= it->deadline) {
        result = DeadlineErrorLocked(it->ticket);
      } else if (stopping_) {
        result = absl::UnavailableError(absl::StrCat(
            "the dispatcher's journal ", path_, " closed before it was synced up to byte ",
            it->ticket - base_, " (durable up to byte ", synced_ - base_, ")"));
      } else {
        wanted = std::max(wanted, it->ticket);
        wake = std::min(wake, it->deadline);
        if (keep != it) *keep = std::move(*it);
        ++keep;
        continue;
      }
      answers.emplace_back(std::move(it->done), std::move(result));
    }
    waiters_.erase(keep, waiters_.end());
    if (!answers.empty()) {
      sync_mu_.Unlock();
      for (auto& [done, result] : answers) std::move(done)(std::move(result));
      answers.clear();
      sync_mu_.Lock();
      continue;  // the callbacks took time: look again
    }
    if (stopping_) return;  // every waiter was answered above
    if (wanted > synced_ && !syncing_ && !sync_wanted_) {
      const absl::Time due = last_sync_end_ + options_.commit_interval;
      if (now >= due) {
        sync_wanted_ = true;
        threads_cv_.SignalAll();
      } else {
        wake = std::min(wake, due);
      }
    }
    threads_cv_.WaitWithDeadline(&sync_mu_, wake);
  }
}

void JournalWriter::SyncLoop() {
  absl::MutexLock lock(&sync_mu_);
  while (true) {
    // A sync in progress (a WaitSynced caller's, or a compaction's) is waited for: it may cover
    // what was asked, and file_ is not shared between two syncers.
    while (!stopping_ && !(sync_wanted_ && !syncing_)) threads_cv_.Wait(&sync_mu_);
    if (stopping_) return;
    sync_wanted_ = false;
    if (broken_.ok() && synced_ < published_) SyncLocked();
    ChangedLocked();
  }
}

}  // namespace croupier
