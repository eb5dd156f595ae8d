// DispatcherImpl: the journal's upkeep. Compaction (a snapshot of the state replaces the journal,
// written without the dispatcher's lock) and the report of a journal that cannot be written.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dispatcher/dispatcher_impl.h"

namespace croupier {

absl::Status DispatcherImpl::CompactJournal() {
  if (!journal_) return absl::OkStatus();
  const absl::Time start = absl::Now();
  uint64_t before = 0;
  DispatcherState::PartialSnapshot partial;
  absl::Duration held;
  {
    // The snapshot and the journal position it stands for are taken in one critical section:
    // the entries before it are what the snapshot holds, the later ones its tail
    // (JournalWriter::BeginCompaction).
    absl::MutexLock lock(&mu_);
    if (compacting_) return absl::OkStatus();
    RETURN_IF_ERROR(journal_lost_);
    if (absl::Status begun = journal_->BeginCompaction(); !begun.ok()) {
      NoteJournalWriteLocked(begun);
      return begun;
    }
    compacting_ = true;
    before = journal_->size();
    // Without the jobs' JobInfos (their file lists: about all of the bytes), which the state
    // shares with the snapshot: copying them would hold the lock about as long as writing them.
    partial = state_.SnapshotWithoutJobInfo();
    held = absl::Now() - start;
  }
  // The bulk of the work, the snapshot's bytes written and synced, with calls served meanwhile:
  // they append to the old journal and are acknowledged once it is synced, as ever.
  std::vector<journal::Update> snapshot = std::move(partial).FillJobInfos();
  const absl::Status written = journal_->WriteCompaction(snapshot);
  snapshot.clear();
  const absl::Duration snapshot_held = held;
  absl::StatusOr<uint64_t> size = absl::UnknownError("not compacted");
  {
    absl::MutexLock lock(&mu_);
    const absl::Time swap = absl::Now();
    if (written.ok()) {
      // The tail written meanwhile is copied and synced, and the file renamed over the journal.
      size = journal_->FinishCompaction();
    } else {
      journal_->AbortCompaction();
      size = written;
    }
    held += absl::Now() - swap;
    if (!size.ok()) {
      compacting_ = false;
      if (!journal_->status().ok()) {
        // Renamed, but the new file cannot be appended to: every change is refused.
        journal_lost_ = size.status();
      }
      // Else the old journal is whole and still in use: carry on with it.
      NoteJournalWriteLocked(size.status());
      return size.status();
    }
  }
  // The rename made durable (the directory synced) without the lock: calls append to the new
  // file meanwhile, and are acknowledged once it is durable.
  const absl::Status synced = journal_->SyncCompaction();
  absl::MutexLock lock(&mu_);
  compacting_ = false;
  if (!synced.ok()) {
    journal_lost_ = synced;
    NoteJournalWriteLocked(synced);
    return synced;
  }
  compacted_bytes_ = *size;
  last_compaction_ = {absl::Now() - start, held, *size};
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("compacted journal ", options_.journal_path, " from ", before, " to ", *size,
                   " bytes (a snapshot of ", state_.jobs().size(), " jobs, ",
                   state_.producers().size(), " producers, ", state_.consumers().size(),
                   " consumers, then the entries written meanwhile) in ",
                   absl::FormatDuration(last_compaction_.total), ", the dispatcher's lock held ",
                   absl::FormatDuration(held), " of it (", absl::FormatDuration(snapshot_held),
                   " for the snapshot, ", absl::FormatDuration(held - snapshot_held),
                   " for the swap)"));
  return absl::OkStatus();
}

DispatcherImpl::CompactionTimes DispatcherImpl::last_compaction() const {
  absl::MutexLock lock(&mu_);
  return last_compaction_;
}

bool DispatcherImpl::CompactionDueLocked() const {
  if (!journal_ || options_.journal_compact_bytes == 0 || compacting_) return false;
  return journal_->size() > std::max(options_.journal_compact_bytes, 2 * compacted_bytes_);
}

void DispatcherImpl::NoteJournalWriteLocked(const absl::Status& status) {
  if (status.ok()) {
    if (!journal_error_.empty()) {
      Log(LogLevel::kInfo, "dispatcher",
          absl::StrCat("the journal ", options_.journal_path, " can be written again"));
      journal_error_.clear();
    }
    return;
  }
  if (journal_error_.empty()) {
    Log(LogLevel::kError, "dispatcher",
        absl::StrCat("the journal cannot be written: ", status.message(),
                     "; every change (new jobs, registrations, positions, tasks) fails with "
                     "UNAVAILABLE until it can"));
  }
  journal_error_ = std::string(status.message());
}

}  // namespace croupier
