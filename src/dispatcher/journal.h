// The dispatcher's journal: an append-only file `journal` in its work directory holding every
// journal::Update (proto/journal.proto) in the order DispatcherState::Apply applied them, so that
// replaying it into a fresh state rebuilds the state exactly (DispatcherImpl does, at start).
//
// Layout, little-endian, version kJournalVersion (dispatcher_state.h; versions from
// kOldestJournalVersion on are replayed, journal_upgrade.h):
//   file header, 16 bytes:  "CRPJRNL\n" (8) | uint32 version | uint32 masked CRC-32C of the 12
//                           bytes before it
//   then entries, framed like TFRecord records (docs/formats.md, src/io/tfrecord_format.h):
//                           uint64 length | uint32 masked CRC-32C of the length |
//                           payload: the serialized Update (length bytes) |
//                           uint32 masked CRC-32C of the payload
//
// A crash while appending can leave only a prefix of the last entry, or (a machine crash) an
// entry whose blocks were not all written. So a bad entry with nothing valid after it is a torn
// tail: it is cut away (and logged), never applied. A bad entry followed by a valid one is not
// something a crash does: DATA_LOSS naming the file and offset.
//
// Durability: each Append writes the entry with one write() and then fdatasync()s it, before the
// caller applies the update and before any RPC answers, so an answered call survives a machine
// crash, not only a process crash. Measured on the development VM (ext4 on a virtio disk, 2
// cores) with journal_test's SyncCost loop of 200 entries: about 3.5 ms per entry with fdatasync,
// about 1 us with write() alone. The dispatcher writes a few entries per heartbeat: for a few
// dozen producers and consumers, tens of entries per second, a few percent of its time, and a
// call that changes the state answers a few ms later. Each sync is taken under the dispatcher's
// mutex (DispatcherImpl::ApplyLocked says why), so past a few hundred entries per second (hundreds
// of consumers acknowledging every second) the syncs would serialize the dispatcher: grouping the
// syncs of concurrent calls into one (group commit) is then the next step.
#ifndef CROUPIER_SRC_DISPATCHER_JOURNAL_H_
#define CROUPIER_SRC_DISPATCHER_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/journal.pb.h"
#include "src/common/env.h"

namespace croupier {

inline constexpr char kJournalFileName[] = "journal";
inline constexpr char kJournalMagic[] = "CRPJRNL\n";  // 8 bytes, without the terminating NUL
inline constexpr uint64_t kJournalHeaderBytes = 16;
inline constexpr uint64_t kJournalEntryOverheadBytes = 16;  // 12 before the payload, 4 after
// Larger entries are refused by the writer and are corruption to the reader. A JobInfo with many
// files is the largest update; control messages are bounded at 16 MiB.
inline constexpr uint64_t kMaxJournalEntryBytes = uint64_t{64} << 20;

// The file header of a journal of version kJournalVersion.
std::string JournalHeader();
// One entry: the frame around `payload`.
std::string JournalEntry(absl::string_view payload);

// What ReadJournal found.
struct JournalReplay {
  uint32_t version = 0;      // the file's journal version (0: an empty file)
  uint64_t entries = 0;      // entries applied
  uint64_t valid_bytes = 0;  // the header and the complete entries; 0 for an empty file
  uint64_t file_bytes = 0;
  // Why the bytes after valid_bytes are a torn final entry ("a length cut short", ...), or empty
  // when valid_bytes == file_bytes.
  std::string torn;
};

// Reads the journal at `path` and calls `apply` with each complete entry in order, and its byte
// offset. An empty file is an empty journal. A torn tail (see above; also a file shorter than its
// header that begins like one) is reported in the result and not applied. Errors, each naming the
// file and byte offset: NOT_FOUND if there is no file; FAILED_PRECONDITION naming the versions if
// the journal has a version outside [kOldestJournalVersion, kJournalVersion] (the entries of an
// older one are upgraded for `apply`, journal_upgrade.h); DATA_LOSS for a file that is not a
// journal, a bad header, a corrupt entry followed by a valid one, an entry that does not parse, and
// an entry that `apply` refuses (with apply's message).
absl::StatusOr<JournalReplay> ReadJournal(
    Env& env, const std::string& path,
    const std::function<absl::Status(const journal::Update&, uint64_t offset)>& apply);

// Appends entries to a journal. Thread-compatible: DispatcherImpl calls it under its mutex.
class JournalWriter {
 public:
  struct Options {
    // fdatasync after each entry. Off only for tests and benchmarks.
    bool sync = true;
  };

  // Opens the journal at `path` to append after its first `valid_bytes` bytes (ReadJournal's
  // valid_bytes): a longer file is cut there first (its torn tail), and with valid_bytes 0 the
  // file is created or emptied and the header written. Errors name the file.
  static absl::StatusOr<std::unique_ptr<JournalWriter>> Open(Env& env, std::string path,
                                                             uint64_t valid_bytes,
                                                             Options options);
  ~JournalWriter();

  // Appends `update` as one entry and, with options.sync, makes it durable. UNAVAILABLE naming
  // the file and offset if it cannot be written or synced (disk full, read-only file system, I/O
  // error): the file is then cut back to where it was, so no partial entry remains, and a later
  // Append may succeed. If even the cut fails, or the sync failed (the kernel may have dropped the
  // data), the writer is broken: every later Append fails with that error until the dispatcher
  // restarts and replays what is on disk. INVALID_ARGUMENT for an update over
  // kMaxJournalEntryBytes.
  absl::Status Append(const journal::Update& update);

  // Cuts away the entry the last successful Append wrote (its update was then refused, so the
  // journal must not hold it). FAILED_PRECONDITION if there is none; an error cutting breaks the
  // writer as above.
  absl::Status DropLast();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

 private:
  JournalWriter(Env& env, std::string path, Options options, std::unique_ptr<WritableFile> file,
                uint64_t size);
  // Cuts the file back to `size` after a failed write; breaks the writer if that fails.
  void CutBack(uint64_t size);

  Env& env_;
  const std::string path_;
  const Options options_;
  std::unique_ptr<WritableFile> file_;
  uint64_t size_ = 0;
  uint64_t last_entry_ = 0;  // where the last appended entry starts; 0: none to drop
  absl::Status broken_;
};

struct OpenedJournal {
  std::unique_ptr<JournalWriter> writer;
  JournalReplay replay;
};

// Replays the journal at `path` into `apply` if the file exists, cuts a torn tail away (logging a
// warning that names the file, the offset and why), and opens the journal for appending; a
// missing file is created. A journal of an older version is first rewritten, atomically, in the
// current version (its entries as `apply` saw them; a torn tail is left out); replay.valid_bytes
// is then the rewritten file's size. ReadJournal's and JournalWriter::Open's errors.
absl::StatusOr<OpenedJournal> OpenJournal(
    Env& env, const std::string& path,
    const std::function<absl::Status(const journal::Update&, uint64_t offset)>& apply,
    JournalWriter::Options options = {});

// Compaction: replaces the journal at `path` with a new one holding only `snapshot` (the state's
// DispatcherState::Snapshot()), atomically: written to a temporary file beside it, synced,
// renamed over it and the directory synced, so that a crash leaves either the old journal or the
// new one, whole. Returns the new file's size, for JournalWriter::Open; a writer open on the old
// file must be closed and reopened (it would append to the replaced file). Errors name the file.
absl::StatusOr<uint64_t> CompactJournal(Env& env, const std::string& path,
                                        const std::vector<journal::Update>& snapshot);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_JOURNAL_H_
