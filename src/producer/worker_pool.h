// The supervisor of a map job's worker processes in the producer: hands each batch to an idle
// worker over its channel (worker_channel.h), replaces a worker that dies, makes its batch again,
// and says when a batch fails instead and when replacing stops. A RecordsSupply whose function is
// Make: a batch touches Python only inside the worker process.
//
// The processes themselves are its owner's (python/croupier/map/zygote.py: a zygote forks the
// workers); the pool asks for one through `spawn` and reaps a dead one through `bury`, on the rare
// paths of a death only.
//
// A worker that dies (its channel closes: OOM-killed, a crash in a decoder, a signal) is replaced
// by a new one, which makes the batch again. So is a worker stuck on a batch (no answer within
// Options::batch_timeout: a loop, a deadlock, a read that never returns), which is killed first
// and then counts as a death. If the replacement dies making it too, the batch fails
// with an error naming both deaths and that it was tried twice, and the dead worker is replaced
// again: the pool stays at its size. Such a batch is remembered: asked for again, it fails at once
// with the same error, without killing more workers. Replacing stops for good once more than
// max_deaths workers have died within `window`, or once a replacement cannot be made (spawn
// fails): from then on a dead worker is not replaced, the batch it was making fails naming the
// reason, and once no worker is left every batch fails so, as UNAVAILABLE: the producer's trouble,
// not the batch's (Broken() says why).
#ifndef CROUPIER_SRC_PRODUCER_WORKER_POOL_H_
#define CROUPIER_SRC_PRODUCER_WORKER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "src/producer/worker_channel.h"

namespace croupier {

// Thread-safe: Make is called by the producer's threads, one batch per idle worker at a time.
class WorkerPool {
 public:
  // A new worker process: its pid and this side of its channel (the pool owns the descriptor).
  struct Started {
    int pid = 0;
    int fd = -1;
  };
  struct Options {
    size_t workers = 1;
    // Replacing stops once more than max_deaths workers died within `window`.
    size_t max_deaths = 10;
    absl::Duration window = absl::Seconds(60);
    size_t max_idle_slots = 4;  // per worker (BatchSlots)
    // A worker that has not answered a batch within this time is killed (`kill`) and replaced.
    absl::Duration batch_timeout = absl::InfiniteDuration();
    // Starts worker `index` (its place in the pool). An error says why none can be made (the
    // zygote is gone, a fork failed): replacing stops for good, its message the reason.
    std::function<absl::StatusOr<Started>(size_t index)> spawn;
    // Reaps dead worker `pid`: how it ended, in words ("killed by signal 9").
    std::function<std::string(int pid)> bury;
    // Kills stuck worker `pid` (bury reaps it then). Default: SIGKILL.
    std::function<void(int pid)> kill;
    // Told one line for each death, what the pool did about it (the producer logs it).
    std::function<void(const std::string& line)> on_death;
    // Why the workers are gone although the pool has not seen them die (their parent, the
    // zygote, exited), or empty: asked by Broken().
    std::function<std::string()> gone;
  };

  // Starts options.workers workers. The first spawn error is returned (those started are closed).
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(Options options);
  ~WorkerPool();  // Close()

  // Batch `batch` of `epoch`, of records `ids`: its bytes in a worker's slot; the worker's error;
  // INTERNAL for a batch that killed two workers (then at once, "not tried again"); UNAVAILABLE
  // once no worker is left to make it.
  absl::StatusOr<Batch> Make(uint64_t epoch, uint64_t batch, absl::Span<const uint64_t> ids);

  // Why the pool can make no batch any more (no worker is left and none will be replaced, or
  // `gone` says why), or nullopt while it can, and once it is closed.
  std::optional<std::string> Broken();
  // The live workers' pids, in order.
  std::vector<int> pids() const;
  // Closes every worker's channel (a live worker exits when it reads its end) and their slots
  // (those batches still hold are freed with them); a Make in progress ends UNAVAILABLE. Does not
  // wait for the processes: their owner reaps them. Idempotent.
  void Close();

 private:
  struct Worker {
    size_t index = 0;
    std::unique_ptr<WorkerChannel> channel;
  };
  explicit WorkerPool(Options options) : options_(std::move(options)) {}
  absl::StatusOr<std::shared_ptr<Worker>> Spawn(size_t index);
  // An idle worker, waiting for one; nullptr once none is left.
  std::shared_ptr<Worker> Take();
  void GiveBack(const std::shared_ptr<Worker>& worker);
  // Reaps a dead worker, closes its channel and counts its death; how it died, in words.
  std::string Bury(const std::shared_ptr<Worker>& worker);
  // A new worker in place of a buried one, or nullptr if replacing has stopped.
  std::shared_ptr<Worker> Replace(size_t index);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::shared_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);  // alive
  std::deque<std::shared_ptr<Worker>> idle_ ABSL_GUARDED_BY(mu_);  // first in, first out
  size_t replacing_ ABSL_GUARDED_BY(mu_) = 0;  // dead workers being replaced now
  std::deque<absl::Time> deaths_ ABSL_GUARDED_BY(mu_);  // within the window
  // (epoch, batch): the error of a batch that killed two workers.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, std::string> poisoned_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> stopped_ ABSL_GUARDED_BY(mu_);  // why nothing is replaced any more
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_WORKER_POOL_H_
