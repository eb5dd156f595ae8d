#include "src/transport/serve_loop.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/transport/frame.h"

namespace croupier {

void RefusalLog::Note(absl::string_view host, absl::string_view peer, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  FlushLocked(/*all=*/false);
  const absl::Time now = now_();
  auto [it, inserted] = kinds_.try_emplace({std::string(host), std::string(reason)});
  Kind& kind = it->second;
  if (inserted) kind.start = now;
  if (kind.logged < kRefusalsLoggedPerInterval) {
    ++kind.logged;
    Log(LogLevel::kWarning, kTransportLog,
        absl::StrCat(name_, " refuses ", peer, ": ", reason,
                     kind.logged == kRefusalsLoggedPerInterval
                         ? absl::StrCat(" (more such refusals are only counted, until ",
                                        absl::FormatDuration(interval_), " after the first)")
                         : ""));
    return;
  }
  ++kind.suppressed;
}

void RefusalLog::Flush(bool all) {
  absl::MutexLock lock(&mu_);
  FlushLocked(all);
}

void RefusalLog::FlushLocked(bool all) {
  const absl::Time now = now_();
  for (auto it = kinds_.begin(); it != kinds_.end();) {
    Kind& kind = it->second;
    if (!all && now - kind.start < interval_) {
      ++it;
      continue;
    }
    if (kind.suppressed > 0) {
      Log(LogLevel::kWarning, kTransportLog,
          absl::StrCat(name_, " refused ", kind.suppressed, " more connections from ",
                       it->first.first, " in the last ", absl::FormatDuration(interval_), ": ",
                       it->first.second));
    }
    kinds_.erase(it++);
  }
}

absl::Status ConnectionSlot::Authenticated() { return loop_->Authenticate(id_); }

void ConnectionSlot::LogRefusal(absl::string_view peer, absl::string_view reason) {
  loop_->refusals_.Note(host_, peer, reason);
}

absl::Status ValidateDataServerOptions(const DataServerOptions& options) {
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("data server max_connections must be at least 1");
  }
  if (options.max_handshakes == 0) {
    return absl::InvalidArgumentError("data server max_handshakes must be at least 1");
  }
  if (options.max_request_bytes < frame::kRequestFixedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("data server max_request_bytes ",
                                                   options.max_request_bytes, " is below ",
                                                   frame::kRequestFixedBytes));
  }
  if (options.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("data server handshake_timeout must be positive");
  }
  if (options.auth_token.size() > frame::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token longer than ", frame::kMaxTokenBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServeLoop>> ServeLoop::Start(net::Socket listener,
                                                            ServeLoopOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<net::WakeEvent> stop, net::WakeEvent::Create());
  std::unique_ptr<ServeLoop> loop(
      new ServeLoop(std::move(listener), std::move(options), std::move(stop)));
  loop->acceptor_ = std::thread([l = loop.get()] { l->AcceptLoop(); });
  return loop;
}

ServeLoop::ServeLoop(net::Socket listener, ServeLoopOptions options,
                     std::unique_ptr<net::WakeEvent> stop)
    : options_(std::move(options)),
      stop_(std::move(stop)),
      refusals_(options_.name),
      listener_(std::move(listener)) {}

ServeLoop::~ServeLoop() { Shutdown(); }

void ServeLoop::Shutdown() {
  absl::call_once(shutdown_once_, [this] {
    stop_->Notify();
    if (acceptor_.joinable()) acceptor_.join();
    listener_.Close();
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, running] : running_) {
        running.wake->Notify();
        threads.push_back(std::move(running.thread));
      }
      running_.clear();
      per_host_.clear();
      handshaking_per_host_.clear();
      handshaking_.clear();
      evicted_ = authenticated_ = 0;
      for (auto& thread : finished_) threads.push_back(std::move(thread));
      finished_.clear();
    }
    // Every connection thread polls its wake event, or returns from its source within
    // kSourceSlice.
    for (std::thread& thread : threads) thread.join();
    Log(LogLevel::kInfo, kTransportLog, absl::StrCat(options_.name, " stopped"));
  });
}

void ServeLoop::AcceptLoop() {
  while (!stop_->notified()) {
    JoinFinished();
    refusals_.Flush();
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {stop_->fd(), POLLIN, 0}};
    // The timeout only bounds how long ended connection threads wait to be joined.
    if (::poll(fds, 2, /*timeout_ms=*/1000) <= 0 || fds[1].revents != 0) continue;
    while (!stop_->notified()) {
      const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        Admit(net::Socket(fd));
        // Under a flood the listener may never run dry: the threads of the connections that
        // ended (evicted ones among them) are joined as they go.
        JoinFinished();
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors or memory: the pending connection stays queued, so back off rather
        // than spin on a listener that stays readable.
        Log(LogLevel::kWarning, kTransportLog,
            absl::StrCat(options_.name, " cannot accept: ", std::strerror(errno)));
        pollfd wake{stop_->fd(), POLLIN, 0};
        ::poll(&wake, 1, /*timeout_ms=*/100);
      }
      break;
    }
  }
}

void ServeLoop::Admit(net::Socket socket) {
  std::string host = options_.admit(socket.fd());
  std::string peer = options_.peer_name(socket.fd());
  std::string refusal;
  // An eviction, logged once the lock is released.
  struct Evicted {
    std::string host, peer, reason;
  };
  std::optional<Evicted> evicted;
  absl::StatusOr<std::unique_ptr<net::WakeEvent>> made = net::WakeEvent::Create();
  if (!made.ok()) {
    refusal = absl::StrCat("the data server cannot take the connection: ", made.status().message());
  } else {
    std::shared_ptr<net::WakeEvent> wake = *std::move(made);
    absl::MutexLock lock(&mu_);
    // A connection proves nothing before its handshake: it counts only against the handshake
    // slots, and takes no slot from the authenticated clients of its host.
    const std::set<uint64_t>& from_host = handshaking_per_host_[host];
    const bool host_full = from_host.size() >= options_.max_handshakes_per_peer;
    const bool full = host_full || handshaking_.size() >= options_.max_handshakes;
    const std::string why =
        !full       ? std::string()
        : host_full ? absl::StrCat("the data server has ", options_.max_handshakes_per_peer,
                                   " connections from ", host, " in their handshake")
                    : absl::StrCat("the data server has ", options_.max_handshakes,
                                   " connections in their handshake");
    if (full && evicted_ >= options_.max_handshakes) {
      // Evicted connections end within moments; so many still ending is the one case left in
      // which a connection is refused, so that threads and descriptors stay bounded.
      refusal = absl::StrCat(why, " already, and ", evicted_, " evicted ones still closing");
      if (from_host.empty()) handshaking_per_host_.erase(host);
    } else {
      if (full) {
        // The oldest in its handshake of this host, or of all: a client that has the token is
        // through its handshake within a round trip or two, a silent one is not.
        const uint64_t victim = host_full ? *from_host.begin() : *handshaking_.begin();
        Running& running = running_.at(victim);
        running.evicted = true;
        running.wake->Notify();
        ++evicted_;
        EndHandshake(victim, running.host);
        evicted =
            Evicted{running.host, running.peer,
                    absl::StrCat("evicted from its handshake for a newer connection (", why, ")")};
      }
      const uint64_t id = next_id_++;
      handshaking_.insert(id);
      handshaking_per_host_[host].insert(id);
      // Started under the lock so that the thread's Finished(id) finds its entry.
      running_.emplace(
          id,
          Running{.thread = std::thread([this, id, host, wake, s = std::move(socket)]() mutable {
                    ConnectionSlot slot(this, id, std::move(host), wake.get());
                    options_.serve(std::move(s), &slot);
                    Finished(id);
                  }),
                  .host = host,
                  .peer = peer,
                  .wake = wake});
    }
  }
  if (evicted.has_value()) refusals_.Note(evicted->host, evicted->peer, evicted->reason);
  if (refusal.empty()) return;
  refusals_.Note(host, peer, refusal);
  // The client reads this in place of its handshake's answer; short waits keep the acceptor
  // responsive.
  if (options_.send_refusal) {
    net::SendAll(socket.fd(), frame::EncodeError(absl::UnavailableError(refusal)),
                 net::IoWait{.deadline = absl::Now() + absl::Milliseconds(20)}, peer)
        .IgnoreError();
  }
  net::CloseGracefully(std::move(socket), absl::Milliseconds(20));
}

absl::Status ServeLoop::Authenticate(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(id);
  if (it == running_.end()) return absl::CancelledError("the data server is stopping");
  Running& running = it->second;
  if (running.authenticated) return absl::OkStatus();
  // Its slot has gone to a newer connection, which may be authenticating in its turn.
  if (running.evicted) return absl::CancelledError("evicted from its handshake slot");
  size_t& from_host = per_host_[running.host];
  if (authenticated_ < options_.max_connections &&
      from_host < options_.max_connections_per_peer) {
    ++from_host;
    ++authenticated_;
    EndHandshake(id, running.host);
    running.authenticated = true;
    return absl::OkStatus();
  }
  if (from_host == 0) per_host_.erase(running.host);
  return absl::UnavailableError(
      authenticated_ >= options_.max_connections
          ? absl::StrCat("the data server is at its limit of ", options_.max_connections,
                         " connections")
          : absl::StrCat("the data server is at its limit of ", options_.max_connections_per_peer,
                         " connections from ", running.host));
}

void ServeLoop::EndHandshake(uint64_t id, const std::string& host) {
  handshaking_.erase(id);
  auto it = handshaking_per_host_.find(host);
  if (it == handshaking_per_host_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) handshaking_per_host_.erase(it);
}

void ServeLoop::JoinFinished() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(finished_);
  }
  for (std::thread& thread : done) thread.join();
}

void ServeLoop::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(id);
  if (it == running_.end()) return;  // Shutdown has taken the thread to join it
  if (it->second.authenticated) {
    --authenticated_;
    auto from_host = per_host_.find(it->second.host);
    if (from_host != per_host_.end() && --from_host->second == 0) per_host_.erase(from_host);
  } else if (it->second.evicted) {
    --evicted_;
  } else {
    EndHandshake(id, it->second.host);
  }
  finished_.push_back(std::move(it->second.thread));
  running_.erase(it);
}

}  // namespace croupier
