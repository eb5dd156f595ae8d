// Env: every file-system access of croupier goes through this interface, so that tests can inject
// faults (short reads, I/O errors, files changing underneath) the way leveldb's Env allows.
#ifndef CROUPIER_SRC_COMMON_ENV_H_
#define CROUPIER_SRC_COMMON_ENV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace croupier {

// A file opened for positional reads. Thread-safe: Read may be called from several threads.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at `offset` into dst and returns how many were read; fewer than n only at
  // the end of the file. Errors name the file and the offset. A file cut short after it was
  // opened may read as zeros from its new end to the end of that page, instead of short (a file
  // opened with the default Env's OpenForRandomRead reads small ranges from a mapping of the
  // file): compare with Size() when the bytes read are not what was expected.
  virtual absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* dst) const = 0;
  virtual const std::string& name() const = 0;
  // A hint that [offset, offset + n) will be read soon: the default Env starts bringing the
  // first bytes of a mapped range into the CPU's cache. Never fails; may do nothing.
  virtual void WillRead(uint64_t /*offset*/, size_t /*n*/) const {}
  // The file's size now. UNIMPLEMENTED where the file cannot tell.
  virtual absl::StatusOr<uint64_t> Size() const {
    return absl::UnimplementedError(absl::StrCat("the size of ", name(), " is not known"));
  }

  // One range of a ReadRanges call: `length` bytes at `offset` into dst; `got` is set to the
  // bytes read (fewer than length only at the end of the file, as Read).
  struct Range {
    uint64_t offset = 0;
    size_t length = 0;
    char* dst = nullptr;
    size_t got = 0;
  };
  // Reads every range, in any order and possibly at once; ranges may overlap and may share no
  // order with their offsets. The first error is returned (the others are dropped) and the
  // ranges' contents are then unspecified. Reads of a remote() file are worth batching here: an
  // object store's file merges neighbouring ranges into one request and runs the requests in
  // parallel. The default reads each range with Read.
  virtual absl::Status ReadRanges(absl::Span<Range> ranges) const {
    for (Range& r : ranges) {
      absl::StatusOr<size_t> got = Read(r.offset, r.length, r.dst);
      if (!got.ok()) return got.status();
      r.got = *got;
    }
    return absl::OkStatus();
  }
  // Whether each read costs a round trip to another machine (an object store): callers that know
  // what they will read should then ask for it in few ReadRanges calls, and ahead of use.
  virtual bool remote() const { return false; }
};

// A file opened for appending. Thread-compatible.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes the data appended so far durable (fdatasync): it survives a crash of the machine, not
  // only of the process. Append alone hands the bytes to the OS, which survives a process crash.
  virtual absl::Status Sync() = 0;
  // Flushes to the OS and closes; further calls fail. Called by the destructor if not called.
  virtual absl::Status Close() = 0;
  virtual const std::string& name() const = 0;
};

struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  // An object's entity tag, as its store gives it (quotes included): it changes whenever the
  // object is written. Empty for a local file.
  std::string etag;
};

// Thread-safe.
class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX implementation.
  static Env* Default();

  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(
      const std::string& path) = 0;
  // The same, for a file read a small range at a time at random offsets (records read in a
  // shuffled order): the default Env copies reads of up to 64 KiB out of a mapping of the file
  // (FileMapping; read-ahead off, as it would only read pages nobody asked for), where
  // OpenForRead keeps pread and the kernel's read-ahead for sequential reads. Defaults to
  // OpenForRead.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRandomRead(
      const std::string& path) {
    return OpenForRead(path);
  }
  // OpenForRead (kSequential) or OpenForRandomRead (kRandom) of a file the caller has a Stat of
  // already (one just made, or the one a record index was checked against): an object store
  // (S3Env) then asks the store nothing before the first read, and every read asks for the
  // object of `known.etag` (when it is set), so that reads of an object replaced since fail with
  // DATA_LOSS naming it. Nothing checks a local file here: one that changed since fails its
  // reads (past its end) or its records' checks. Defaults to OpenForRead or OpenForRandomRead.
  enum class ReadPattern { kSequential, kRandom };
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenKnown(
      const std::string& path, const FileStat& /*known*/, ReadPattern pattern) {
    return pattern == ReadPattern::kRandom ? OpenForRandomRead(path) : OpenForRead(path);
  }
  // Creates or truncates.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& path) = 0;
  // Opens for appending at the end, creating the file if it is missing (it keeps its contents).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) = 0;
  // Cuts the file to its first `size` bytes.
  virtual absl::Status Truncate(const std::string& path, uint64_t size) = 0;
  // Makes the directory's entries durable (fsync of the directory), so that a file just created
  // in it survives a machine crash.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  virtual absl::StatusOr<FileStat> Stat(const std::string& path) = 0;
  // Writes `contents` to a temporary file beside `path`, syncs it, renames it over `path` and
  // syncs the directory, so readers see the old file or the new one, never a part, and the new
  // one survives a machine crash once this returns.
  virtual absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) = 0;
  // Renames `from` to `to`, replacing `to` atomically if it exists; SyncDir makes it durable.
  // The default is rename(2) on local files (so an Env that routes some paths elsewhere, as
  // Env::Default() does s3:// ones, needs no override for its local files); errors name both.
  virtual absl::Status Rename(const std::string& from, const std::string& to);
  // Removes the file `path`. The default is unlink(2) on a local file; errors name it.
  virtual absl::Status RemoveFile(const std::string& path);
  // Like `mkdir -p`.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // Paths matching a shell glob, sorted. No match is an empty list, not an error.
  virtual absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) = 0;
  // A path Glob matched, and its Stat when finding it told that at no further cost.
  struct Listed {
    std::string path;
    std::optional<FileStat> stat;
  };
  // Glob's matches, each with its Stat where the match came with it: an object store's listing
  // gives every object's size, Last-Modified and ETag (S3Env), so a caller about to Stat each
  // match asks nothing more. The default is Glob's paths, without stats.
  virtual absl::StatusOr<std::vector<Listed>> GlobWithStats(const std::string& pattern);
  // The whole file. The default opens it and reads it, its size from the open file (or Stat);
  // an object store (S3Env) reads a whole object in one GET. ReadFileToString calls it.
  virtual absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
  // Where a file derived from `path` (its record index, say), named with `suffix`, is kept for
  // every reader of `path` on any machine, through this Env; empty when there is no such place
  // (the default: local files are indexed into each machine's own cache). An object store keeps
  // it as an object (S3Env: CROUPIER_S3_INDEX_PREFIX).
  virtual std::string SharedDerivedPath(const std::string& /*path*/, absl::string_view /*suffix*/) {
    return "";
  }
};

// Reads a whole file through env (Env::ReadWholeFile).
inline absl::StatusOr<std::string> ReadFileToString(Env& env, const std::string& path) {
  return env.ReadWholeFile(path);
}

// Turns errno from a call on `path` into a status whose code says what the caller can do.
absl::Status ErrnoToStatus(int err, absl::string_view what, absl::string_view path);

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_ENV_H_
