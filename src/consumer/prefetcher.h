// The consumer's prefetch window: worker threads fetch the next steps ahead of the trainer,
// bounded in batches and in bytes, and hand them over in step order.
#ifndef CROUPIER_SRC_CONSUMER_PREFETCHER_H_
#define CROUPIER_SRC_CONSUMER_PREFETCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "croupier/batch.h"

namespace croupier {

// Fetches one item. Dealt mode: `slot` is the step. first_come: slot numbers only order the
// requests; the function returns OUT_OF_RANGE once the epoch has nothing more to give.
using FetchFn = std::function<absl::StatusOr<Batch>(uint64_t slot)>;

// Thread-safe. Destruction cancels and joins the workers.
class Prefetcher {
 public:
  struct Options {
    uint64_t first = 0;  // the first slot
    uint64_t end = 0;    // one past the last slot; UINT64_MAX for first_come
    uint32_t max_batches = 4;
    uint64_t max_bytes = uint64_t{256} << 20;
    // first_come: results are handed out in arrival order, and the first OUT_OF_RANGE of every
    // worker ends the stream.
    bool any_order = false;
  };
  Prefetcher(Options options, FetchFn fetch);
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

  const Options options_;
  const FetchFn fetch_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every change of the fields below
  uint64_t next_issue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_take_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // size of the last batch received; 0: none yet
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t workers_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, absl::StatusOr<Batch>> ready_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONSUMER_PREFETCHER_H_
