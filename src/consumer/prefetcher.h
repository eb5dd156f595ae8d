// The consumer's prefetch window: worker threads fetch the next steps ahead of the trainer,
// bounded in batches and in bytes, and hand them over in step order. Small batches go in groups:
// one worker fetches several consecutive slots in one call (the transport pipelines them on one
// connection), so that a group costs one round trip instead of one per batch. Each batch of a
// group is handed over as soon as it lands, never held for the rest of its group: when the
// producers are slower than the trainer, a rank takes every batch the moment it is made (a
// group held whole made a rank wait for its whole window). A caller that finds nothing ready
// and nothing in flight fetches the next group itself, rather than wake a worker and wait for
// it, but only while groups are known to come back quickly (kInlineGroupFetch): on its own
// thread it could take none of the group's batches before the last one came.
#ifndef CROUPIER_SRC_CONSUMER_PREFETCHER_H_
#define CROUPIER_SRC_CONSUMER_PREFETCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "croupier/batch.h"

namespace croupier {

// Fetches one item. Dealt mode: `slot` is the step. first_come: slot numbers only order the
// requests; the function returns OUT_OF_RANGE once the epoch has nothing more to give.
using FetchFn = std::function<absl::StatusOr<Batch>(uint64_t slot)>;
// Hands over the result of slot `first + k` of a group fetch.
using LandFn = std::function<void(uint32_t k, absl::StatusOr<Batch> result)>;
// Fetches `count` consecutive slots from `first` (dealt mode), calling `land` once for each
// result as soon as it has it (on the calling thread, in any order; a second call for the same k
// is ignored). A slot not landed by the return, or landed UNAVAILABLE, is not an error: the
// Prefetcher fetches it again, alone, with the FetchFn, when the caller reaches it (the group's
// other batches are handed over meanwhile).
using FetchGroupFn = std::function<void(uint64_t first, uint32_t count, const LandFn& land)>;

// Thread-safe. Destruction cancels, waits for a Next() in progress on another thread to return
// (CANCELLED, or with the group it was fetching itself), and joins the workers.
class Prefetcher {
 public:
  // The automatic window (Options::max_batches 0): kAutoBatches batches, with as many workers;
  // once the batches received are small enough to go in groups, as many as hold about
  // kAutoGroupedBytes, within [kAutoBatches, kAutoMaxBatches]. A window of 4 costs a 4 KiB
  // batch most of a round trip each; 64 of them hold 256 KiB.
  static constexpr uint32_t kAutoBatches = 4;
  static constexpr uint32_t kAutoMaxBatches = 64;
  static constexpr uint64_t kAutoGroupedBytes = uint64_t{1} << 20;
  // A caller with nothing to take fetches the next group on its own thread only while a group
  // fetch takes at most this long (a moving average): the longest it may then wait beyond its
  // first batch.
  static constexpr absl::Duration kInlineGroupFetch = absl::Milliseconds(2);
  // A batch that lands in a group fetch under way for at least this long wakes a waiting caller
  // at once; one that lands sooner waits for the group's end or for the caller's next look, at
  // most this long later (a caller waits at most this long at a time while a group is in
  // flight). So fast groups cost the caller one wake-up each, not one per batch (measured: a
  // wake-up per batch cut 4 KiB batches from about 330,000 to 240,000 a second), and slow ones
  // hand each batch over within this time of its landing.
  static constexpr absl::Duration kPromptLanding = absl::Milliseconds(1);

  struct Options {
    uint64_t first = 0;  // the first slot
    uint64_t end = 0;    // one past the last slot; UINT64_MAX for first_come
    // 0: automatic (AutoWindow): kAutoBatches, more for small batches.
    uint32_t max_batches = 0;
    uint64_t max_bytes = uint64_t{256} << 20;
    // first_come: results are handed out in arrival order, and the first OUT_OF_RANGE of every
    // worker ends the stream.
    bool any_order = false;
    // Batches up to this size go in groups when a FetchGroupFn is given: a worker issues once at
    // least half the window is free and takes every free slot. Larger ones go one by one.
    uint64_t group_below_bytes = uint64_t{256} << 10;
  };
  // `fetch_group` (dealt mode only; may be null) fetches groups of small batches.
  Prefetcher(Options options, FetchFn fetch, FetchGroupFn fetch_group = nullptr);
  ~Prefetcher();

  // The next item: in slot order (dealt) or arrival order (first_come); nullopt at the end. An
  // error ends the stream: every later call returns it too.
  absl::StatusOr<std::optional<Batch>> Next();
  // The slot of the next item Next() returns (dealt).
  uint64_t next_slot() const;
  // Stops the workers; blocked calls return CANCELLED.
  void Cancel();

 private:
  void Work();
  bool CanIssue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many slots the next fetch takes: 1, or a group (see Options::group_below_bytes); 0 when
  // a group should wait for more of the window to free up.
  uint32_t IssueCount() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeAWorkerIfUseful() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether fetches go in groups: a FetchGroupFn, and the last batch received was small.
  bool Grouping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The window in batches now: Options::max_batches, or the automatic one.
  uint64_t Window() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Next() with nothing to take and nothing in flight: the caller fetches the free window as one
  // group on its own thread (mu_ released meanwhile).
  void FetchInline() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fetches a deferred slot with fetch_ on the caller's thread (mu_ released meanwhile).
  absl::StatusOr<Batch> FetchDeferred(uint64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fetches [first, first + count) with fetch_group_ (mu_ released meanwhile, taken again to
  // land each result), counted in flight until each one lands; the slots not landed are
  // deferred.
  void FetchGroup(uint64_t first, uint32_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files one result: into ready_, or deferred_ if UNAVAILABLE; wakes the caller if it is the
  // slot it waits for.
  // `prompt`: wake it at once (see kPromptLanding).
  void Land(uint64_t slot, absl::StatusOr<Batch> result, bool prompt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a caller with nothing to take should fetch the next group itself (FetchInline).
  bool FetchInlineNow() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grouping: whether a worker should fetch ahead now (see the .cc), from the caller's pace and
  // the groups' round trips.
  bool WorthPrefetching() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteFetch(absl::Duration took) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const FetchFn fetch_;
  const FetchGroupFn fetch_group_;
  mutable absl::Mutex mu_;
  // The caller waits on `changed_` (signalled when a result lands or the stream ends); the workers
  // on `can_issue_`, woken one at a time when a fetch can start (each wakes the next while room
  // is left), and all at once when they must stop.
  absl::CondVar changed_;
  absl::CondVar can_issue_;
  uint64_t next_issue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_take_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // size of the last batch received; 0: none yet
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t groups_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t workers_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, absl::StatusOr<Batch>> ready_ ABSL_GUARDED_BY(mu_);
  // Slots a group fetch left UNAVAILABLE: Next() fetches each with fetch_ when it reaches it.
  // They count in the window, at no bytes.
  std::set<uint64_t> deferred_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  // Moving averages: the caller's time between Next calls, and a group fetch's duration.
  double step_ns_ ABSL_GUARDED_BY(mu_) = 0;
  double fetch_ns_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_return_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int callers_ ABSL_GUARDED_BY(mu_) = 0;  // threads inside Next(); the destructor waits for them
  std::vector<std::thread> workers_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONSUMER_PREFETCHER_H_
