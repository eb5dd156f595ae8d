#include "src/rpc/grpc_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace croupier::rpc {
namespace {

constexpr char kComponent[] = "listener";
constexpr absl::Duration kReportEvery = absl::Seconds(10);

int SoftDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcListener>> GrpcListener::Create(
    grpc::ServerBuilder& builder, const std::string& host, int port,
    std::shared_ptr<grpc::ServerCredentials> credentials, GrpcListenerOptions options) {
  std::unique_ptr<GrpcListener> listener(new GrpcListener());
  listener->options_ = std::move(options);
  absl::StatusOr<net::Socket> socket = net::Listen(host, port);
  if (!socket.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the ", listener->options_.name, " ", socket.status().message()));
  }
  listener->listener_ = *std::move(socket);
  listener->port_ = net::LocalPort(listener->listener_.fd());
  absl::StatusOr<std::unique_ptr<net::WakeEvent>> stop = net::WakeEvent::Create();
  if (!stop.ok()) return stop.status();
  listener->stop_ = *std::move(stop);
  listener->spare_ = net::Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  listener->limit_ = SoftDescriptorLimit();
  listener->last_report_ = absl::Now();
  listener->reserve_ = listener->options_.reserve > 0
                           ? listener->options_.reserve
                           : std::max(64, listener->limit_ / 20);
  listener->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      std::move(credentials));
  return listener;
}

GrpcListener::~GrpcListener() { Stop(); }

void GrpcListener::Start() {
  absl::MutexLock lock(&mu_);
  if (stopped_ || thread_.joinable()) return;
  thread_ = std::thread([this] { AcceptLoop(); });
}

void GrpcListener::Stop() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    thread = std::move(thread_);
  }
  if (stop_) stop_->Notify();
  if (thread.joinable()) thread.join();
  Report(/*force=*/true);
  listener_.Close();
  spare_.Close();
}

void GrpcListener::AcceptLoop() {
  while (!stop_->notified()) {
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {stop_->fd(), POLLIN, 0}};
    // The timeout only bounds how long a report of shed connections waits.
    if (::poll(fds, 2, /*timeout_ms=*/1000) <= 0 || fds[1].revents != 0) {
      Report(false);
      continue;
    }
    while (!stop_->notified()) {
      const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        if (fd >= limit_ - reserve_) {
          // Into the reserve: closed at once; its client tries again after its backoff.
          ++shed_;
          ::close(fd);
          Report(false);
          continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
        params.fd = fd;  // gRPC owns it from here
        acceptor_->HandleNewConnection(&params);
        ++accepted_;
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays queued and the
      // listener readable. Take it through the spare descriptor and close it, so that its client
      // is told now, and back off a little rather than spin.
      last_errno_ = errno;
      ++failed_;
      ShedThroughSpare();
      Report(false);
      pollfd wake{stop_->fd(), POLLIN, 0};
      ::poll(&wake, 1, /*timeout_ms=*/20);
    }
  }
}

void GrpcListener::ShedThroughSpare() {
  spare_.Close();
  const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  spare_ = net::Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

void GrpcListener::Report(bool force) {
  const absl::Time now = absl::Now();
  const uint64_t shed = shed_.load(), failed = failed_.load();
  if (shed == shed_logged_ && failed == failed_logged_) return;
  // The first one at once, then at most every kReportEvery.
  const bool first = shed_logged_ == 0 && failed_logged_ == 0;
  if (!force && !first && now - last_report_ < kReportEvery) return;
  const std::string since =
      first ? std::string()
            : absl::StrCat(" in the last ", absl::FormatDuration(absl::Trunc(
                                                now - last_report_, absl::Milliseconds(100))));
  std::string message = options_.name;
  if (shed != shed_logged_) {
    absl::StrAppend(&message, " closed ", shed - shed_logged_,
                    " new connections at once", since, " to keep ", reserve_,
                    " of its ", limit_, " descriptors free");
  }
  if (failed != failed_logged_) {
    absl::StrAppend(&message, shed != shed_logged_ ? ";" : "", " failed to accept ",
                    failed - failed_logged_, " times", since, " (",
                    std::strerror(last_errno_),
                    "): each time it closed the waiting connection and went on accepting");
  }
  Log(LogLevel::kWarning, kComponent, message);
  shed_logged_ = shed;
  failed_logged_ = failed;
  last_report_ = now;
}

}  // namespace croupier::rpc
