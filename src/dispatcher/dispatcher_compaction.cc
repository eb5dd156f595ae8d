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
  // taken. The time is that of writing and syncing the snapshot (about the state's size).
  absl::StatusOr<uint64_t> size = CompactJournal(*options_.env, journal_->path(), snapshot);
  if (!size.ok()) {
    // The old journal is whole and still open: carry on with it.
    NoteJournalWriteLocked(size.status());
    return size.status();
  }
  journal_.reset();  // open on the replaced file
  absl::StatusOr<std::unique_ptr<JournalWriter>> reopened = JournalWriter::Open(
      *options_.env, options_.journal_path, *size, {.sync = options_.journal_sync});
  if (!reopened.ok()) {
    journal_lost_ = absl::UnavailableError(absl::StrCat(
        "the journal ", options_.journal_path, " was compacted but cannot be reopened (",
        reopened.status().message(), "); restart the dispatcher"));
    NoteJournalWriteLocked(journal_lost_);
    return journal_lost_;
  }
  journal_ = *std::move(reopened);
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
