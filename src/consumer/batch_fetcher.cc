#include "src/consumer/batch_fetcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/retry.h"
#include "src/common/status_macros.h"
#include "src/control/call_deadline.h"

namespace croupier {
namespace {

// How long one fetch attempt may wait for a producer before the consumer asks the dispatcher
// again where the batch is.
constexpr absl::Duration kAttemptTimeout = absl::Seconds(5);
// first_come: how long one attempt waits on one producer before trying the others.
constexpr absl::Duration kAnyAttemptTimeout = absl::Milliseconds(200);

bool Final(const absl::Status& s) {
  return absl::IsUnauthenticated(s) || absl::IsFailedPrecondition(s);
}

}  // namespace

absl::StatusOr<DataClient*> BatchFetcher::ClientFor(const std::string& address) {
  absl::StatusOr<DataClient*> client = peers_->Client(address);
  if (client.ok()) return client;
  peers_->Forget(address);
  if (Final(client.status())) return client.status();
  return absl::UnavailableError(client.status().message());
}

void BatchFetcher::FetchSteps(uint64_t epoch, uint64_t first, uint32_t count,
                              absl::FunctionRef<void(uint32_t, absl::StatusOr<Batch>)> land) {
  const absl::Time deadline = absl::Now() + timeout_;
  const CallDeadline bounded(deadline);
  std::vector<uint64_t> globals(count);
  for (uint32_t i = 0; i < count; ++i) globals[i] = job_.GlobalBatch(epoch, first + i, rank_);
  uint32_t i = 0;
  while (i < count && !closed()) {
    absl::StatusOr<std::string> address = peers_->Locate(epoch, globals[i], /*refresh=*/false);
    if (!address.ok()) {
      ++i;  // FetchStep asks the dispatcher
      continue;
    }
    uint32_t end = i + 1;
    while (end < count && peers_->Cached(epoch, globals[end]) == *address) ++end;
    absl::StatusOr<DataClient*> client = peers_->Client(*address);
    if (client.ok()) {
      (*client)->FetchBatches(job_.name, epoch, absl::MakeConstSpan(globals).subspan(i, end - i),
                              std::min(deadline, absl::Now() + kAttemptTimeout),
                              [&](size_t k, absl::StatusOr<Batch> batch) {
                                if (batch.ok()) land(static_cast<uint32_t>(i + k), std::move(batch));
                              });
    }
    i = end;
  }
}

absl::StatusOr<Batch> BatchFetcher::FetchStep(uint64_t epoch, uint64_t step, absl::Time deadline) {
  const uint64_t g = job_.GlobalBatch(epoch, step, rank_);
  const BatchKey key{job_.name, epoch, g};
  absl::StatusOr<Batch> result = absl::UnavailableError("not fetched");
  std::string where = "no producer";
  const CallDeadline bounded(deadline);  // a question to the dispatcher ends by it too
  absl::Status status = RetryWithBackoff(
      absl::StrCat("job '", job_.name, "' epoch ", epoch, " step ", step, " (global batch ", g,
                   ")"),
      deadline,
      [&](int attempt) -> absl::Status {
        if (closed()) return absl::CancelledError("the consumer is closed");
        ASSIGN_OR_RETURN(std::string address, peers_->Locate(epoch, g, /*refresh=*/attempt > 0));
        where = address;
        ASSIGN_OR_RETURN(DataClient * client, ClientFor(address));
        result = client->Fetch(key, std::min(deadline, absl::Now() + kAttemptTimeout));
        if (result.ok()) return absl::OkStatus();
        // The producer no longer holds the batch, or went away: ask the dispatcher again.
        if (absl::IsNotFound(result.status()) || absl::IsUnavailable(result.status())) {
          peers_->Forget(address);
          return absl::UnavailableError(result.status().message());
        }
        return result.status();
      },
      RetryOptions{.initial_backoff = absl::Milliseconds(2),
                   .max_backoff = absl::Milliseconds(50),
                   // A rank that waits says what for within seconds, not only at its deadline.
                   .still_waiting = [&](absl::Duration waited, const absl::Status& last) {
                     Log(LogLevel::kWarning, "consumer",
                         absl::StrCat("job '", job_.name, "' rank ", rank_, " epoch ", epoch,
                                      " step ", step, ": waiting ",
                                      absl::FormatDuration(absl::Trunc(waited, absl::Seconds(1))),
                                      " so far for global batch ", g, " (", last.message(),
                                      "); gives up at its deadline, ",
                                      absl::FormatDuration(timeout_), " after the step began"));
                   }});
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " [last producer: ", where, "]"));
  }
  return result;
}

absl::StatusOr<Batch> BatchFetcher::FetchAny(uint64_t epoch) {
  const absl::Time deadline = absl::Now() + timeout_;
  const CallDeadline bounded(deadline);
  while (!closed()) {
    ASSIGN_OR_RETURN(auto located, peers_->LocateEpoch(epoch, job_.batches_per_epoch));
    auto& [addresses, finished] = located;
    if (finished) return absl::OutOfRangeError("the epoch is finished");
    for (const std::string& address : addresses) {
      absl::StatusOr<DataClient*> client = ClientFor(address);
      if (!client.ok()) {
        if (Final(client.status())) return client.status();
        continue;
      }
      auto got = (*client)->FetchAny(job_.name, epoch,
                                     std::min(deadline, absl::Now() + kAnyAttemptTimeout));
      if (got.ok()) return std::move(got->second);
      if (absl::IsUnavailable(got.status())) peers_->Forget(address);
      if (!absl::IsOutOfRange(got.status()) && !absl::IsDeadlineExceeded(got.status()) &&
          !absl::IsUnavailable(got.status()) && !absl::IsNotFound(got.status())) {
        return got.status();
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("job '", job_.name, "' epoch ", epoch,
                                                      ": no batch from any producer within ",
                                                      absl::FormatDuration(timeout_)));
    }
    if (addresses.empty()) closed_->WaitForNotificationWithTimeout(absl::Milliseconds(50));
  }
  return absl::CancelledError("the consumer is closed");
}

}  // namespace croupier
