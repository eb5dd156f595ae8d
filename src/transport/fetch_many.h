// DataClient::FetchBatches for the clients whose connections pipeline requests (TCP, with or
// without TLS, and shared memory): one implementation over their connection type.
#ifndef CROUPIER_SRC_TRANSPORT_FETCH_MANY_H_
#define CROUPIER_SRC_TRANSPORT_FETCH_MANY_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "src/transport/frame.h"
#include "src/transport/client_connection.h"

namespace croupier {

// Fetches `batches` of (job, epoch) from the server at `address` with GET_BATCH requests
// pipelined on one connection, at most kMaxPipelinedRequests per call (longer lists take several
// calls, each on a connection from `acquire` given back to `release`). Hands each batch, or its
// own error, to `on_batch(i, ...)` exactly once, in order. `job_status` is the client's check of
// the job name: when not OK every batch gets it. When a connection fails, the batches not yet
// answered get that error; a cancelled call gives `cancelled()` (the client's CANCELLED).
// An answer for another batch than the one asked for is DATA_LOSS naming the server.
template <typename Connection>
void FetchPipelined(
    absl::string_view address, const absl::Status& job_status, absl::string_view job,
    uint64_t epoch, absl::Span<const uint64_t> batches, absl::Time deadline,
    absl::FunctionRef<absl::StatusOr<std::unique_ptr<Connection>>(absl::Time)> acquire,
    absl::FunctionRef<void(std::unique_ptr<Connection>)> release,
    absl::FunctionRef<absl::Status()> cancelled,
    absl::FunctionRef<void(size_t, absl::StatusOr<Batch>)> on_batch) {
  size_t done = 0;
  auto fail_rest = [&](const absl::Status& status) {
    for (; done < batches.size(); ++done) on_batch(done, status);
  };
  if (!job_status.ok()) return fail_rest(job_status);
  std::vector<frame::Request> requests;
  while (done < batches.size()) {
    const size_t n = std::min(kMaxPipelinedRequests, batches.size() - done);
    requests.clear();
    for (size_t i = 0; i < n; ++i) {
      requests.push_back(frame::Request{.type = frame::FrameType::kGetBatch,
                                        .job = std::string(job),
                                        .epoch = epoch,
                                        .batch = batches[done + i]});
    }
    absl::StatusOr<std::unique_ptr<Connection>> connection = acquire(deadline + kResponseGrace);
    if (!connection.ok()) return fail_rest(connection.status());
    size_t answered = 0;
    const absl::Status status = (*connection)->CallMany(
        requests, deadline, [&](size_t i, Answer answer) {
          ++answered;
          const uint64_t wanted = batches[done + i];
          if (!answer.ok()) {
            on_batch(done + i, absl::IsCancelled(answer.status()) ? cancelled() : answer.status());
          } else if (answer->first != wanted) {
            on_batch(done + i, absl::DataLossError(absl::StrCat(
                                   "data server ", address, " answered batch ", answer->first,
                                   " to a request for batch ", wanted)));
          } else {
            on_batch(done + i, std::move(answer->second));
          }
        });
    release(*std::move(connection));
    done += answered;
    if (answered < n) return fail_rest(absl::IsCancelled(status) ? cancelled() : status);
  }
}

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_FETCH_MANY_H_
