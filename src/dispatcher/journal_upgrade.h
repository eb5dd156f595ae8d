// Reading the entries of older journals. A journal's header holds its version; every entry of a
// journal is written in that version's encoding. This dispatcher writes kJournalVersion
// (dispatcher_state.h) and replays kOldestJournalVersion to kJournalVersion: an entry of an older
// version is converted here, once, into the current encoding before DispatcherState::Apply sees
// it, and OpenJournal rewrites such a journal in the current version before appending to it.
//
//   version 2 -> 3: JobCreated's JobSpec carried shuffle, remainder, mode, source and compression
//                   as text (fields 6, 9, 12, 13, 18, now reserved); version 3 carries the enums
//                   (proto/croupier.proto). The text "" is UNSPECIFIED.
#ifndef CROUPIER_SRC_DISPATCHER_JOURNAL_UPGRADE_H_
#define CROUPIER_SRC_DISPATCHER_JOURNAL_UPGRADE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/journal.pb.h"

namespace croupier {

inline constexpr uint32_t kOldestJournalVersion = 2;

// The update an entry's payload of a journal of `version` holds, in the current encoding.
// DATA_LOSS for a payload that is not an update, or (version 2) a setting's text that names no
// value of the setting. `version` must be within [kOldestJournalVersion, kJournalVersion].
absl::StatusOr<journal::Update> ParseJournalEntry(uint32_t version, absl::string_view payload);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_JOURNAL_UPGRADE_H_
