// Ranges of objects fetched once per producer, not once per process: a directory (on /dev/shm)
// shared by the processes of one producer, its map job's worker processes. Each worker makes the
// batches it is handed, and a batch reads whole row groups of Parquet objects (ParquetSource):
// with W workers taking the batches of one row group in turn, each fetched it: up to W times the
// bytes. Through this directory the first process to need a range fetches it, and the others
// read its copy.
//
//   <name>         a range: a 16-byte header (magic "CRSR", the CRC-32C of the bytes, their
//                  length) and the bytes. <name> is 32 hex digits of the SHA-256 of the range's
//                  key (object, size, ETag, offset, length).
//   <name>.claim   held (an open file description lock, F_OFD_SETLK) by the process fetching
//                  the range; released by the kernel if it dies.
//   .tmp-...       a range being written, renamed to <name> once whole.
//
// A process that needs a range another is fetching waits for its claim (up to claim_wait, then
// logs that and fetches it itself), and finds it there. A range that does not check (a torn or
// corrupt file) is removed and fetched again: never data. The copies take at most `capacity` bytes:
// after each one is added, the least recently used are removed until they fit (a range larger than
// the capacity is fetched and not kept). A copy that cannot be written (the device full, the
// directory refused) is not kept, once logged: the read itself succeeds. The directory is made
// (mode 0700) by the first read, so that a producer that reads no object leaves no trace; one
// found there already is used only if it is this user's alone. Its owner chooses its name and
// removes it (python/croupier/map/cache_dirs.py, shared_reads).
#ifndef CROUPIER_SRC_S3_SHARED_READS_H_
#define CROUPIER_SRC_S3_SHARED_READS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/s3/s3_options.h"

namespace croupier::s3 {

class SharedReads {
 public:
  struct Options {
    std::string directory;  // made by the first read
    uint64_t capacity = kDefaultSharedReadBytes;
    absl::Duration claim_wait = absl::Seconds(60);
  };
  // How a read was served.
  enum class Served { kFetched, kShared };

  // The count of the bytes kept lives in memory shared with the processes forked from this one
  // after it is made (so that they evict when, together, they have kept too much).
  explicit SharedReads(Options options);
  ~SharedReads();
  SharedReads(const SharedReads&) = delete;
  SharedReads& operator=(const SharedReads&) = delete;

  // The range named `key` (words that name it in a log line: the object, the byte range and
  // the ETag), `length` bytes, into `dst`: another process's copy if there is one,
  // else fetch(dst)'s bytes, kept for the others. fetch's error is returned as it is (nothing is
  // kept then). Thread-safe, and safe across processes.
  absl::StatusOr<Served> Read(const std::string& key, size_t length, char* dst,
                              absl::FunctionRef<absl::Status(char* dst)> fetch);

  const Options& options() const { return options_; }

 private:
  // Whether the directory is this user's alone: made by this call (the first read of this
  // process, or of the one it was forked from) or found so. Else nothing is read from it or kept
  // in it: copies planted there are never served.
  bool DirectoryIsOurs();
  // Reads the copy at `path` into dst; false if there is none or it does not check (removed).
  bool ReadCopy(const std::string& path, size_t length, char* dst) const;
  // Writes dst's bytes as the copy at `path`, then keeps the copies within the capacity.
  void Keep(const std::string& path, size_t length, const char* dst);
  // Removes the least recently used copies until they fit; `kept_` becomes what is left.
  void Evict();

  Options options_;
  // The bytes of the copies kept (whole pages), an estimate that can only be high (a copy
  // removed for not checking is not taken off): the directory is walked only once it is over
  // the capacity, not after every copy.
  std::atomic<uint64_t>* kept_;
  bool shared_count_ = false;
  enum DirectoryState { kUnknown, kOurs, kRefused };
  std::atomic<int> directory_{kUnknown};
};

// The SharedReads of this process and the processes forked from it (set before they are
// forked), or nullptr: what croupier._croupier._ObjectStore's reads go through.
SharedReads* ProcessSharedReads();
// Sets it (an empty directory or a capacity of 0 turns it off). Called, like the reads that ask
// ProcessSharedReads(), with Python's GIL held (python/src/py_object_store.cc).
void SetProcessSharedReads(const std::string& directory, uint64_t capacity);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_SHARED_READS_H_
