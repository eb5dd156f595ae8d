#include "src/transport/tcp_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"
#include "src/transport/fetch_many.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<DataClient>> TcpDataClient::Connect(
    const std::string& address, const DataClientOptions& options) {
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("data client max_connections must be at least 1");
  }
  if (options.auth_token.size() > frame::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token longer than ", frame::kMaxTokenBytes, " bytes"));
  }
  std::shared_ptr<const net::TlsContext> tls;
  if (options.tls.enabled()) {
    ASSIGN_OR_RETURN(tls, net::TlsContext::ForClient(options.tls));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<net::WakeEvent> cancel, net::WakeEvent::Create());
  std::unique_ptr<TcpDataClient> client(
      new TcpDataClient(address, options, std::move(cancel), std::move(tls)));
  ASSIGN_OR_RETURN(
      std::unique_ptr<ClientConnection> first,
      ClientConnection::Open(address, client->options_, absl::Now() + options.connect_timeout,
                             client->cancel_.get(), client->tls_.get()));
  {
    absl::MutexLock lock(&client->mu_);
    client->open_ = 1;
    client->idle_.push_back(std::move(first));
  }
  return client;
}

TcpDataClient::TcpDataClient(const std::string& address, const DataClientOptions& options,
                             std::unique_ptr<net::WakeEvent> cancel,
                             std::shared_ptr<const net::TlsContext> tls)
    : address_(address), options_(options), cancel_(std::move(cancel)), tls_(std::move(tls)) {}

TcpDataClient::~TcpDataClient() { Cancel(); }

absl::StatusOr<Batch> TcpDataClient::Fetch(const BatchKey& key, absl::Time deadline) {
  RETURN_IF_ERROR(CheckJob(key.job));
  ASSIGN_OR_RETURN(auto answer, Call(frame::Request{.type = frame::FrameType::kGetBatch,
                                                    .job = key.job,
                                                    .epoch = key.epoch,
                                                    .batch = key.batch},
                                     deadline));
  if (answer.first != key.batch) {
    return absl::DataLossError(absl::StrCat("data server ", address_, " answered batch ",
                                            answer.first, " to a request for batch ", key.batch));
  }
  return std::move(answer.second);
}

absl::StatusOr<std::pair<uint64_t, Batch>> TcpDataClient::FetchAny(absl::string_view job,
                                                                   uint64_t epoch,
                                                                   absl::Time deadline) {
  RETURN_IF_ERROR(CheckJob(job));
  return Call(
      frame::Request{.type = frame::FrameType::kGetAny, .job = std::string(job), .epoch = epoch},
      deadline);
}

void TcpDataClient::FetchBatches(
    absl::string_view job, uint64_t epoch, absl::Span<const uint64_t> batches, absl::Time deadline,
    absl::FunctionRef<void(size_t, absl::StatusOr<Batch>)> on_batch) {
  FetchPipelined<ClientConnection>(
      address_, CheckJob(job), job, epoch, batches, deadline,
      [this](absl::Time d) { return Acquire(d); },
      [this](std::unique_ptr<ClientConnection> c) { Release(std::move(c)); },
      [this] { return CancelledError(); }, on_batch);
}

void TcpDataClient::Cancel() {
  std::vector<std::unique_ptr<ClientConnection>> idle;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    idle.swap(idle_);
    open_ -= idle.size();
  }
  cancel_->Notify();
  // `idle` closes here, outside the lock.
}

void TcpDataClient::Retire() {
  std::vector<std::unique_ptr<ClientConnection>> idle;
  {
    absl::MutexLock lock(&mu_);
    retired_ = true;
    idle.swap(idle_);
    open_ -= idle.size();
  }
  // `idle` closes here, outside the lock.
}

absl::StatusOr<std::pair<uint64_t, Batch>> TcpDataClient::Call(const frame::Request& request,
                                                               absl::Time deadline) {
  ASSIGN_OR_RETURN(std::unique_ptr<ClientConnection> connection,
                   Acquire(deadline + kResponseGrace));
  absl::StatusOr<std::pair<uint64_t, Batch>> answer = connection->Call(request, deadline);
  Release(std::move(connection));
  if (absl::IsCancelled(answer.status())) return CancelledError();
  return answer;
}

absl::StatusOr<std::unique_ptr<ClientConnection>> TcpDataClient::Acquire(absl::Time deadline) {
  absl::Status last_open_error;
  while (true) {
    std::unique_ptr<ClientConnection> connection;
    {
      absl::MutexLock lock(&mu_);
      // After a failed open, only wait for connections that are already open: opening again at
      // once would just hammer a server that refuses us.
      const bool may_open = last_open_error.ok();
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return cancelled_ || !idle_.empty() || (may_open && open_ < options_.max_connections) ||
               (!may_open && open_ == 0);
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
        if (!last_open_error.ok()) return last_open_error;
        return absl::DeadlineExceededError(absl::StrCat("no free connection to data server ",
                                                        address_, " before the deadline (all ",
                                                        options_.max_connections, " busy)"));
      }
      if (cancelled_) return CancelledError();
      if (!idle_.empty()) {
        connection = std::move(idle_.back());
        idle_.pop_back();
      } else if (!may_open) {
        return last_open_error;  // nothing left open to wait for
      } else {
        ++open_;
      }
    }
    if (connection != nullptr) {
      if (!connection->Stale()) return connection;
      Discard(std::move(connection));
      continue;
    }
    absl::StatusOr<std::unique_ptr<ClientConnection>> opened = ClientConnection::Open(
        address_, options_, std::min(deadline, absl::Now() + options_.connect_timeout),
        cancel_.get(), tls_.get());
    if (opened.ok()) return opened;
    {
      absl::MutexLock lock(&mu_);
      --open_;
    }
    if (absl::IsCancelled(opened.status())) return CancelledError();
    last_open_error = opened.status();
  }
}

void TcpDataClient::Release(std::unique_ptr<ClientConnection> connection) {
  if (!connection->reusable()) {
    Discard(std::move(connection));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (cancelled_ || retired_) {
    --open_;
    return;  // `connection` closes when this returns
  }
  idle_.push_back(std::move(connection));
}

void TcpDataClient::Discard(std::unique_ptr<ClientConnection> connection) {
  connection.reset();
  absl::MutexLock lock(&mu_);
  --open_;
}

absl::Status TcpDataClient::CheckJob(absl::string_view job) const {
  if (job.size() <= frame::kMaxJobBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("job name of ", job.size(), " bytes exceeds ",
                                                 frame::kMaxJobBytes, " (request to data server ",
                                                 address_, ")"));
}

absl::Status TcpDataClient::CancelledError() const {
  return absl::CancelledError(
      absl::StrCat("the data client of data server ", address_, " was cancelled"));
}

}  // namespace croupier
