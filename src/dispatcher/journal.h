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
// Durability (group commit): Append only write()s an entry; making it durable is separate, so
// that many entries share one fdatasync. A caller that writes under its own mutex (DispatcherImpl,
// which must journal in the order it applies) publishes what it wrote before unlocking
// (Publish), and every caller that answered from that state, after unlocking, waits until the
// journal is synced up to the published position it saw (WaitSynced, the "sync ticket"). The
// first waiter that finds its ticket not covered becomes the syncer: it fdatasyncs outside every
// lock but the writer's own sync mutex (held only to hand over positions, never across the
// fdatasync), then marks as synced what was published before its sync began, and wakes the rest;
// waiters that came meanwhile are covered by the next sync. So no answer goes out before what it
// depends on is durable, a machine crash included, and at N concurrent calls the syncs per
// second stay about one per fdatasync time instead of one per entry. Measured on the development
// VM (ext4 on a virtio disk, 2 cores) with journal_test's SyncCost loop of 200 entries: about
// 3.5 ms per fdatasync, about 1 us per write() alone; on another day 0.22 ms p50 under the
// dispatcher's load (docs/benchmarks.md, "Group commit", has the dispatcher at 1,000 and 10,000
// consumers).
//
// Positions ("tickets") are logical byte positions that only grow: before any compaction they are
// the file's byte offsets; a compaction makes everything written so far durable in the file it
// swaps in, so every ticket issued before it is covered, and the new file's bytes are counted on
// from there.
//
// Compaction off the writers' mutex. A snapshot of the state replaces the entries that built it,
// in four steps, so that the caller's mutex is held only to take the snapshot and to swap files:
//   1. BeginCompaction, under the mutex, where the snapshot is taken: the entries written so far
//      are what the snapshot holds; those written from then on are the tail.
//   2. WriteCompaction, without the mutex: the header and the snapshot go to a temporary file
//      beside the journal (journal.tmp.<pid>), then the tail published so far, read back from the
//      journal, and the file is synced. Meanwhile entries are appended, published, synced and
//      acknowledged in the journal as ever.
//   3. FinishCompaction, under the mutex: the rest of the tail is copied, the temporary file synced
//      (only those last bytes are left to sync) and renamed over the journal; appends go to the
//      new file from then on. AbortCompaction after a failed step 2.
//   4. SyncCompaction, without the mutex: the directory is synced, making the rename durable.
//      From step 3 to its end nothing is acknowledged (the compactor is the syncer), since a
//      crash could still bring the old journal back.
// A crash before the rename is durable replays the old journal, which holds every entry
// acknowledged so far (the temporary file is ignored); after it, the new file: the snapshot, then
// every entry of the tail, synced before the rename, then what was appended since. Either way
// each acknowledged entry is there, since an entry is acknowledged only once the file that holds
// it is synced past it and that file's name is durable.
#ifndef CROUPIER_SRC_DISPATCHER_JOURNAL_H_
#define CROUPIER_SRC_DISPATCHER_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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

// Appends entries to a journal, and makes them durable in groups (see Durability above).
// Writing (Append, DropLast, Publish, Compact, size) is thread-compatible: one caller at a time,
// DispatcherImpl under its mutex. Waiting (WaitSynced, published, syncs, status) is thread-safe
// and is meant to run outside the writers' mutex, concurrently with writing.
class JournalWriter {
 public:
  struct Options {
    // Whether WaitSynced makes entries durable (fdatasync). Off only for tests and benchmarks:
    // then nothing is synced and WaitSynced returns at once.
    bool sync = true;
    // WhenSynced only: the least time from the end of one sync to the start of the next one made
    // for its callers, so that the calls of that time share one fdatasync (at most one per
    // interval plus the fdatasync's own time, whatever the rate of calls). Each such call waits
    // up to this much longer; zero syncs as soon as the previous sync ends. WaitSynced callers
    // never wait for it.
    absl::Duration commit_interval = absl::ZeroDuration();
  };

  // Opens the journal at `path` to append after its first `valid_bytes` bytes (ReadJournal's
  // valid_bytes): a longer file is cut there first (its torn tail), and with valid_bytes 0 the
  // file is created or emptied and the header written. Errors name the file.
  static absl::StatusOr<std::unique_ptr<JournalWriter>> Open(Env& env, std::string path,
                                                             uint64_t valid_bytes, Options options);
  ~JournalWriter();

  // Writes `update` as one entry (one write(); not synced: see WaitSynced). UNAVAILABLE naming
  // the file and offset if it cannot be written (disk full, read-only file system, I/O error):
  // the file is then cut back to where it was, so no partial entry remains, and a later Append
  // may succeed. If even the cut fails, or a sync failed (the kernel may have dropped the data),
  // the writer is broken: every later Append, and every WaitSynced for a position not synced
  // before the failure, fails with that error until the dispatcher restarts and replays what is
  // on disk. INVALID_ARGUMENT for an update over kMaxJournalEntryBytes.
  absl::Status Append(const journal::Update& update);

  // Cuts away the entry the last successful Append wrote (its update was then refused, so the
  // journal must not hold it), and syncs the cut (with options.sync): a crash must not bring the
  // refused entry back. Only an entry not yet published can be dropped: FAILED_PRECONDITION if
  // there is none; an error cutting or syncing breaks the writer as above.
  absl::Status DropLast();

  // Marks everything appended so far as wanted durable: the next sync covers it. Returns that
  // position (a ticket for WaitSynced). Call once the entries are final (after the state took
  // them, or DropLast), before releasing the mutex under which they were appended.
  uint64_t Publish();

  // Returns once the journal is durable up to `ticket` (a position Publish or published()
  // returned), syncing it itself if no other caller is (then covering everything published so
  // far). At once with options.sync off. Errors: the broken writer's UNAVAILABLE (naming the file
  // and the byte whose sync failed) if `ticket` was not synced before the writer broke;
  // DEADLINE_EXCEEDED naming the journal and the positions once `deadline` passes first. A
  // caller that is doing the fdatasync itself returns when it ends (an fdatasync cannot be cut
  // short); one waiting for another's returns by its deadline.
  absl::Status WaitSynced(uint64_t ticket, absl::Time deadline);

  // WaitSynced without holding the caller's thread: `done` runs exactly once, with what
  // WaitSynced would return (OK, the broken writer's UNAVAILABLE, DEADLINE_EXCEEDED once
  // `deadline` passes, also while an fdatasync hangs), from this writer's answering thread,
  // outside every lock of the writer; at once, on the caller's thread, when `ticket` is already
  // durable or options.sync is off. The syncs for these callers are made by the writer's own
  // syncing thread, options.commit_interval apart. Once StopAnswering began, callers not yet
  // covered get UNAVAILABLE. `done` must not wait on this writer (WaitSynced: it would hold the
  // answering thread); it may call WhenSynced.
  using SyncedCallback = absl::AnyInvocable<void(absl::Status) &&>;
  void WhenSynced(uint64_t ticket, absl::Time deadline, SyncedCallback done);
  // Answers every pending WhenSynced caller (OK where durable, else UNAVAILABLE), makes later
  // ones answer at once, and joins the two threads. Idempotent; also run by the destructor. For
  // an owner whose callbacks use parts of it that go before the writer.
  void StopAnswering();

  // Publish() and WaitSynced on it without a deadline: for a single caller (tests, tools).
  absl::Status Sync() { return WaitSynced(Publish(), absl::InfiniteFuture()); }

  // Compaction, in the four steps above. BeginCompaction: writing side; FAILED_PRECONDITION if
  // one is under way, the broken writer's error. WriteCompaction(snapshot): by the caller of
  // BeginCompaction, concurrently with the writing and waiting sides (it touches neither); errors
  // name the temporary file. FinishCompaction: writing side; waits for a sync in progress to end
  // first, and stays the syncer until SyncCompaction; returns the new file's size. An error
  // before the rename leaves the old journal in use, whole (the temporary file is removed); after
  // it (reopening the new file) the writer is broken (UNAVAILABLE, "restart the dispatcher").
  // AbortCompaction: writing side; ends a compaction whose WriteCompaction failed, removing the
  // temporary file. SyncCompaction: by the compactor after a FinishCompaction that succeeded,
  // concurrently with both sides: syncs the directory, and then every position published up to
  // the swap is synced (the new file holds it, synced); a failure breaks the writer.
  absl::Status BeginCompaction();
  absl::Status WriteCompaction(const std::vector<journal::Update>& snapshot);
  absl::StatusOr<uint64_t> FinishCompaction();
  void AbortCompaction();
  absl::Status SyncCompaction();
  // The four steps at once, for a caller that holds its mutex throughout (tests, tools).
  absl::StatusOr<uint64_t> Compact(const std::vector<journal::Update>& snapshot);

  const std::string& path() const { return path_; }
  // The file's size: its header and every entry written.
  uint64_t size() const { return size_; }
  // The last position Publish returned.
  uint64_t published() const;
  // fdatasyncs of entries made so far (for tests and benchmarks).
  uint64_t syncs() const;
  // OK, or the error that broke the writer.
  absl::Status status() const;

 private:
  JournalWriter(Env& env, std::string path, Options options, std::unique_ptr<WritableFile> file,
                uint64_t size);
  // Cuts the file back to `size` after a failed write; breaks the writer if that fails.
  void CutBack(uint64_t size);
  // One sync as the syncer: fdatasyncs everything published so far, with sync_mu_ released
  // meanwhile, then advances synced_ (or breaks the writer) and wakes the waiters.
  void SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  void BreakLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // Wakes everything that waits on the syncing side: synced_, broken_, syncing_ or the callers
  // of WhenSynced changed.
  void ChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  absl::Status DeadlineErrorLocked(uint64_t ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // The two threads of WhenSynced (journal_answering.cc), started by its first call: the
  // answering thread runs the callbacks and asks for syncs; the syncing thread fdatasyncs, so
  // that a hanging fdatasync holds no deadline up.
  void StartThreadsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  void AnswerLoop();
  void SyncLoop();
  // Copies the journal's bytes [from, to) (whole entries) to the end of the compaction's file.
  absl::Status CopyTail(uint64_t from, uint64_t to);

  // Constant.
  Env& env_;
  const std::string path_;
  const Options options_;

  // The writer's side, used by one caller at a time. file_ is also used for the fdatasync by the
  // syncer (syncing_), and replaced only by Compact, which first becomes the syncer itself.
  std::unique_ptr<WritableFile> file_;
  uint64_t size_ = 0;
  uint64_t last_entry_ = 0;  // where the last appended entry starts; 0: none to drop

  // The compaction under way, if any. Set by BeginCompaction, on the writing side; then used only
  // by the compactor, in its three steps, one at a time.
  struct Compaction {
    uint64_t from = 0;       // the journal's size when the snapshot was taken: the tail's start
    uint64_t copied_to = 0;  // the journal's bytes up to here are in the new file
    std::string path;        // the new file, until it is renamed over the journal
    std::unique_ptr<WritableFile> file;
    uint64_t size = 0;                          // the new file's size so far
    std::unique_ptr<RandomAccessFile> journal;  // the old file, to read the tail from
  };
  std::unique_ptr<Compaction> compaction_;
  // The journal's old file after a compaction's swap, closed by SyncCompaction.
  std::unique_ptr<WritableFile> retired_;

  // The syncing side.
  mutable absl::Mutex sync_mu_;
  absl::CondVar sync_cv_;  // signalled when a sync ends (synced_, broken_ or syncing_ changed)
  // The position of the file's byte 0: 0 until the first compaction (tickets are file offsets),
  // then the position everything before it had reached.
  uint64_t base_ ABSL_GUARDED_BY(sync_mu_) = 0;
  uint64_t published_ ABSL_GUARDED_BY(sync_mu_) = 0;  // the position the next sync must reach
  uint64_t synced_ ABSL_GUARDED_BY(sync_mu_) = 0;     // durable up to here
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;    // a syncer (or a compaction) uses file_
  // The position of the swap of a compaction whose rename SyncCompaction has yet to make durable;
  // 0: none.
  uint64_t renamed_to_ ABSL_GUARDED_BY(sync_mu_) = 0;
  uint64_t syncs_ ABSL_GUARDED_BY(sync_mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(sync_mu_);

  // WhenSynced's side.
  struct SyncWaiter {
    uint64_t ticket;
    absl::Time deadline;
    SyncedCallback done;
  };
  std::vector<SyncWaiter> waiters_ ABSL_GUARDED_BY(sync_mu_);
  absl::CondVar threads_cv_;  // the two threads': a change (ChangedLocked), a request, stopping
  bool sync_wanted_ ABSL_GUARDED_BY(sync_mu_) = false;  // the answering thread asks for a sync
  absl::Time last_sync_end_ ABSL_GUARDED_BY(sync_mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(sync_mu_) = false;
  std::thread answerer_;
  std::thread syncer_;
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
// new one, whole. Returns the new file's size. A writer open on the old file would append to the
// replaced file: JournalWriter::Compact calls this and moves the writer to the new file. Errors
// name the file.
absl::StatusOr<uint64_t> CompactJournal(Env& env, const std::string& path,
                                        const std::vector<journal::Update>& snapshot);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_JOURNAL_H_
