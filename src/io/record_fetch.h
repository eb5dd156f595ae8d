// RecordFetcher: the records a batch needs from remote files (an object store:
// RandomAccessFile::remote()), read with one ReadRanges call per file, which the store's Env
// turns into few merged requests run in parallel; and the records of the batches to be made next
// fetched the same way ahead of use, by a thread of its own, within a bound on their bytes: the
// batches waiting to be fetched ahead are read together, in one ReadRanges call per file, so
// that records neighbouring in a file merge into one request even when they fall in different
// batches (a blocks shuffle deals a window of blocks over several batches).
//
// The maker knows what comes next from the plan: the later batches of the task it is making
// (a task is held whole by one producer), so nothing is fetched that its producer will not use,
// unless the task is taken away first.
#ifndef CROUPIER_SRC_IO_RECORD_FETCH_H_
#define CROUPIER_SRC_IO_RECORD_FETCH_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "croupier/dataset.h"

namespace croupier {

class RandomAccessFile;

// Records of a batch fetched together: record j of the list asked for is at starts[j] of
// `storage`, framed (header, data, footer), got[j] bytes of it read (fewer only where the file
// ended early). The batches fetched ahead together share one storage. Immutable once made.
struct FetchedRecords {
  std::shared_ptr<const std::string> storage;
  std::vector<uint64_t> starts;
  std::vector<uint64_t> got;

  // The got[j] bytes of record j.
  absl::string_view record(size_t j) const {
    return absl::string_view(*storage).substr(starts[j], got[j]);
  }
};

// Thread-safe.
class RecordFetcher {
 public:
  struct Options {
    // Bytes fetched ahead and not yet taken, at most; a batch that would pass it is not fetched
    // ahead (it is fetched when it is made).
    uint64_t max_ahead_bytes = uint64_t{64} << 20;
  };
  // A batch: (epoch, global batch).
  using Key = std::pair<uint64_t, uint64_t>;
  // The open file of the dataset's file `file`.
  using Opener = std::function<absl::StatusOr<const RandomAccessFile*>(size_t file)>;

  // `dataset` must outlive the fetcher.
  RecordFetcher(const Dataset& dataset, Opener open, Options options);
  // Stops the read-ahead thread after the fetch it is running (bounded by the store's request
  // deadline).
  ~RecordFetcher();
  RecordFetcher(const RecordFetcher&) = delete;
  RecordFetcher& operator=(const RecordFetcher&) = delete;

  // Reads `records` (in that order in the result) now. The first error of a read, naming the file
  // and range.
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> Fetch(
      absl::Span<const Dataset::Location> records) const;

  // The records of batch `key`: those fetched ahead for it (waiting for a fetch under way or
  // queued), or,
  // when it was not fetched ahead, that fetch failed or Ahead was given other records for `key`,
  // `records` read now.
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> Take(
      const Key& key, absl::Span<const Dataset::Location> records) ABSL_LOCKS_EXCLUDED(mu_);

  // Starts fetching `records` for batch `key` ahead, unless the batch was fetched ahead or taken
  // already, or its bytes do not fit in max_ahead_bytes.
  void Ahead(const Key& key, std::vector<Dataset::Location> records) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for several batches at once, which are then fetched together (in one ReadRanges
  // per file), so that their neighbouring records share requests; those past max_ahead_bytes
  // are left out.
  void Ahead(std::vector<std::pair<Key, std::vector<Dataset::Location>>> batches)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Whether batch `key` was asked for ahead or taken (lately).
  bool Known(const Key& key) const ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t ahead_started = 0;  // batches fetched ahead
    uint64_t ahead_used = 0;     // of them, taken by the maker
    uint64_t fetched_now = 0;    // batches fetched when made
    uint64_t ahead_fetches = 0;  // fetches of batches ahead, each of every batch then waiting
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::vector<Dataset::Location> records;
    uint64_t bytes = 0;
    bool done = false;
    absl::StatusOr<std::shared_ptr<const FetchedRecords>> fetched;
  };
  void Loop();
  // Fetches `entries` together and hands each its records.
  void FetchTogether(const std::vector<std::shared_ptr<Entry>>& entries);
  uint64_t FramedBytes(const Dataset::Location& loc) const;

  // Constant after construction.
  const Dataset& dataset_;
  const Opener open_;
  const Options options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<Entry>> ahead_ ABSL_GUARDED_BY(mu_);
  // Entries not started, in order (some may be taken from ahead_ already, and waited for).
  std::deque<std::shared_ptr<Entry>> queue_ ABSL_GUARDED_BY(mu_);
  // Batches taken lately, so that a batch made before its read-ahead was asked is not fetched
  // again; the oldest are forgotten past kRememberTaken.
  absl::flat_hash_set<Key> taken_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> taken_order_ ABSL_GUARDED_BY(mu_);
  uint64_t ahead_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_IO_RECORD_FETCH_H_
