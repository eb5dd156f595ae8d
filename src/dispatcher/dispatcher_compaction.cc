// DispatcherImpl: the journal's upkeep. Compaction (a snapshot of the state replaces the journal)
// and the report of a journal that cannot be written.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dispatcher/dispatcher_impl.h"

namespace croupier {

absl::Status DispatcherImpl::CompactJournalLocked() {
  const absl::Time start = absl::Now();
  const uint64_t before = journal_->size();
  const std::vector<journal::Update> snapshot = state_.Snapshot();
  // Under mu_, as every journal write: no update may land in the old file after the snapshot was
  // taken. The time is that of writing and syncing the snapshot (about the state's size), after
  // the sync in progress, if any. Calls waiting for the journal meanwhile are answered once the
  // snapshot is durable: it holds what they saw (JournalWriter::Compact).
  absl::StatusOr<uint64_t> size = journal_->Compact(snapshot);
  if (!size.ok()) {
    if (!journal_->status().ok()) {
      // Compacted, but the new file cannot be appended to: every change is refused.
      journal_lost_ = size.status();
    }
    // Else the old journal is whole and still in use: carry on with it.
    NoteJournalWriteLocked(size.status());
    return size.status();
  }
  compacted_bytes_ = *size;
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("compacted journal ", options_.journal_path, " from ", before, " to ", *size,
                   " bytes (a snapshot of ", state_.jobs().size(), " jobs, ",
                   state_.producers().size(), " producers, ", state_.consumers().size(),
                   " consumers) in ", absl::FormatDuration(absl::Now() - start)));
  return absl::OkStatus();
}

void DispatcherImpl::MaybeCompactJournalLocked() {
  if (!journal_ || options_.journal_compact_bytes == 0) return;
  if (journal_->size() <= std::max(options_.journal_compact_bytes, 2 * compacted_bytes_)) return;
  absl::Status status = CompactJournalLocked();
  if (!status.ok()) Log(LogLevel::kError, "dispatcher", status.ToString());
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
