#include "src/dispatcher/journal.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/crc32c.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dispatcher/dispatcher_state.h"
#include "src/dispatcher/journal_upgrade.h"
#include "src/io/tfrecord_format.h"

namespace croupier {
namespace {

constexpr uint64_t kLengthBytes = 12;  // uint64 length and its masked CRC
constexpr size_t kWindowBytes = 1 << 20;
// A compaction copies and syncs the tail in up to this many rounds outside the caller's mutex,
// stopping once a round had less than kSmallTailBytes to copy.
constexpr int kTailRounds = 4;
constexpr uint64_t kSmallTailBytes = 16 << 10;

// Reads a file through a window of about a megabyte, so that both replaying entry after entry
// and scanning byte by byte for a valid entry after a bad one cost few reads.
class Window {
 public:
  Window(const RandomAccessFile& file, uint64_t size) : file_(file), size_(size) {}

  // Bytes [offset, offset + n), which must lie inside the file; valid until the next call.
  absl::StatusOr<absl::string_view> Get(uint64_t offset, uint64_t n) {
    if (offset < start_ || offset + n > start_ + buffer_.size()) {
      const uint64_t want = std::min<uint64_t>(std::max<uint64_t>(n, kWindowBytes), size_ - offset);
      buffer_.resize(want);
      ASSIGN_OR_RETURN(size_t got, file_.Read(offset, want, buffer_.data()));
      buffer_.resize(got);
      start_ = offset;
      if (got < n) {
        return absl::DataLossError(absl::StrCat(file_.name(), " shrank while being read: ", got,
                                                " bytes at byte ", offset, " instead of ", n));
      }
    }
    return absl::string_view(buffer_).substr(offset - start_, n);
  }

 private:
  const RandomAccessFile& file_;
  const uint64_t size_;
  uint64_t start_ = 0;
  std::string buffer_;
};

// The entry at `offset`: its payload, or why there is no complete valid entry there.
struct Entry {
  std::optional<absl::string_view> payload;
  std::string why;
};

absl::StatusOr<Entry> EntryAt(Window& window, uint64_t size, uint64_t offset) {
  const uint64_t left = size - offset;
  if (left < kLengthBytes) {
    return Entry{std::nullopt, absl::StrCat("a length cut short (", left, " of 12 bytes)")};
  }
  ASSIGN_OR_RETURN(absl::string_view head, window.Get(offset, kLengthBytes));
  if (!tfrecord::HeaderCrcMatches(head.data())) {
    return Entry{std::nullopt, "a length whose checksum does not match"};
  }
  const uint64_t length = tfrecord::DecodeU64(head.data());
  if (length > kMaxJournalEntryBytes) {
    return Entry{std::nullopt, absl::StrCat("a length of ", length, " bytes, over the limit of ",
                                            kMaxJournalEntryBytes)};
  }
  if (left < length + kJournalEntryOverheadBytes) {
    return Entry{std::nullopt,
                 absl::StrCat("an entry of ", length, " bytes cut short (", left - kLengthBytes,
                              " bytes of payload and checksum)")};
  }
  ASSIGN_OR_RETURN(absl::string_view body, window.Get(offset + kLengthBytes, length + 4));
  const absl::string_view payload = body.substr(0, length);
  if (crc32c::Unmask(tfrecord::DecodeU32(body.data() + length)) != crc32c::Value(payload)) {
    return Entry{std::nullopt,
                 absl::StrCat("an entry of ", length, " bytes whose checksum does not match")};
  }
  return Entry{payload, ""};
}

// The offset of the first valid entry after `offset`, if any: what tells corruption (valid data
// follows) from a torn tail (nothing does).
absl::StatusOr<std::optional<uint64_t>> NextValidEntry(Window& window, uint64_t size,
                                                       uint64_t offset) {
  for (uint64_t p = offset + 1; p + kJournalEntryOverheadBytes <= size; ++p) {
    ASSIGN_OR_RETURN(Entry e, EntryAt(window, size, p));
    if (e.payload) return p;
  }
  return std::nullopt;
}

// The journal's version, checked; kJournalVersion for a header cut short (`torn` then says so).
absl::StatusOr<uint32_t> CheckHeader(Window& window, uint64_t size, const std::string& path,
                                     std::string& torn) {
  if (size < kJournalHeaderBytes) {
    // A crash while the header was being written leaves a prefix of it.
    ASSIGN_OR_RETURN(absl::string_view head, window.Get(0, size));
    const size_t n = std::min<size_t>(head.size(), 8);
    if (head.substr(0, n) != absl::string_view(kJournalMagic, n)) {
      return absl::DataLossError(
          absl::StrCat(path, " is not a croupier journal: no magic at byte 0"));
    }
    torn = absl::StrCat("a file header cut short (", size, " of ", kJournalHeaderBytes, " bytes)");
    return static_cast<uint32_t>(kJournalVersion);
  }
  ASSIGN_OR_RETURN(absl::string_view head, window.Get(0, kJournalHeaderBytes));
  if (head.substr(0, 8) != absl::string_view(kJournalMagic, 8)) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a croupier journal: no magic at byte 0"));
  }
  if (crc32c::Unmask(tfrecord::DecodeU32(head.data() + 12)) != crc32c::Value(head.data(), 12)) {
    return absl::DataLossError(
        absl::StrCat("corrupt journal header at byte 0 of ", path, ": checksum mismatch"));
  }
  const uint32_t version = tfrecord::DecodeU32(head.data() + 8);
  if (version < kOldestJournalVersion || version > static_cast<uint32_t>(kJournalVersion)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "journal ", path, " has version ", version, ", but this dispatcher reads versions ",
        kOldestJournalVersion, " to ", kJournalVersion, "; replay it with a dispatcher of version ",
        version, " or move it away to start empty"));
  }
  return version;
}

// The version in the header of the journal at `path` (kJournalVersion for an empty file or a
// header cut short): CheckHeader's errors.
absl::StatusOr<uint32_t> FileVersion(Env& env, const std::string& path) {
  ASSIGN_OR_RETURN(FileStat stat, env.Stat(path));
  if (stat.size == 0) return static_cast<uint32_t>(kJournalVersion);
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env.OpenForRead(path));
  Window window(*file, stat.size);
  std::string torn;
  return CheckHeader(window, stat.size, path, torn);
}

// Rewrites the journal at `path`, replayed as `updates`, in the current version, atomically.
// Returns its size.
absl::StatusOr<uint64_t> Rewrite(Env& env, const std::string& path,
                                 const std::vector<journal::Update>& updates) {
  std::string contents = JournalHeader();
  for (const journal::Update& update : updates) {
    std::string payload;
    if (!update.SerializeToString(&payload)) {
      return absl::InternalError(absl::StrCat("cannot serialize journal update for ", path));
    }
    contents += JournalEntry(payload);
  }
  RETURN_IF_ERROR(env.WriteFileAtomically(path, contents));
  return contents.size();
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string JournalHeader() {
  char header[kJournalHeaderBytes];
  std::memcpy(header, kJournalMagic, 8);
  tfrecord::EncodeU32(header + 8, static_cast<uint32_t>(kJournalVersion));
  tfrecord::EncodeU32(header + 12, crc32c::Mask(crc32c::Value(header, 12)));
  return std::string(header, sizeof(header));
}

std::string JournalEntry(absl::string_view payload) {
  std::string out(kLengthBytes + payload.size() + 4, '\0');
  tfrecord::EncodeHeader(out.data(), payload.size());
  std::memcpy(out.data() + kLengthBytes, payload.data(), payload.size());
  tfrecord::EncodeU32(out.data() + kLengthBytes + payload.size(),
                      crc32c::Mask(crc32c::Value(payload)));
  return out;
}

absl::StatusOr<JournalReplay> ReadJournal(
    Env& env, const std::string& path,
    const std::function<absl::Status(const journal::Update&, uint64_t offset)>& apply) {
  ASSIGN_OR_RETURN(FileStat stat, env.Stat(path));
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env.OpenForRead(path));
  JournalReplay replay;
  replay.file_bytes = stat.size;
  if (stat.size == 0) return replay;
  Window window(*file, stat.size);
  ASSIGN_OR_RETURN(replay.version, CheckHeader(window, stat.size, path, replay.torn));
  if (!replay.torn.empty()) return replay;

  uint64_t offset = kJournalHeaderBytes;
  while (offset < stat.size) {
    ASSIGN_OR_RETURN(Entry entry, EntryAt(window, stat.size, offset));
    if (!entry.payload) {
      ASSIGN_OR_RETURN(std::optional<uint64_t> next, NextValidEntry(window, stat.size, offset));
      if (next) {
        return absl::DataLossError(absl::StrCat("corrupt journal entry at byte ", offset, " of ",
                                                path, " (", entry.why,
                                                ") followed by a valid entry at byte ", *next));
      }
      replay.torn = std::move(entry.why);
      break;
    }
    absl::StatusOr<journal::Update> parsed = ParseJournalEntry(replay.version, *entry.payload);
    if (!parsed.ok()) {
      return absl::DataLossError(absl::StrCat("journal entry at byte ", offset, " of ", path,
                                              " is ", parsed.status().message()));
    }
    const journal::Update& update = *parsed;
    const uint64_t length = entry.payload->size();
    if (absl::Status s = apply(update, offset); !s.ok()) {
      return absl::DataLossError(absl::StrCat("journal entry at byte ", offset, " of ", path, " (",
                                              update.ShortDebugString(),
                                              ") cannot be replayed: ", s.message()));
    }
    ++replay.entries;
    offset += length + kJournalEntryOverheadBytes;
  }
  replay.valid_bytes = offset;
  return replay;
}

// ---- JournalWriter.

absl::StatusOr<std::unique_ptr<JournalWriter>> JournalWriter::Open(Env& env, std::string path,
                                                                   uint64_t valid_bytes,
                                                                   Options options) {
  if (valid_bytes == 0) {
    // A new journal: the header goes in with one write, then the file and its directory entry
    // are made durable.
    ASSIGN_OR_RETURN(auto file, env.OpenForWrite(path));
    RETURN_IF_ERROR(file->Append(JournalHeader()));
    if (options.sync) RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
    if (options.sync) RETURN_IF_ERROR(env.SyncDir(DirName(path)));
    valid_bytes = kJournalHeaderBytes;
  } else {
    ASSIGN_OR_RETURN(FileStat stat, env.Stat(path));
    if (stat.size < valid_bytes) {
      return absl::FailedPreconditionError(absl::StrCat("journal ", path, " has ", stat.size,
                                                        " bytes, fewer than the ", valid_bytes,
                                                        " replayed"));
    }
    if (stat.size > valid_bytes) RETURN_IF_ERROR(env.Truncate(path, valid_bytes));
  }
  ASSIGN_OR_RETURN(auto file, env.OpenForAppend(path));
  if (options.sync) RETURN_IF_ERROR(file->Sync());  // the cut, if any
  return std::unique_ptr<JournalWriter>(
      new JournalWriter(env, std::move(path), options, std::move(file), valid_bytes));
}

JournalWriter::JournalWriter(Env& env, std::string path, Options options,
                             std::unique_ptr<WritableFile> file, uint64_t size)
    : env_(env), path_(std::move(path)), options_(options), file_(std::move(file)), size_(size) {
  absl::MutexLock lock(&sync_mu_);
  published_ = synced_ = size;  // Open synced the header or the cut
}

JournalWriter::~JournalWriter() {
  StopAnswering();
  if (absl::Status s = file_->Close(); !s.ok()) Log(LogLevel::kError, "journal", s.ToString());
}

uint64_t JournalWriter::published() const {
  absl::MutexLock lock(&sync_mu_);
  return published_;
}

uint64_t JournalWriter::syncs() const {
  absl::MutexLock lock(&sync_mu_);
  return syncs_;
}

absl::Status JournalWriter::status() const {
  absl::MutexLock lock(&sync_mu_);
  return broken_;
}

void JournalWriter::BreakLocked(absl::Status status) {
  if (!broken_.ok()) return;  // the first cause stays
  broken_ = std::move(status);
  Log(LogLevel::kError, "journal", broken_.message());
  ChangedLocked();
}

void JournalWriter::ChangedLocked() {
  sync_cv_.SignalAll();
  threads_cv_.SignalAll();
}

void JournalWriter::CutBack(uint64_t size) {
  absl::Status cut = env_.Truncate(path_, size);
  if (!cut.ok()) {
    absl::MutexLock lock(&sync_mu_);
    BreakLocked(
        absl::UnavailableError(absl::StrCat("the dispatcher's journal ", path_,
                                            " is unusable until a restart: after a "
                                            "failed write it could not be cut back to byte ",
                                            size, ": ", cut.message())));
  }
}

absl::Status JournalWriter::Append(const journal::Update& update) {
  RETURN_IF_ERROR(status());
  std::string payload;
  if (!update.SerializeToString(&payload)) {
    return absl::InternalError(absl::StrCat("cannot serialize journal update for ", path_));
  }
  if (payload.size() > kMaxJournalEntryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a journal update of ", payload.size(),
                                                   " bytes is over the limit of ",
                                                   kMaxJournalEntryBytes, " (", path_, ")"));
  }
  const std::string entry = JournalEntry(payload);
  absl::Status written = file_->Append(entry);
  if (!written.ok()) {
    CutBack(size_);
    return absl::UnavailableError(absl::StrCat("the dispatcher cannot write its journal ", path_,
                                               " at byte ", size_, ": ", written.message(),
                                               "; the change was not made"));
  }
  last_entry_ = size_;
  size_ += entry.size();
  return absl::OkStatus();
}

absl::Status JournalWriter::DropLast() {
  RETURN_IF_ERROR(status());
  if (last_entry_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat("journal ", path_, ": no entry to drop"));
  }
  {
    absl::MutexLock lock(&sync_mu_);
    if (base_ + last_entry_ < published_) {
      // A waiter may have been told it is durable: it cannot be taken back.
      return absl::FailedPreconditionError(absl::StrCat("journal ", path_, ": the entry at byte ",
                                                        last_entry_, " is published; not dropped"));
    }
  }
  CutBack(last_entry_);
  RETURN_IF_ERROR(status());
  if (options_.sync) {
    // Synced at once (a rare path: a refused update is a bug): a crash must not bring the entry
    // back, since a replay would refuse it too. Concurrent with a syncer's fdatasync, which is
    // fine for the file; that syncer covers only what was published, which ends before the cut.
    if (absl::Status s = file_->Sync(); !s.ok()) {
      absl::MutexLock lock(&sync_mu_);
      BreakLocked(absl::UnavailableError(absl::StrCat("the dispatcher's journal ", path_,
                                                      " is unusable until a restart: syncing "
                                                      "its cut back to byte ",
                                                      last_entry_, " failed: ", s.message())));
      return broken_;
    }
  }
  size_ = last_entry_;
  last_entry_ = 0;
  return absl::OkStatus();
}

uint64_t JournalWriter::Publish() {
  absl::MutexLock lock(&sync_mu_);
  published_ = std::max(published_, base_ + size_);
  return published_;
}

void JournalWriter::SyncLocked() {
  syncing_ = true;
  // Everything published was written before it was published: this fdatasync covers it. Entries
  // written meanwhile may be covered too, but are counted only by the next sync.
  const uint64_t target = published_;
  WritableFile* const file = file_.get();  // not replaced while syncing_ (Compact waits)
  sync_mu_.Unlock();
  const absl::Status synced = file->Sync();
  sync_mu_.Lock();
  syncing_ = false;
  ++syncs_;
  last_sync_end_ = absl::Now();
  if (synced.ok()) {
    synced_ = std::max(synced_, target);
  } else {
    // After a failed fdatasync the kernel may have dropped the dirty pages and reports the next
    // sync as fine: only a replay of what is on disk is trustworthy now. Nothing after synced_ may
    // be acknowledged, so every waiter past it fails, and so does every later call.
    BreakLocked(absl::UnavailableError(absl::StrCat(
        "the dispatcher's journal ", path_, " is unusable until a restart: syncing it up to byte ",
        target - base_, " failed: ", synced.message(), " (durable up to byte ", synced_ - base_,
        "; no call that depends on what follows was answered)")));
  }
  ChangedLocked();
}

absl::Status JournalWriter::WaitSynced(uint64_t ticket, absl::Time deadline) {
  if (!options_.sync) return absl::OkStatus();
  absl::MutexLock lock(&sync_mu_);
  while (true) {
    if (synced_ >= ticket) return absl::OkStatus();
    if (!broken_.ok()) return broken_;
    if (!syncing_) {
      if (absl::Now() >= deadline) break;
      SyncLocked();
      continue;
    }
    if (sync_cv_.WaitWithDeadline(&sync_mu_, deadline) && synced_ < ticket && broken_.ok()) break;
  }
  return DeadlineErrorLocked(ticket);
}

absl::Status JournalWriter::DeadlineErrorLocked(uint64_t ticket) const {
  return absl::DeadlineExceededError(
      absl::StrCat("the call's deadline passed while it waited for the dispatcher's journal ",
                   path_, " to be synced up to byte ", ticket - base_, " (durable up to byte ",
                   synced_ - base_, (syncing_ ? "; an fdatasync is still in progress" : ""), ")"));
}

absl::Status JournalWriter::BeginCompaction() {
  RETURN_IF_ERROR(status());
  if (compaction_) {
    return absl::FailedPreconditionError(
        absl::StrCat("journal ", path_, ": a compaction is under way already"));
  }
  compaction_ = std::make_unique<Compaction>();
  compaction_->from = compaction_->copied_to = size_;
  compaction_->path = absl::StrCat(path_, ".tmp.", ::getpid());
  // The entries before the snapshot are in it: none of them may be dropped any more.
  last_entry_ = 0;
  return absl::OkStatus();
}

absl::Status JournalWriter::CopyTail(uint64_t from, uint64_t to) {
  if (to <= from) return absl::OkStatus();
  if (!compaction_->journal) {
    ASSIGN_OR_RETURN(compaction_->journal, env_.OpenForRead(path_));
  }
  const RandomAccessFile* journal = compaction_->journal.get();
  std::string chunk;
  for (uint64_t at = from; at < to;) {
    chunk.resize(std::min<uint64_t>(to - at, kWindowBytes));
    ASSIGN_OR_RETURN(const size_t got, journal->Read(at, chunk.size(), chunk.data()));
    if (got != chunk.size()) {
      return absl::DataLossError(absl::StrCat("journal ", path_, " ends at byte ", at + got,
                                              ", before the ", to, " bytes written to it"));
    }
    RETURN_IF_ERROR(compaction_->file->Append(chunk));
    compaction_->size += got;
    at += got;
  }
  compaction_->copied_to = to;
  return absl::OkStatus();
}

absl::Status JournalWriter::WriteCompaction(const std::vector<journal::Update>& snapshot) {
  Compaction& c = *compaction_;
  auto failed = [&c](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("compacting the journal into ", c.path, ": ",
                                               s.message(), "; the journal stays as it was"));
  };
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env_.OpenForWrite(c.path);
  if (!file.ok()) return failed(file.status());
  c.file = *std::move(file);
  // Written in pieces of about a megabyte: one write per entry would cost a system call per job.
  std::string pending = JournalHeader();
  for (const journal::Update& update : snapshot) {
    std::string payload;
    if (!update.SerializeToString(&payload)) {
      return failed(absl::InternalError("cannot serialize a snapshot entry"));
    }
    pending += JournalEntry(payload);
    if (pending.size() >= kWindowBytes) {
      if (absl::Status s = c.file->Append(pending); !s.ok()) return failed(s);
      c.size += pending.size();
      pending.clear();
    }
  }
  if (absl::Status s = c.file->Append(pending); !s.ok()) return failed(s);
  c.size += pending.size();
  // The tail published so far (whole entries, written before they were published), and synced;
  // again for what was published meanwhile, while that is more than a little, so that
  // FinishCompaction, under the caller's mutex, has only the last few entries to copy and sync.
  for (int round = 0; round < kTailRounds; ++round) {
    uint64_t published;
    {
      absl::MutexLock lock(&sync_mu_);
      published = published_ - base_;
    }
    const uint64_t from = c.copied_to;
    if (round > 0 && published <= from) break;
    if (absl::Status s = CopyTail(from, std::max(from, published)); !s.ok()) return failed(s);
    if (options_.sync) {
      if (absl::Status s = c.file->Sync(); !s.ok()) return failed(s);
    }
    if (round > 0 && published - from < kSmallTailBytes) break;
  }
  return absl::OkStatus();
}

void JournalWriter::AbortCompaction() {
  if (!compaction_) return;
  if (compaction_->file) compaction_->file->Close().IgnoreError();
  // A file never created is fine; another failure leaves a stray file, which the next compaction
  // overwrites.
  if (absl::Status s = env_.RemoveFile(compaction_->path); !s.ok() && !absl::IsNotFound(s)) {
    Log(LogLevel::kWarning, "journal", s.ToString());
  }
  compaction_.reset();
}

absl::StatusOr<uint64_t> JournalWriter::FinishCompaction() {
  if (!compaction_ || !compaction_->file) {
    return absl::FailedPreconditionError(
        absl::StrCat("journal ", path_, ": no compaction written to finish"));
  }
  if (absl::Status broken = status(); !broken.ok()) {
    AbortCompaction();
    return broken;
  }
  {
    absl::MutexLock lock(&sync_mu_);
    // Become the syncer: file_ is not synced by anyone while it is replaced.
    while (syncing_) sync_cv_.Wait(&sync_mu_);
    syncing_ = true;
  }
  Compaction& c = *compaction_;
  // Before the rename, any failure leaves the old journal whole and in use.
  absl::Status status = CopyTail(c.copied_to, size_);
  if (status.ok() && options_.sync) status = c.file->Sync();
  if (status.ok()) status = c.file->Close();
  if (status.ok()) status = env_.Rename(c.path, path_);
  if (!status.ok()) {
    status = absl::Status(
        status.code(), absl::StrCat("compacting the journal into ", c.path, ": ", status.message(),
                                    "; the journal stays as it was"));
    AbortCompaction();
    absl::MutexLock lock(&sync_mu_);
    syncing_ = false;
    ChangedLocked();
    return status;
  }
  const uint64_t new_size = c.size;
  compaction_.reset();
  // Renamed: the old file is gone from the directory, so the writer must move to the new one.
  // The rename is made durable by SyncCompaction, without the caller's mutex; until then this
  // stays the syncer, so that nothing is acknowledged that a crash could still take back (the
  // old journal lacks the tail entries it had not synced, and the new file's later entries).
  absl::StatusOr<std::unique_ptr<WritableFile>> reopened = env_.OpenForAppend(path_);
  std::unique_ptr<WritableFile> old;
  absl::Status result;
  {
    absl::MutexLock lock(&sync_mu_);
    if (reopened.ok()) {
      old = std::move(file_);
      file_ = *std::move(reopened);
      base_ += size_;
      size_ = new_size;
      last_entry_ = 0;
      published_ = base_ + size_;
      renamed_to_ = published_;
    } else {
      syncing_ = false;
      BreakLocked(absl::UnavailableError(
          absl::StrCat("the journal ", path_, " was compacted but cannot be reopened (",
                       reopened.status().message(), "); restart the dispatcher")));
      result = broken_;
    }
    ChangedLocked();
  }
  // Closed by SyncCompaction, outside the caller's mutex (see there).
  retired_ = std::move(old);
  if (!result.ok()) return result;
  return new_size;
}

absl::Status JournalWriter::SyncCompaction() {
  uint64_t renamed_to;
  {
    absl::MutexLock lock(&sync_mu_);
    if (renamed_to_ == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("journal ", path_, ": no compaction renamed to sync"));
    }
    renamed_to = renamed_to_;
  }
  const absl::Status synced = options_.sync ? env_.SyncDir(DirName(path_)) : absl::OkStatus();
  absl::Status result;
  {
    absl::MutexLock lock(&sync_mu_);
    renamed_to_ = 0;
    syncing_ = false;
    if (synced.ok()) {
      // The new file, synced before the rename, holds every entry written up to the swap (the
      // snapshot and the tail): all of them are durable now, published or not.
      synced_ = std::max(synced_, renamed_to);
    } else {
      // Without a durable rename a crash may bring back the old journal, which lacks the tail
      // not synced in it.
      BreakLocked(absl::UnavailableError(absl::StrCat(
          "the journal ", path_, " was compacted but the rename may not be durable (syncing its ",
          "directory failed: ", synced.message(), "); restart the dispatcher")));
      result = broken_;
    }
    ChangedLocked();
  }
  // Closing the old file frees its blocks (it has no name any more): milliseconds for a large
  // journal, after the waiters were answered.
  if (retired_) {
    if (absl::Status s = retired_->Close(); !s.ok()) Log(LogLevel::kError, "journal", s.ToString());
    retired_.reset();
  }
  return result;
}

absl::StatusOr<uint64_t> JournalWriter::Compact(const std::vector<journal::Update>& snapshot) {
  RETURN_IF_ERROR(BeginCompaction());
  if (absl::Status s = WriteCompaction(snapshot); !s.ok()) {
    AbortCompaction();
    return s;
  }
  ASSIGN_OR_RETURN(const uint64_t size, FinishCompaction());
  RETURN_IF_ERROR(SyncCompaction());
  return size;
}

absl::StatusOr<uint64_t> CompactJournal(Env& env, const std::string& path,
                                        const std::vector<journal::Update>& snapshot) {
  return Rewrite(env, path, snapshot);
}

absl::StatusOr<OpenedJournal> OpenJournal(
    Env& env, const std::string& path,
    const std::function<absl::Status(const journal::Update&, uint64_t offset)>& apply,
    JournalWriter::Options options) {
  OpenedJournal out;
  absl::StatusOr<FileStat> stat = env.Stat(path);
  if (stat.ok()) {
    // A journal of an older version is rewritten in the current one (its entries upgraded) before
    // anything is appended: every entry of a file is in its header's version.
    ASSIGN_OR_RETURN(const uint32_t version, FileVersion(env, path));
    const bool upgrade = version != static_cast<uint32_t>(kJournalVersion);
    std::vector<journal::Update> upgraded;
    ASSIGN_OR_RETURN(out.replay,
                     ReadJournal(env, path, [&](const journal::Update& u, uint64_t offset) {
                       RETURN_IF_ERROR(apply(u, offset));
                       if (upgrade) upgraded.push_back(u);
                       return absl::OkStatus();
                     }));
    if (!out.replay.torn.empty()) {
      Log(LogLevel::kWarning, "journal",
          absl::StrCat("journal ", path, ": torn final entry at byte ", out.replay.valid_bytes,
                       " (", out.replay.torn, "; ", out.replay.file_bytes - out.replay.valid_bytes,
                       " bytes), left by a crash while writing; cut away, the ", out.replay.entries,
                       " complete entries before it are kept"));
    }
    if (upgrade) {
      ASSIGN_OR_RETURN(out.replay.valid_bytes, Rewrite(env, path, upgraded));
      Log(LogLevel::kInfo, "journal",
          absl::StrCat("journal ", path, ": rewrote its ", upgraded.size(),
                       " entries from version ", version, " to version ", kJournalVersion,
                       "; a dispatcher that reads only version ", version,
                       " cannot replay it any more"));
    }
  } else if (!absl::IsNotFound(stat.status())) {
    return stat.status();
  }
  ASSIGN_OR_RETURN(out.writer, JournalWriter::Open(env, path, out.replay.valid_bytes, options));
  return out;
}

}  // namespace croupier
