// The pool of connections a data client keeps to one data server, for every kind of connection
// (TCP with or without TLS, shared memory): written once over the connection type.
#ifndef CROUPIER_SRC_TRANSPORT_CONNECTION_POOL_H_
#define CROUPIER_SRC_TRANSPORT_CONNECTION_POOL_H_

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/net/socket.h"

namespace croupier {

// Up to `max_connections` connections to the data server at `address`, each used by one call at
// a time. Acquire hands out an idle connection, or opens one while fewer than max_connections
// are open, or waits for one to come back; Release takes it back, or closes it when it is not
// reusable (its call may have left it out of step). Thread-safe.
//
// `Connection` must offer `bool reusable() const` (false once a call has failed in a way that
// may leave the byte stream out of step) and `bool Stale()` (true when it cannot serve another
// call: not reusable, or the server has closed it or sent something unasked).
template <typename Connection>
class ConnectionPool {
 public:
  // Opens and handshakes one connection by `deadline`; CANCELLED when `cancel` fires. Called
  // without the pool's lock, from the thread that needs the connection.
  using Opener = std::function<absl::StatusOr<std::unique_ptr<Connection>>(
      absl::Time deadline, const net::WakeEvent* cancel)>;

  ConnectionPool(std::string address, size_t max_connections, absl::Duration connect_timeout,
                 std::unique_ptr<net::WakeEvent> cancel, Opener open)
      : address_(std::move(address)),
        max_connections_(max_connections),
        connect_timeout_(connect_timeout),
        cancel_(std::move(cancel)),
        open_connection_(std::move(open)) {}
  ~ConnectionPool() { Cancel(); }
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Opens a first connection at once and keeps it idle, so that a bad address, token or
  // protocol version fails here; its error as the opener returns it.
  absl::Status OpenFirst() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::StatusOr<std::unique_ptr<Connection>> first =
        open_connection_(absl::Now() + connect_timeout_, cancel_.get());
    if (!first.ok()) return first.status();
    absl::MutexLock lock(&mu_);
    ++open_;
    idle_.push_back(*std::move(first));
    return absl::OkStatus();
  }

  // A connection for one call, by `deadline`. DEADLINE_EXCEEDED when every connection stayed
  // busy; after a failed open, that open's error (the pool does not hammer a server that refuses
  // it); CancelledError() once Cancel was called.
  absl::StatusOr<std::unique_ptr<Connection>> Acquire(absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Status last_open_error;
    while (true) {
      std::unique_ptr<Connection> connection;
      {
        absl::MutexLock lock(&mu_);
        // After a failed open, only wait for connections that are already open: opening again
        // at once would just hammer a server that refuses us.
        const bool may_open = last_open_error.ok();
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return cancelled_ || !idle_.empty() || (may_open && open_ < max_connections_) ||
                 (!may_open && open_ == 0);
        };
        if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
          if (!last_open_error.ok()) return last_open_error;
          return absl::DeadlineExceededError(absl::StrCat("no free connection to data server ",
                                                          address_, " before the deadline (all ",
                                                          max_connections_, " busy)"));
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
      absl::StatusOr<std::unique_ptr<Connection>> opened =
          open_connection_(std::min(deadline, absl::Now() + connect_timeout_), cancel_.get());
      if (opened.ok()) return opened;
      {
        absl::MutexLock lock(&mu_);
        --open_;
      }
      if (absl::IsCancelled(opened.status())) return CancelledError();
      last_open_error = opened.status();
    }
  }

  // Takes back a connection Acquire handed out: pooled when reusable and the pool is neither
  // cancelled nor retired, else closed (outside the lock).
  void Release(std::unique_ptr<Connection> connection) ABSL_LOCKS_EXCLUDED(mu_) {
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

  // Wakes every blocked call (their waits poll the cancel event) and closes the idle
  // connections; later Acquires fail CancelledError(). Idempotent.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<std::unique_ptr<Connection>> idle = TakeIdle(/*cancel=*/true);
    cancel_->Notify();
    // `idle` closes here, outside the lock.
  }

  // Closes the idle connections now and each busy one when it comes back; Acquire still opens
  // new ones (DataClient::Retire).
  void Retire() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<std::unique_ptr<Connection>> idle = TakeIdle(/*cancel=*/false);
    // `idle` closes here, outside the lock.
  }

  // CANCELLED naming the server: what every call of a cancelled client returns.
  absl::Status CancelledError() const {
    return absl::CancelledError(
        absl::StrCat("the data client of data server ", address_, " was cancelled"));
  }

  const std::string& address() const { return address_; }

 private:
  // Marks the pool cancelled (or retired) and takes its idle connections.
  std::vector<std::unique_ptr<Connection>> TakeIdle(bool cancel) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<std::unique_ptr<Connection>> idle;
    absl::MutexLock lock(&mu_);
    (cancel ? cancelled_ : retired_) = true;
    idle.swap(idle_);
    open_ -= idle.size();
    return idle;
  }

  // Closes a connection that counted as open.
  void Discard(std::unique_ptr<Connection> connection) ABSL_LOCKS_EXCLUDED(mu_) {
    connection.reset();
    absl::MutexLock lock(&mu_);
    --open_;
  }

  // Constant after construction.
  const std::string address_;
  const size_t max_connections_;
  const absl::Duration connect_timeout_;
  const std::unique_ptr<net::WakeEvent> cancel_;  // fired by Cancel; every wait polls it
  const Opener open_connection_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);
  size_t open_ ABSL_GUARDED_BY(mu_) = 0;  // idle, in use, or being opened
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;  // Release closes instead of pooling
};

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_CONNECTION_POOL_H_
