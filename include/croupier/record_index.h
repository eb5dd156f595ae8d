// The record index of a TFRecord file: where every record starts, found in one scan, so that
// record i can be read with one positional read. Indexes are cached on disk (docs/formats.md gives
// the file layout) and rebuilt when the data file's size or modification time changes.
#ifndef CROUPIER_INCLUDE_CROUPIER_RECORD_INDEX_H_
#define CROUPIER_INCLUDE_CROUPIER_RECORD_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

class Env;
class RandomAccessFile;
struct FileStat;

// Immutable after construction, so thread-safe.
struct RecordIndex {
  std::string path;
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  std::vector<uint64_t> offsets;  // byte offset of each record's header, ascending
  // An object's ETag, from the Stat the index was built or checked against; not kept in the
  // index file. Reads through the index ask for the object of this ETag (Env::OpenKnown).
  std::string etag;

  uint64_t num_records() const { return offsets.size(); }
  // Data bytes of record i (its framing excluded).
  uint64_t data_length(uint64_t i) const;
};

// Called now and then while a file is scanned, with the bytes scanned so far and the file size.
using IndexProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// Scans `path` and returns its index. The length checksums are verified, the data checksums are
// left to the reads. DATA_LOSS names the file and byte offset of a corrupt or truncated record;
// ABORTED means the file changed during the scan (retry).
absl::StatusOr<RecordIndex> BuildRecordIndex(Env& env, const std::string& path,
                                             const IndexProgress& progress = nullptr);
// The same, for a caller that has just made a Stat of `path` (IndexCache::Get): the scan starts
// from it, so that an object store is asked for the object's size once, not three times.
absl::StatusOr<RecordIndex> BuildRecordIndex(Env& env, const std::string& path,
                                             const FileStat& before,
                                             const IndexProgress& progress = nullptr);

// Serialization of an index to the cache file layout and back. Parsing checks every field and the
// trailing checksum, and fails with DATA_LOSS on anything inconsistent.
std::string SerializeRecordIndex(const RecordIndex& index);
absl::StatusOr<RecordIndex> ParseRecordIndex(absl::string_view bytes, absl::string_view source);

// Finds indexes in a cache directory, building and storing them when missing or stale.
// Thread-safe.
class IndexCache {
 public:
  // `dir` empty means DefaultDir().
  explicit IndexCache(std::string dir = "", Env* env = nullptr);

  // $CROUPIER_INDEX_DIR, else $XDG_CACHE_HOME/croupier/index, else ~/.cache/croupier/index.
  static std::string DefaultDir();

  // The index of `path`: from the cache if its size and mtime still match the file; else, for a
  // file whose Env keeps derived files for every reader (an object: Env::SharedDerivedPath,
  // "<path>.crindex" under the store's index prefix), from there if it matches, copied into the
  // cache; otherwise built by a scan and stored in the cache and the shared place. A cache or
  // shared place that cannot be read or written is not an error: the index is built or returned
  // and a warning logged. `rebuilt` (optional) tells whether a scan happened.
  //
  // `known` (optional): what the caller knows of the file already, in place of a Stat of it (a
  // job's FileInfo gives a producer each object's size, modification time and ETag as the
  // dispatcher saw them when it created the job): an object store is then asked nothing before
  // the index's GET, and reads through the index ask for the object of known.etag, failing if
  // it was written again since.
  absl::StatusOr<std::shared_ptr<const RecordIndex>> Get(const std::string& path,
                                                         const IndexProgress& progress = nullptr,
                                                         bool* rebuilt = nullptr,
                                                         const FileStat* known = nullptr);
  // Where the index of `path` is stored.
  std::string CachePath(const std::string& path) const;
  const std::string& dir() const { return dir_; }

  // The suffix of an index kept for every reader of its file (the same layout as the cache's).
  static constexpr absl::string_view kSharedIndexSuffix = ".crindex";

 private:
  // Writes `bytes` to the cache file, logging a warning when it cannot.
  void Store(const std::string& cache_path, absl::string_view bytes, const std::string& path) const;

  const std::string dir_;
  Env* const env_;
};

// DATA_LOSS for record i of `index`, read from `file` at its indexed offset, whose bytes were
// not a good record (`bad`, from CheckRecord) or were `got` bytes short of it: if the file now
// ends before the record does, the message says that the record is cut short and the file
// changed since it was indexed; otherwise `bad`.
absl::Status RecordReadError(const RecordIndex& index, uint64_t i, const RandomAccessFile& file,
                             uint64_t got, absl::Status bad);

// Random access to the records of one indexed file. Thread-safe.
class IndexedRecordFile {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedRecordFile>> Open(
      std::shared_ptr<const RecordIndex> index, Env* env = nullptr);
  ~IndexedRecordFile();

  uint64_t num_records() const { return index_->num_records(); }
  const RecordIndex& index() const { return *index_; }

  // Reads record i with both checksums checked and returns a view of its data inside `buffer`,
  // whose capacity is reused across calls. DATA_LOSS names the file and byte offset;
  // OUT_OF_RANGE for i >= num_records().
  absl::StatusOr<absl::string_view> Read(uint64_t i, std::string& buffer) const;
  // A hint that record i will be read soon (RandomAccessFile::WillRead); nothing for i out of
  // range.
  void WillRead(uint64_t i) const;
  // The file the records are read from (RandomAccessFile::remote(), ReadRanges).
  const RandomAccessFile& file() const { return *file_; }

 private:
  IndexedRecordFile(std::shared_ptr<const RecordIndex> index,
                    std::unique_ptr<RandomAccessFile> file);
  std::shared_ptr<const RecordIndex> index_;
  std::unique_ptr<RandomAccessFile> file_;
};

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_RECORD_INDEX_H_
