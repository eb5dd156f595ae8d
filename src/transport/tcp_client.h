// The TCP data client: a small pool of ClientConnections to one data server.
#ifndef CROUPIER_SRC_TRANSPORT_TCP_CLIENT_H_
#define CROUPIER_SRC_TRANSPORT_TCP_CLIENT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/transport/frame.h"
#include "src/transport/socket.h"
#include "src/transport/tcp_client_connection.h"
#include "src/transport/transport.h"

namespace croupier {

// Thread-safe. Each call takes an idle connection, or opens one while fewer than
// max_connections are open, or waits for one to come back; a connection whose call failed in a
// way that may leave it out of step is closed instead of coming back.
class TcpDataClient final : public DataClient {
 public:
  // Opens the first connection at once so that a bad address, token or version fails here.
  static absl::StatusOr<std::unique_ptr<DataClient>> Connect(const std::string& address,
                                                             const DataClientOptions& options);
  ~TcpDataClient() override;

  absl::StatusOr<Batch> Fetch(const BatchKey& key, absl::Time deadline) override;
  absl::StatusOr<std::pair<uint64_t, Batch>> FetchAny(absl::string_view job, uint64_t epoch,
                                                      absl::Time deadline) override;
  void FetchBatches(absl::string_view job, uint64_t epoch, absl::Span<const uint64_t> batches,
                    absl::Time deadline,
                    absl::FunctionRef<void(size_t, absl::StatusOr<Batch>)> on_batch) override;
  void Cancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void Retire() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  TcpDataClient(const std::string& address, const DataClientOptions& options,
                std::unique_ptr<net::WakeEvent> cancel, std::shared_ptr<const net::TlsContext> tls);

  absl::StatusOr<std::pair<uint64_t, Batch>> Call(const frame::Request& request,
                                                  absl::Time deadline);
  // A connection for one call, by `deadline`.
  absl::StatusOr<std::unique_ptr<ClientConnection>> Acquire(absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Returns a connection to the pool, or closes it when it is not reusable.
  void Release(std::unique_ptr<ClientConnection> connection) ABSL_LOCKS_EXCLUDED(mu_);
  // Closes a connection that counted as open.
  void Discard(std::unique_ptr<ClientConnection> connection) ABSL_LOCKS_EXCLUDED(mu_);
  // INVALID_ARGUMENT when `job` is too long for a request frame.
  absl::Status CheckJob(absl::string_view job) const;
  absl::Status CancelledError() const;

  // Constant after construction.
  const std::string address_;
  const DataClientOptions options_;
  const std::unique_ptr<net::WakeEvent> cancel_;      // fired by Cancel; every wait polls it
  const std::shared_ptr<const net::TlsContext> tls_;  // null: plaintext

  absl::Mutex mu_;
  std::vector<std::unique_ptr<ClientConnection>> idle_ ABSL_GUARDED_BY(mu_);
  size_t open_ ABSL_GUARDED_BY(mu_) = 0;  // idle, in use, or being opened
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;  // Release closes instead of pooling
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_CLIENT_H_
