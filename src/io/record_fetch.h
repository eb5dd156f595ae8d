// RecordFetcher: the records a batch needs from remote files (an object store:
// RandomAccessFile::remote()), read with one ReadRanges call per file, which the store's Env
// turns into few merged requests run in parallel; and the records of the batches to be made next
// fetched the same way ahead of use, by threads of its own, within a bound on their bytes: the
// batches named in one call (Ahead, or a list of AheadLater) are read together, in one ReadRanges
// call per file, so that records neighbouring in a file merge into one request even when they
// fall in different batches (a blocks shuffle deals a window of blocks over several batches);
// separate calls are separate fetches, in the order named, which run at once on free threads.
//
// The maker knows what comes next from the plan: the later batches of the task it is making, and
// the tasks its producer holds but has not started (a task is held whole by one producer). It
// names those as they are given (AheadLater: the list is made on a fetch thread, since making it
// may open files), and the batches of a task taken away before they are made are forgotten
// (Forget): their queued fetches cancelled, their bytes released. So nothing is fetched that its
// producer will not use, but what a task taken away had fetched already.
//
// What is made first is fetched first. Batches asked for ahead as the next of the task being made
// (Priority::kNext) are fetched before those of tasks not started (kLater), whatever was asked
// first. And a batch being made whose fetch ahead has not started yet does not wait behind the
// others: the maker's thread (in Take) runs that fetch itself, with the batches asked for with it.
//
// Bounds: the bytes fetched ahead and not yet taken, at most the budget's capacity (FetchBudget,
// which the fetchers of a producer's jobs share); at most Options::fetch_threads fetches ahead
// running at once, each one ReadRanges call per file, whose requests the store's client runs
// within its own bound on requests in flight (CROUPIER_S3_MAX_IN_FLIGHT).
#ifndef CROUPIER_SRC_IO_RECORD_FETCH_H_
#define CROUPIER_SRC_IO_RECORD_FETCH_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
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
#include "absl/time/time.h"
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

// The bytes that may be held fetched ahead of use, shared by the fetchers that take from it (one
// producer's jobs): a batch whose bytes do not fit is not fetched ahead (it is fetched when it
// is made). Thread-safe.
class FetchBudget {
 public:
  explicit FetchBudget(uint64_t capacity) : capacity_(capacity) {}
  FetchBudget(const FetchBudget&) = delete;
  FetchBudget& operator=(const FetchBudget&) = delete;

  // Takes `bytes` if they fit within the capacity with what is taken; false (nothing taken) if
  // not.
  bool TryTake(uint64_t bytes);
  void Give(uint64_t bytes);
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  // The most taken at once.
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> peak_{0};
};

// Thread-safe.
class RecordFetcher {
 public:
  struct Options {
    // Bytes fetched ahead and not yet taken, at most, when `budget` is not given.
    uint64_t max_ahead_bytes = uint64_t{64} << 20;
    // The bound on the bytes fetched ahead, shared with other fetchers; null: one of this
    // fetcher's own, of max_ahead_bytes.
    std::shared_ptr<FetchBudget> budget;
    // Fetches of batches ahead running at once (each waits for its requests: the next batches
    // named meanwhile start without waiting for it); at least 1.
    int fetch_threads = 4;
  };
  // How soon batches asked for ahead are made: kNext, the next of the task being made, are fetched
  // before every kLater batch (the tasks held and not started), in the order asked in each.
  enum class Priority { kLater, kNext };
  // A batch: (epoch, global batch).
  using Key = std::pair<uint64_t, uint64_t>;
  // Batches [first, end) of epoch `epoch`: a task's.
  struct BatchRange {
    uint64_t epoch = 0;
    uint64_t first = 0;
    uint64_t end = 0;
    bool Contains(const Key& key) const {
      return key.first == epoch && key.second >= first && key.second < end;
    }
    bool Overlaps(const BatchRange& o) const {
      return o.epoch == epoch && o.first < end && first < o.end;
    }
  };
  // Batches and the records to fetch for each.
  using Batches = std::vector<std::pair<Key, std::vector<Dataset::Location>>>;
  // The open file of the dataset's file `file`.
  using Opener = std::function<absl::StatusOr<const RandomAccessFile*>(size_t file)>;

  // `dataset` must outlive the fetcher.
  RecordFetcher(const Dataset& dataset, Opener open, Options options);
  // Stops the read-ahead threads after the fetches they are running (bounded by the store's
  // request deadline).
  ~RecordFetcher();
  RecordFetcher(const RecordFetcher&) = delete;
  RecordFetcher& operator=(const RecordFetcher&) = delete;

  // Reads `records` (in that order in the result) now. The first error of a read, naming the file
  // and range.
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> Fetch(
      absl::Span<const Dataset::Location> records) const;

  // The records of batch `key`: those fetched ahead for it (waiting for a fetch under way; a fetch
  // still queued is run now on this thread, with the batches asked for with it), or, when it was
  // not fetched ahead, that fetch failed or Ahead was given other records for `key`, `records`
  // read now.
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> Take(
      const Key& key, absl::Span<const Dataset::Location> records) ABSL_LOCKS_EXCLUDED(mu_);

  // Starts fetching `records` for batch `key` ahead, unless the batch was fetched ahead or taken
  // already, or its bytes do not fit in max_ahead_bytes.
  void Ahead(const Key& key, std::vector<Dataset::Location> records,
             Priority priority = Priority::kLater) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for several batches at once, which are then fetched together (in one ReadRanges
  // per file), so that their neighbouring records share requests; those past the budget are left
  // out (and the batches after them).
  void Ahead(Batches batches, Priority priority = Priority::kLater) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `list` later on a fetch thread and asks for the batches it names as Ahead does; returns
  // at once (no read, no file opened here: a caller that must not wait on the store can name
  // work). `range` holds every batch `list` names: Forget(range) before `list` has run cancels
  // it. Lists run in the order given, before the batches they name are fetched.
  void AheadLater(BatchRange range, std::function<Batches()> list) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the batches of `range` that were asked for ahead and not taken: a list of
  // AheadLater not yet run is cancelled, queued fetches are dropped, and fetched bytes given back
  // to the budget (a fetch under way gives them back as it ends). Its bytes are freed once no
  // batch fetched in the same request is held (the fetches of other batches share it). The
  // batches are no longer known (a range taken away and given back is fetched ahead again).
  void Forget(BatchRange range) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether batch `key` was asked for ahead or taken (lately).
  bool Known(const Key& key) const ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t ahead_started = 0;   // batches fetched ahead
    uint64_t ahead_used = 0;      // of them, taken by the maker
    uint64_t ahead_ready = 0;     // of those, fetched already when taken: no wait on the store
    uint64_t ahead_by_maker = 0;  // of those, not started when taken: the maker's thread ran it
    uint64_t fetched_now = 0;     // batches fetched when made
    double wait_seconds = 0;      // time Take waited for the store (a fetch under way or now)
    uint64_t ahead_fetches = 0;   // fetches of batches ahead, each of every batch then waiting
    uint64_t forgotten = 0;       // batches asked for ahead, then forgotten before they were taken
    uint64_t ahead_bytes = 0;     // bytes fetched ahead (or being fetched) and not taken, now
    uint64_t peak_ahead_bytes = 0;  // the most of them at once
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // The counters of every fetcher of this process, the live and the destroyed, summed (the
  // producer's /metrics); ahead_bytes and peak_ahead_bytes are left 0.
  static Stats ProcessStats();

 private:
  struct Entry {
    std::vector<Dataset::Location> records;
    uint64_t bytes = 0;
    bool started = false;    // a fetch thread took it from the queue
    bool done = false;       // its fetch ended
    bool forgotten = false;  // Forget found it under way: its fetch gives its bytes back
    uint64_t call = 0;       // the Ahead call (or list) that named it: fetched with its batches
    absl::StatusOr<std::shared_ptr<const FetchedRecords>> fetched;
  };
  // A list of AheadLater not yet run (or running).
  struct Later {
    BatchRange range;
    std::function<Batches()> list;
    bool cancelled = false;
  };
  void Loop();
  // Starts a fetch thread if every one is busy and fewer than fetch_threads run.
  void MaybeStartThreadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !next_.empty() || !queue_.empty() || !later_.empty();
  }
  void AheadLocked(Batches batches, const std::vector<uint64_t>& bytes, Priority priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the entries of the first call waiting (next_'s, then queue_'s) out of their queue, and
  // marks them started; those of call `call` instead when it is given.
  std::vector<std::shared_ptr<Entry>> UnqueueLocked(std::optional<uint64_t> call = std::nullopt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `waited` in the wait of this fetcher and of the process.
  void WaitedLocked(absl::Duration waited) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the bytes of an entry no longer held ahead.
  void ReleaseLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fetches `entries` together and hands each its records.
  void FetchTogether(const std::vector<std::shared_ptr<Entry>>& entries);
  uint64_t FramedBytes(const Dataset::Location& loc) const;

  // Constant after construction.
  const Dataset& dataset_;
  const Opener open_;
  const Options options_;
  const std::shared_ptr<FetchBudget> budget_;  // options_.budget, or this fetcher's own

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<Entry>> ahead_ ABSL_GUARDED_BY(mu_);
  // Entries not started, in order (some may be taken from ahead_ already, and waited for): the
  // next batches of the task being made (Priority::kNext), fetched first, then the others.
  std::deque<std::shared_ptr<Entry>> next_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Entry>> queue_ ABSL_GUARDED_BY(mu_);
  // Lists of AheadLater not run yet, in order; and those running.
  std::deque<std::shared_ptr<Later>> later_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Later>> running_later_ ABSL_GUARDED_BY(mu_);
  // Batches taken lately, so that a batch made before its read-ahead was asked is not fetched
  // again; the oldest are forgotten past kRememberTaken.
  absl::flat_hash_set<Key> taken_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> taken_order_ ABSL_GUARDED_BY(mu_);
  // This fetcher's bytes ahead (within budget_, which may be shared).
  uint64_t ahead_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t calls_ ABSL_GUARDED_BY(mu_) = 0;  // Ahead calls and lists so far
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_threads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_IO_RECORD_FETCH_H_
