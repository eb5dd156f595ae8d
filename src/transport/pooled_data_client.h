// The DataClient of every transport: requests over a ConnectionPool of one kind of connection
// (TCP with or without TLS, shared memory), written once over the connection type.
#ifndef CROUPIER_SRC_TRANSPORT_POOLED_DATA_CLIENT_H_
#define CROUPIER_SRC_TRANSPORT_POOLED_DATA_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "src/common/status_macros.h"
#include "src/net/socket.h"
#include "src/transport/client_connection.h"
#include "src/transport/connection_pool.h"
#include "src/transport/fetch_many.h"
#include "src/transport/frame.h"
#include "src/transport/transport.h"

namespace croupier {

// INVALID_ARGUMENT for options no client can work with (no connection allowed, a token too long
// for the HELLO frame).
inline absl::Status CheckDataClientOptions(const DataClientOptions& options) {
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("data client max_connections must be at least 1");
  }
  if (options.auth_token.size() > frame::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token longer than ", frame::kMaxTokenBytes, " bytes"));
  }
  return absl::OkStatus();
}

// Thread-safe. Each call takes a connection from the pool (connection_pool.h) for its whole
// exchange and gives it back. `Connection` is a ClientConnection (client_connection.h) or offers
// the same Call, CallMany, reusable and Stale.
template <typename Connection>
class PooledDataClient final : public DataClient {
 public:
  using Opener = typename ConnectionPool<Connection>::Opener;

  // Checks the options (CheckDataClientOptions), then opens a first connection with `open` so that
  // a bad address, token or version fails here, with the opener's error.
  static absl::StatusOr<std::unique_ptr<DataClient>> Connect(const std::string& address,
                                                             const DataClientOptions& options,
                                                             Opener open) {
    RETURN_IF_ERROR(CheckDataClientOptions(options));
    ASSIGN_OR_RETURN(std::unique_ptr<net::WakeEvent> cancel, net::WakeEvent::Create());
    std::unique_ptr<PooledDataClient> client(
        new PooledDataClient(address, options, std::move(cancel), std::move(open)));
    RETURN_IF_ERROR(client->pool_.OpenFirst());
    return client;
  }

  absl::StatusOr<Batch> Fetch(const BatchKey& key, absl::Time deadline) override {
    RETURN_IF_ERROR(CheckJob(key.job));
    ASSIGN_OR_RETURN(auto answer, Call(frame::Request{.type = frame::FrameType::kGetBatch,
                                                      .job = key.job,
                                                      .epoch = key.epoch,
                                                      .batch = key.batch},
                                       deadline));
    if (answer.first != key.batch) {
      return absl::DataLossError(absl::StrCat("data server ", pool_.address(), " answered batch ",
                                              answer.first, " to a request for batch ", key.batch));
    }
    return std::move(answer.second);
  }

  absl::StatusOr<std::pair<uint64_t, Batch>> FetchAny(absl::string_view job, uint64_t epoch,
                                                      absl::Time deadline) override {
    RETURN_IF_ERROR(CheckJob(job));
    return Call(
        frame::Request{.type = frame::FrameType::kGetAny, .job = std::string(job), .epoch = epoch},
        deadline);
  }

  void FetchBatches(absl::string_view job, uint64_t epoch, absl::Span<const uint64_t> batches,
                    absl::Time deadline,
                    absl::FunctionRef<void(size_t, absl::StatusOr<Batch>)> on_batch) override {
    FetchPipelined<Connection>(
        pool_.address(), CheckJob(job), job, epoch, batches, deadline,
        [this](absl::Time d) { return pool_.Acquire(d); },
        [this](std::unique_ptr<Connection> c) { pool_.Release(std::move(c)); },
        [this] { return pool_.CancelledError(); }, on_batch);
  }

  void Cancel() override { pool_.Cancel(); }
  void Retire() override { pool_.Retire(); }

 private:
  PooledDataClient(const std::string& address, const DataClientOptions& options,
                   std::unique_ptr<net::WakeEvent> cancel, Opener open)
      : pool_(address, options.max_connections, options.connect_timeout, std::move(cancel),
              std::move(open)) {}

  Answer Call(const frame::Request& request, absl::Time deadline) {
    ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection,
                     pool_.Acquire(deadline + kResponseGrace));
    Answer answer = connection->Call(request, deadline);
    pool_.Release(std::move(connection));
    if (absl::IsCancelled(answer.status())) return pool_.CancelledError();
    return answer;
  }

  // INVALID_ARGUMENT when `job` is too long for a request frame.
  absl::Status CheckJob(absl::string_view job) const {
    if (job.size() <= frame::kMaxJobBytes) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("job name of ", job.size(), " bytes exceeds ",
                                                   frame::kMaxJobBytes, " (request to data server ",
                                                   pool_.address(), ")"));
  }

  ConnectionPool<Connection> pool_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_POOLED_DATA_CLIENT_H_
