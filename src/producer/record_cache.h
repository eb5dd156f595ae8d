// The producer's optional record cache, the equivalent of tf.data's cache() step: the records of
// a job's files are kept after their first read, so that later epochs are served without reading
// the files again.
#ifndef CROUPIER_SRC_PRODUCER_RECORD_CACHE_H_
#define CROUPIER_SRC_PRODUCER_RECORD_CACHE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "croupier/record_index.h"

namespace croupier {

class Env;
class RandomAccessFile;
class WritableFile;

// A cache of TFRecord record data (the bytes inside the framing), keyed by file and record
// number, bounded in bytes. It holds the serialized tf.train.Example, not decoded columns: records
// are still decoded for every batch (BatchBuilder decodes straight into the batch's columns, which
// costs less than a copy of decoded values would save), but never read from the files again.
//
// Admission, like tf.data's cache: records are admitted while they fit, and once the cache is
// full it admits nothing more, so a dataset larger than the cache is served partly from the cache
// and partly from the files, with no churn. One exception, for a kept directory (below): records
// read back from it whose source file no job of this process has opened (FileId) are another
// job's, and give way. The first record that does not fit drops all of them at once (Stats::
// evicted), and the shard files that held them are written again without them; after that,
// nothing is evicted, since every record then held is of a file a job here opened. What counts
// against the bound:
//   - in memory: the storage allocated for records (in chunks, never more than the capacity), plus
//     kEntryOverheadBytes per record for its index entry;
//   - in a directory: the record bytes written to the cache files; the in-memory index is not
//     counted.
//
// The directory mode writes one file per shard (record_cache_file.h: each record in a frame that
// names its source file and record) in a fresh directory it creates inside `dir`, and removes that
// directory with its files on destruction. With `keep`, the directory is `dir`/croupier-record-cache
// instead, and it stays: the next cache kept there (a producer started again) reads the frames
// back and holds their records from the start, up to its capacity. A frame cut short (a producer
// killed while writing) or failing its check ends what is read, and the file is cut there. A
// kept directory is locked (flock) while a cache uses it; a second cache that finds it locked
// (two producers on one host) uses a fresh directory, as without `keep`, and says so in the log.
// A source file that changed gets a new identity (FileId), so its old records are never
// returned. When a kept directory is read back, the records of a source file or object that
// changed or is gone since are dropped, and the shard files that held them are written again
// without them. Each source is asked once (a Stat; for an object in a store, a HEAD request,
// 16 at a time); one that cannot be asked (the store unreachable) keeps its records.
// Records read back are checked against their CRC-32C; a record that fails the check or cannot
// be read is a miss (and a logged warning), so the caller reads the source file instead.
//
// Thread-safe.
class RecordCache {
 public:
  static constexpr uint64_t kEntryOverheadBytes = 32;

  struct Options {
    uint64_t capacity_bytes = uint64_t{1} << 30;
    // Empty: in memory. Otherwise the cache files go in a new directory created inside this one,
    // or with `keep` in dir/croupier-record-cache, kept for the next cache.
    std::string dir;
    bool keep = false;
    Env* env = nullptr;  // nullptr: Env::Default()
  };

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t records = 0;  // records held
    uint64_t bytes = 0;    // bytes counted against the capacity (see above)
    uint64_t capacity_bytes = 0;
    uint64_t rejected = 0;     // Insert calls refused because the cache was full
    uint64_t read_errors = 0;  // directory mode: records that could not be read back
    uint64_t loaded = 0;       // kept directory: records read back when the cache was made
    uint64_t evicted = 0;      // kept directory: records read back, dropped to make room
  };

  // INVALID_ARGUMENT for a zero capacity; errors of creating the directory.
  static absl::StatusOr<std::unique_ptr<RecordCache>> Create(Options options);
  ~RecordCache();
  RecordCache(const RecordCache&) = delete;
  RecordCache& operator=(const RecordCache&) = delete;

  // A number for the file an index describes, to key its records by. The same path, size and
  // modification time always get the same number, so several jobs over one file share its
  // records; a file that changed gets a new number, so stale records are never returned. The
  // file counts as opened by a job of this process: its kept records are never evicted.
  uint32_t FileId(const RecordIndex& index);
  // The same for the file `path` of that size and modification time, before its index is
  // loaded: the number FileId(index) gives once it is.
  uint32_t FileId(const std::string& path, uint64_t size, int64_t mtime_ns);

  // The cached data of record `record` of file `file`, or nullopt (a miss). In memory, the view
  // points into the cache and stays valid as long as the cache; in a directory, it points into
  // `buffer`, which is reused.
  std::optional<absl::string_view> Lookup(uint32_t file, uint64_t record, std::string& buffer);

  // Whether the record is held, without reading it or counting a hit or miss (to plan which
  // records to fetch).
  bool Contains(uint32_t file, uint64_t record);

  // Admits a copy of a record's data if it fits; returns whether it was admitted (or was held
  // already). Evicts only kept records of files no job here opened, all at once (see above).
  bool Insert(uint32_t file, uint64_t record, absl::string_view data);

  Stats stats() const;
  // The directory holding the cache files; empty in memory.
  const std::string& path() const { return path_; }
  // Whether the directory stays for the next cache (Options::keep, and the directory was free).
  bool kept() const { return lock_fd_ >= 0; }

 private:
  static constexpr int kShards = 16;
  struct Key {
    uint32_t file;
    uint64_t record;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.file, k.record);
    }
    bool operator==(const Key&) const = default;
  };
  // Where a record's data is: in memory, at `data`; in a directory, at byte `offset` of the file
  // of shard `home`, with `crc` its CRC-32C. A record read back from a kept directory may live
  // in another shard's file than the shard its key falls in: FileIds are numbered anew by each
  // process.
  struct Slot {
    const char* data = nullptr;
    uint64_t offset = 0;
    uint32_t size = 0;
    uint32_t crc = 0;
    uint32_t home = 0;
  };
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<Key, Slot> slots ABSL_GUARDED_BY(mu);
    // In memory: chunks records are copied into; the last one, of chunk_size bytes, is being
    // filled.
    std::vector<std::unique_ptr<char[]>> chunks ABSL_GUARDED_BY(mu);
    uint64_t chunk_used ABSL_GUARDED_BY(mu) = 0;
    uint64_t chunk_size ABSL_GUARDED_BY(mu) = 0;
    // In a directory: the shard's file, appended under `write_mu` (a slow path, so not under mu),
    // and read concurrently through `reader`.
    absl::Mutex write_mu ABSL_ACQUIRED_BEFORE(mu);
    std::unique_ptr<WritableFile> writer ABSL_GUARDED_BY(write_mu);
    uint64_t file_size ABSL_GUARDED_BY(write_mu) = 0;
    // The source files this shard's file names, by FileId: their number in this file.
    absl::flat_hash_map<uint32_t, uint32_t> local_ids ABSL_GUARDED_BY(write_mu);
    // Set at creation; replaced only by an eviction, which holds rewrite_mu_ exclusively while
    // every read of it holds rewrite_mu_ shared, until unopened_ is false (then none comes).
    std::unique_ptr<RandomAccessFile> reader;
  };
  // A record to write into a shard file written anew: its key and where its bytes are now.
  struct Moved {
    Key key;
    uint64_t offset;
    uint32_t size;
    uint32_t crc;
  };
  // What InsertInFile did.
  enum class Admission { kAdmitted, kFull, kRefused };

  RecordCache(Options options, std::string path, int lock_fd);
  absl::Status OpenFiles();
  // A kept shard's file: its records read back (as many as fit) and the file cut after them.
  absl::Status Reopen(Shard& shard, const std::string& file, uint64_t size)
      ABSL_LOCKS_EXCLUDED(shard.write_mu);
  uint32_t FileIdOf(const std::string& identity, bool opened);
  // Writes shard file `file` anew from `from`, with `records` only, in their order, and puts it
  // in the old one's place: the offset of each record's bytes in the new file, in order.
  absl::StatusOr<std::vector<uint64_t>> Rewrite(const std::string& file,
                                                const RandomAccessFile& from,
                                                const std::vector<Moved>& records,
                                                absl::flat_hash_map<uint32_t, uint32_t>& local_ids);
  // Drops every record read back from the kept directory whose source file no job here opened,
  // and writes the shard files that held them again: the records dropped.
  uint64_t EvictUnopened() ABSL_LOCKS_EXCLUDED(rewrite_mu_);
  absl::Status RewriteShard(Shard& shard, uint32_t home) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rewrite_mu_);
  // Whether the source file or object an identity names has changed or is gone (a kept
  // directory's records of it are dropped): a Stat, which for an object in a store is a request.
  // False when it cannot be asked (the reason logged). CheckSources asks for each identity not
  // asked yet, kParallelChecks at a time, into changed_; only while the cache is made.
  bool CheckSource(const std::string& identity);
  void CheckSources(const std::vector<std::string>& identities);
  static constexpr size_t kParallelChecks = 16;
  std::string IdentityOf(uint32_t file);
  // Takes `bytes` from the budget if they fit.
  bool Charge(uint64_t bytes);
  bool InsertInMemory(Shard& shard, const Key& key, absl::string_view data);
  // Called with rewrite_mu_ held shared while an eviction may still come (unopened_).
  Admission InsertInFile(Shard& shard, const Key& key, absl::string_view data);
  std::optional<absl::string_view> ReadBack(const Slot& slot, std::string& buffer);
  Shard& ShardOf(const Key& key) { return shards_[((key.record >> 6) ^ key.file) % kShards]; }

  // Constant after construction.
  const uint64_t capacity_;
  const uint64_t chunk_bytes_;  // the usual size of a memory chunk
  Env* const env_;
  const std::string path_;  // empty: in memory
  const int lock_fd_;       // a kept directory's lock, held while the cache lives; -1 otherwise

  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> read_errors_{0};
  std::atomic<uint64_t> loaded_{0};
  std::atomic<uint64_t> evicted_{0};
  // Whether records read back of files no job here opened may be held (until the first eviction).
  std::atomic<bool> unopened_{false};
  // Directory mode: held exclusively by an eviction, which writes the files again, and shared
  // by every read of a shard's file and every insertion while one may still come (unopened_).
  absl::Mutex rewrite_mu_ ABSL_ACQUIRED_BEFORE(files_mu_);

  absl::Mutex files_mu_;
  absl::flat_hash_map<std::string, uint32_t> file_ids_ ABSL_GUARDED_BY(files_mu_);
  absl::flat_hash_map<std::string, bool> changed_;  // CheckSources's answers, while made
  std::vector<std::string> identities_ ABSL_GUARDED_BY(files_mu_);  // by FileId
  std::vector<bool> opened_ ABSL_GUARDED_BY(files_mu_);  // by FileId: FileId() was asked for it
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_RECORD_CACHE_H_
