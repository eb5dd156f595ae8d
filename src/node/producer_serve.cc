// ProducerNode::Serve: the life of a producer of one job once it has started (producer_node.h).
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/node/producer_node.h"

namespace croupier {

absl::StatusOr<Served> ProducerNode::Serve(const ServeOptions& options) {
  if (source_job_.empty()) {
    return absl::FailedPreconditionError(
        "Serve() is for a producer of one job (a records, tokens or stream supply); a producer of "
        "every TFRecord job has no job of its own to end");
  }
  const StreamSupply* stream = std::get_if<StreamSupply>(&options_.supply);
  const BatchFeed* feed = stream != nullptr && stream->feed ? &stream->feed : nullptr;
  Served served;
  auto batches_served = [&] {
    return sequential_ != nullptr ? sequential_->stats().batches_served
                                  : holder_->Report().batches_served();
  };
  // Every way out leaves the job: its unfinished tasks go to the other producers at once.
  auto leave = [&](absl::Status status) -> absl::StatusOr<Served> {
    served.batches_served = batches_served();
    Leave();
    if (!status.ok()) return status;
    return served;
  };
  // The first error of a stream whose source ran out early, and when it came.
  std::optional<std::pair<absl::Time, absl::Status>> ended_early;
  // The owner and the dispatcher's silence are looked at once a poll, not once a batch fed.
  absl::Time next_check = absl::InfinitePast();
  while (true) {
    // Left or shut down from another thread (the owner's close, a test's kill): nothing to serve.
    if (stop_.HasBeenNotified()) return leave(absl::OkStatus());
    if (const absl::Time now = absl::Now(); now >= next_check) {
      next_check = now + options.poll;
      const OwnerSays says = options.owner ? options.owner() : OwnerSays::kServe;
      if (says == OwnerSays::kLeave) return leave(absl::OkStatus());
      if (says == OwnerSays::kDrain) {
        const Drained drained = Drain(options.drain_timeout, options.leave_now);
        served.drained = true;
        served.kept = drained.kept;
        served.served = drained.served;
        served.batches_served = batches_served();
        return served;  // Drain has left the job
      }
      if (const absl::Duration silent = SinceDispatcherContact();
          silent > options.dispatcher_timeout) {
        served.batches_served = batches_served();
        Shutdown();  // a dispatcher that does not answer would only make a last word wait
        return absl::UnavailableError(absl::StrCat(
            "the dispatcher at ", options_.dispatcher, " has not answered the producer of job '",
            source_job_, "' for ", absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1))),
            " (its timeout is ", absl::FormatDuration(options.dispatcher_timeout), "), after ",
            served.batches_served, " batches served"));
      }
    }
    if (ended_early && absl::Now() - ended_early->first > options.early_end_grace) {
      return leave(ended_early->second);
    }
    if (job_ended()) {
      served.job_ended = true;
      return leave(ended_early ? ended_early->second : absl::OkStatus());
    }
    if (feed == nullptr) {
      WaitForJobEnd(options.poll);
      continue;
    }
    absl::StatusOr<BatchKey> slot = sequential_->NextSlot(absl::Now() + options.poll);
    if (absl::IsDeadlineExceeded(slot.status())) continue;
    if (!slot.ok()) return leave(stop_.HasBeenNotified() ? absl::OkStatus() : slot.status());
    absl::StatusOr<Batch> batch = (*feed)(slot->epoch, slot->batch);
    if (absl::IsOutOfRange(batch.status()) && !ended_early) {
      ended_early.emplace(absl::Now(), batch.status());
    }
    if (absl::Status put = sequential_->Put(*slot, std::move(batch)); !put.ok()) {
      return leave(put);
    }
  }
}

}  // namespace croupier
