// A job's batch maker, opened off the thread that is given the job's first task.
//
// A producer is given tasks on its heartbeat thread, which must never wait on a file or a store
// (batch_maker.h). Opening a files job does both: a TFRecord job's maker indexes every file (for
// an object, a HEAD and the GET of its shared index; a whole scan the first time), a tokens job's
// maps every source. With thousands of objects at tens of milliseconds each, the heartbeats would
// stop for minutes, and the dispatcher would take the producer for dead and deal its tasks again.
//
// OpeningMaker answers at once with what the plan alone decides (the batches per epoch, the
// compression: BatchMaker's own members), and opens the job's real maker on a thread of its own:
// - Make waits for the opening, then makes the batch with the opened maker; if the opening
//   failed, every batch fails with its error (the file or object named), which reaches the rank
//   that needs the batch, as FailingMaker's does;
// - WillMake and WontMake before the opening ends are kept, and passed on in order once it has;
// - Reusable() turns false when the opening failed, so that the producer opens the job again
//   for its next task (the file may be back) rather than keeping the failure.
#ifndef CROUPIER_SRC_PRODUCER_OPENING_MAKER_H_
#define CROUPIER_SRC_PRODUCER_OPENING_MAKER_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/producer/batch_maker.h"

namespace croupier {

class OpeningMaker final : public BatchMaker {
 public:
  // Checks the job's plan here (errors as FailingMaker's, for a job that cannot even be planned)
  // and starts `open(job)` on a thread of its own. `open` must return a maker of the same job.
  static absl::StatusOr<std::shared_ptr<const OpeningMaker>> Start(const v1::JobInfo& job,
                                                                   MakerFactory open);
  // Waits for the opening to end: it is bounded by the reads' own timeouts.
  ~OpeningMaker() override;

  // The opening's result: OK once the job's maker is open, its error once it failed; UNAVAILABLE
  // while it still runs at `deadline`.
  absl::Status WaitOpened(absl::Time deadline) const;

  bool Reusable() const override;
  void WillMake(const v1::Task& task) const override;
  void WontMake(const v1::Task& task) const override;

 protected:
  absl::StatusOr<Batch> MakeRecords(uint64_t epoch, uint64_t batch,
                                    absl::Span<const uint64_t> ids) const override;

 private:
  OpeningMaker(v1::JobInfo job, JobConfig config);
  void Open(const MakerFactory& open);

  // A WillMake (true) or WontMake (false) heard before the opening ended.
  struct Told {
    bool will;
    v1::Task task;
  };

  mutable absl::Mutex mu_;
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // Set once, before opened_; read without the lock after opened_ was seen.
  std::shared_ptr<const BatchMaker> maker_;
  mutable std::vector<Told> told_ ABSL_GUARDED_BY(mu_);
  std::thread opening_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_OPENING_MAKER_H_
