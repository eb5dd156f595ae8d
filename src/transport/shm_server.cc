// The shared-memory data server: an acceptor thread and one thread per connection, as the TCP
// server, answering batches with sealed memfd segments (protocol in shm_transport.h).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/logging.h"
#include "src/common/protocol.h"
#include "src/common/status_macros.h"
#include "src/transport/frame.h"
#include "src/transport/recv_buffer.h"
#include "src/transport/shm_socket.h"
#include "src/transport/shm_transport.h"
#include "src/transport/tcp_server_connection.h"
#include "src/transport/token.h"

namespace croupier {
namespace {

constexpr char kComponent[] = "transport";
constexpr absl::Duration kRefusalLinger = absl::Milliseconds(200);
constexpr absl::Duration kSliceSlack = absl::Milliseconds(10);
// Free segments kept for reuse, per server: part of a producer's memory beyond its batch buffer.
constexpr size_t kPoolFreeBytes = size_t{64} << 20;
// Bounds on the answers held back to be written together (HoldForNext).
constexpr size_t kMaxHeldAnswers = 16;

void LogClose(absl::string_view peer, absl::string_view stage, const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kFailedPrecondition:
      return;
    case absl::StatusCode::kDataLoss:
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("closing the shared-memory connection from ", peer, ": malformed ", stage,
                       ": ", status.message()));
      return;
    default:
      Log(LogLevel::kInfo, kComponent,
          absl::StrCat("closing the shared-memory connection from ", peer, " during ", stage, ": ",
                       status.message()));
  }
}

// Serves one accepted connection on the calling thread. Thread-compatible.
class ShmServerConnection {
 public:
  ShmServerConnection(net::Socket socket, const DataServerOptions& options, BatchSource* source,
                      const net::WakeEvent* stop, ShmSegmentPool* pool)
      : socket_(std::move(socket)),
        peer_(absl::StrCat("client ", net::UnixPeerName(socket_.fd()))),
        options_(options),
        source_(source),
        stop_(stop),
        pool_(pool) {}
  // Segments still leased to the client are dropped, not reused: it may still hold their batches.
  ~ShmServerConnection() = default;

  void Run() {
    absl::Status status = Handshake();
    if (!status.ok()) {
      LogClose(peer_, "handshake", status);
      if (absl::IsCancelled(status)) return;
      net::CloseGracefully(std::move(socket_), kRefusalLinger);
      return;
    }
    while (true) {
      absl::StatusOr<std::optional<frame::Request>> request = ReadRequest();
      if (!request.ok()) {
        status = request.status();
        LogClose(peer_, "request", status);
        break;
      }
      if (!request->has_value()) return;
      status = Serve(**request);
      if (status.ok() && !HoldForNext()) {
        status = Flush(net::IoWait{.stall = kServerStallTimeout, .wake = stop_});
      }
      if (!status.ok()) {
        LogClose(peer_, "response", status);
        break;
      }
    }
    if (absl::IsDataLoss(status)) net::CloseGracefully(std::move(socket_), kRefusalLinger);
  }

 private:
  absl::Status Handshake() {
    const net::IoWait wait{.deadline = absl::Now() + options_.handshake_timeout, .wake = stop_};
    char prefix[frame::kHelloPrefixBytes];
    RETURN_IF_ERROR(net::RecvAll(socket_.fd(), prefix, sizeof(prefix), wait, peer_));
    ASSIGN_OR_RETURN(const frame::HelloPrefix hello,
                     frame::ParseHelloPrefix(absl::string_view(prefix, sizeof(prefix))));
    std::string token(hello.token_length, '\0');
    RETURN_IF_ERROR(net::RecvAll(socket_.fd(), token.data(), token.size(), wait, peer_));
    if (hello.version < kOldestShmProtocolVersion || hello.version > kShmProtocolVersion) {
      const absl::Status mismatch = absl::FailedPreconditionError(absl::StrCat(
          "protocol version mismatch: the data server speaks version ", kShmProtocolVersion,
          " (and down to ", kOldestShmProtocolVersion, "), the client version ", hello.version));
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("refusing ", peer_, ": ", mismatch.message()));
      SendError(mismatch).IgnoreError();
      return mismatch;
    }
    if (!options_.auth_token.empty() && !TokenMatches(token, options_.auth_token)) {
      const absl::Status refused = absl::UnauthenticatedError(
          token.empty() ? "the data server requires an auth token and none was given"
                        : "the data server refused the auth token");
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("refusing ", peer_, ": ", token.empty() ? "no" : "wrong", " auth token"));
      SendError(refused).IgnoreError();
      return refused;
    }
    // The client's own version: an older client is served as before (it never pipelines).
    return net::SendAll(socket_.fd(), frame::EncodeHelloOk(hello.version), wait, peer_);
  }

  // The next request, after any SHM_RELEASE frames before it.
  absl::StatusOr<std::optional<frame::Request>> ReadRequest() {
    while (true) {
      ASSIGN_OR_RETURN(std::optional<frame::Request> request, ReadFrame());
      if (!request.has_value() || request->type != kRelease) return request;
    }
  }

  static constexpr frame::FrameType kRelease = static_cast<frame::FrameType>(kShmReleaseFrameType);

  // A request, a release (handled here; returned with type kRelease), or nullopt at a close.
  absl::StatusOr<std::optional<frame::Request>> ReadFrame() {
    if (in_.empty()) {
      const net::IoWait idle{.deadline = absl::Now() + kServerIdleTimeout, .wake = stop_};
      ASSIGN_OR_RETURN(const size_t got, in_.ReadOnce([&](char* dst, size_t room) {
        return net::RecvSome(socket_.fd(), dst, room, idle, peer_);
      }));
      if (got == 0) return std::nullopt;
    }
    const net::IoWait wait{.stall = kServerStallTimeout, .wake = stop_};
    auto read = [&](char* dst, size_t room) {
      return net::RecvSome(socket_.fd(), dst, room, wait, peer_);
    };
    RETURN_IF_ERROR(in_.Fill(frame::kHeaderBytes, read, peer_));
    ASSIGN_OR_RETURN(const frame::FrameHeader h,
                     frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes)));
    if (h.type != static_cast<uint32_t>(frame::FrameType::kGetBatch) &&
        h.type != static_cast<uint32_t>(frame::FrameType::kGetAny) &&
        h.type != kShmReleaseFrameType) {
      return absl::DataLossError(absl::StrCat("frame type ", h.type, " is not a request"));
    }
    if (h.length > options_.max_request_bytes) {
      return absl::DataLossError(absl::StrCat("request of ", h.length,
                                              " bytes exceeds max_request_bytes ",
                                              options_.max_request_bytes));
    }
    in_.Consume(frame::kHeaderBytes);
    body_.resize(h.length);
    RETURN_IF_ERROR(in_.Take(body_.data(), body_.size(), read, peer_));
    const std::string& body = body_;
    if (h.type == kShmReleaseFrameType) {
      if (body.size() % 8 != 0) {
        return absl::DataLossError(absl::StrCat("SHM_RELEASE frame of ", body.size(), " bytes"));
      }
      for (size_t i = 0; i < body.size(); i += 8) {
        uint64_t id;
        std::memcpy(&id, body.data() + i, 8);
        auto it = leased_.find(id);
        if (it == leased_.end()) {
          return absl::DataLossError(
              absl::StrCat("release of segment ", id, ", which the connection does not hold"));
        }
        pool_->Put(std::move(it->second));
        leased_.erase(it);
      }
      return std::optional<frame::Request>(frame::Request{.type = kRelease, .job = {}});
    }
    ASSIGN_OR_RETURN(frame::Request request, frame::ParseRequest(h, body));
    return std::optional<frame::Request>(std::move(request));
  }

  absl::Status Serve(const frame::Request& request) {
    const absl::Time deadline = frame::DeadlineFromTimeoutMs(request.timeout_ms, absl::Now());
    std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> answer =
        AskSource(request, deadline);
    if (!answer.has_value()) {
      if (!stop_->notified()) return absl::UnavailableError(absl::StrCat(peer_, " went away"));
      const net::IoWait brief{.deadline = absl::Now() + absl::Milliseconds(100)};
      if (Flush(brief).ok()) {
        net::SendAll(socket_.fd(),
                     frame::EncodeError(absl::UnavailableError("the data server is shutting down")),
                     brief, peer_)
            .IgnoreError();
      }
      return absl::CancelledError("the data server is shutting down");
    }
    if (!answer->ok()) {
      out_ += frame::EncodeError(answer->status());
      ++held_;
      return absl::OkStatus();
    }

    const auto& [index, batch] = **answer;
    const absl::string_view bytes = batch.bytes();
    absl::StatusOr<std::unique_ptr<ShmSegment>> segment = pool_->Get(bytes.size());
    if (!segment.ok()) {
      Log(LogLevel::kWarning, kComponent,
          absl::StrCat("batch ", index, " of job '", request.job, "' epoch ", request.epoch,
                       " for ", peer_, ": ", segment.status().message()));
      out_ += frame::EncodeError(segment.status());
      ++held_;
      return absl::OkStatus();
    }
    // The one copy of the shared-memory path: into pages the segment already has.
    std::memcpy((*segment)->data(), bytes.data(), bytes.size());
    const auto header = frame::EncodeHeader(static_cast<frame::FrameType>(kShmBatchFrameType),
                                            kShmBatchBodyBytes);
    out_.append(header.data(), header.size());
    // Little-endian hosts only, as frame.cc.
    const uint64_t fields[3] = {index, bytes.size(), (*segment)->id()};
    out_.append(reinterpret_cast<const char*>(fields), sizeof(fields));
    fds_.push_back((*segment)->fd());
    served_.push_back(Served{BatchKey{request.job, request.epoch, index}, bytes.size(),
                             request.type == frame::FrameType::kGetAny});
    leased_.emplace((*segment)->id(), *std::move(segment));
    ++held_;
    return absl::OkStatus();
  }

  // As ServerConnection::HoldForNext (tcp_server_connection.h).
  bool HoldForNext() {
    if (held_ >= kMaxHeldAnswers || fds_.size() >= net::kMaxFdsPerMessage) return false;
    std::optional<frame::Request> next = frame::PeekGetBatch(in_.data());
    if (!next) return false;
    return source_->Ready(BatchKey{std::move(next->job), next->epoch, next->batch});
  }

  // Writes every held answer in one sendmsg, the descriptors of its SHM_BATCH frames with it in
  // order, then tells the source which batches were served.
  absl::Status Flush(const net::IoWait& wait) {
    if (held_ == 0) return absl::OkStatus();
    const absl::Status sent = net::SendAllWithFds(socket_.fd(), out_, fds_, wait, peer_);
    for (const Served& s : served_) {
      if (!sent.ok()) {
        if (s.any) {
          Log(LogLevel::kWarning, kComponent,
              absl::StrCat("batch ", s.key.batch, " of job '", s.key.job, "' epoch ", s.key.epoch,
                           " was taken for ", peer_, " but not delivered: ", sent.message()));
        }
        continue;
      }
      source_->OnServed(s.key, s.bytes);
    }
    out_.clear();
    fds_.clear();
    served_.clear();
    held_ = 0;
    return sent;
  }

  std::optional<absl::StatusOr<std::pair<uint64_t, Batch>>> AskSource(
      const frame::Request& request, absl::Time deadline) {
    while (true) {
      const absl::Time slice_end = std::min(deadline, absl::Now() + kSourceSlice);
      absl::StatusOr<std::pair<uint64_t, Batch>> answer;
      if (request.type == frame::FrameType::kGetBatch) {
        absl::StatusOr<Batch> batch =
            source_->GetBatch(BatchKey{request.job, request.epoch, request.batch}, slice_end);
        if (batch.ok()) {
          answer = std::make_pair(request.batch, *std::move(batch));
        } else {
          answer = batch.status();
        }
      } else {
        answer = source_->GetAnyBatch(request.job, request.epoch, slice_end);
      }
      if (!absl::IsDeadlineExceeded(answer.status()) || slice_end >= deadline ||
          absl::Now() < slice_end - kSliceSlack) {
        return answer;
      }
      // Hung up, not spoken: a pipelining client's next requests may be waiting already.
      if (stop_->notified() || net::PeerHungUp(socket_.fd())) return std::nullopt;
    }
  }

  absl::Status SendError(const absl::Status& status) {
    return net::SendAll(socket_.fd(), frame::EncodeError(status),
                        net::IoWait{.stall = kServerStallTimeout, .wake = stop_}, peer_);
  }

  net::Socket socket_;
  net::RecvBuffer in_;  // received and not parsed yet: pipelined requests (frame.h)
  std::string body_;    // the body of the frame being parsed, reused
  // The answers held back to be written together (HoldForNext, Flush).
  struct Served {
    BatchKey key;
    uint64_t bytes = 0;
    bool any = false;  // answers a GET_ANY
  };
  std::string out_;           // their frames
  std::vector<int> fds_;      // the descriptors of their SHM_BATCH frames, in order
  std::vector<Served> served_;
  size_t held_ = 0;           // answers in out_
  const std::string peer_;
  const DataServerOptions& options_;
  BatchSource* const source_;
  const net::WakeEvent* const stop_;
  ShmSegmentPool* const pool_;
  // Segments whose batches the client has not released yet, by id.
  absl::flat_hash_map<uint64_t, std::unique_ptr<ShmSegment>> leased_;
};

absl::Status ValidateOptions(const DataServerOptions& options) {
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("data server max_connections must be at least 1");
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

// Thread-safe.
class ShmDataServer final : public DataServer {
 public:
  ShmDataServer(const DataServerOptions& options, BatchSource* source, std::string name,
                net::Socket listener, std::unique_ptr<net::WakeEvent> stop)
      : options_(options),
        source_(source),
        address_(std::move(name)),
        stop_(std::move(stop)),
        listener_(std::move(listener)) {
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~ShmDataServer() override { Shutdown(); }

  int port() const override { return 0; }
  std::string address() const override { return address_; }

  void Shutdown() override {
    absl::call_once(shutdown_once_, [this] {
      stop_->Notify();
      if (acceptor_.joinable()) acceptor_.join();
      listener_.Close();
      std::vector<std::thread> threads;
      {
        absl::MutexLock lock(&mu_);
        for (auto& [id, thread] : running_) threads.push_back(std::move(thread));
        running_.clear();
        for (auto& thread : finished_) threads.push_back(std::move(thread));
        finished_.clear();
      }
      for (std::thread& thread : threads) thread.join();
      Log(LogLevel::kInfo, kComponent,
          absl::StrCat("shared-memory data server ", address_, " stopped"));
    });
  }

 private:
  void AcceptLoop() {
    while (!stop_->notified()) {
      JoinFinished();
      pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {stop_->fd(), POLLIN, 0}};
      if (::poll(fds, 2, /*timeout_ms=*/1000) <= 0 || fds[1].revents != 0) continue;
      while (!stop_->notified()) {
        const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          Admit(net::Socket(fd));
          continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          Log(LogLevel::kWarning, kComponent,
              absl::StrCat("shared-memory data server ", address_,
                           " cannot accept: ", std::strerror(errno)));
          pollfd wake{stop_->fd(), POLLIN, 0};
          ::poll(&wake, 1, /*timeout_ms=*/100);
        }
        break;
      }
    }
  }

  void Admit(net::Socket socket) {
    {
      absl::MutexLock lock(&mu_);
      if (running_.size() < options_.max_connections) {
        const uint64_t id = next_id_++;
        running_.emplace(id, std::thread([this, id, s = std::move(socket)]() mutable {
                           ShmServerConnection(std::move(s), options_, source_, stop_.get(), &pool_)
                               .Run();
                           Finished(id);
                         }));
        return;
      }
    }
    const std::string peer = net::UnixPeerName(socket.fd());
    Log(LogLevel::kWarning, kComponent,
        absl::StrCat("shared-memory data server ", address_, " refuses ", peer,
                     ": at its limit of ", options_.max_connections, " connections"));
    net::SendAll(
        socket.fd(),
        frame::EncodeError(absl::UnavailableError(absl::StrCat(
            "the data server is at its limit of ", options_.max_connections, " connections"))),
        net::IoWait{.deadline = absl::Now() + absl::Milliseconds(20)}, peer)
        .IgnoreError();
    net::CloseGracefully(std::move(socket), absl::Milliseconds(20));
  }

  void JoinFinished() {
    std::vector<std::thread> done;
    {
      absl::MutexLock lock(&mu_);
      done.swap(finished_);
    }
    for (std::thread& thread : done) thread.join();
  }

  void Finished(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(id);
    if (it == running_.end()) return;
    finished_.push_back(std::move(it->second));
    running_.erase(it);
  }

  const DataServerOptions options_;
  BatchSource* const source_;
  const std::string address_;
  const std::unique_ptr<net::WakeEvent> stop_;
  ShmSegmentPool pool_{kPoolFreeBytes};
  net::Socket listener_;
  std::thread acceptor_;
  absl::once_flag shutdown_once_;

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::thread> running_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataServer>> StartShmDataServer(const DataServerOptions& options,
                                                               BatchSource* source) {
  RETURN_IF_ERROR(ValidateOptions(options));
  if (source == nullptr) return absl::InvalidArgumentError("data server needs a BatchSource");
  std::string name = options.bind_address;
  if (name.empty() || name[0] != '@') {
    static std::atomic<uint64_t> counter{0};
    name = absl::StrCat("@croupier-shm/anon-", ::getpid(), "-", counter.fetch_add(1));
  }
  ASSIGN_OR_RETURN(net::Socket listener, net::ListenUnix(name));
  ASSIGN_OR_RETURN(std::unique_ptr<net::WakeEvent> stop, net::WakeEvent::Create());
  auto server = std::make_unique<ShmDataServer>(options, source, name, std::move(listener),
                                                std::move(stop));
  Log(LogLevel::kInfo, kComponent, absl::StrCat("shared-memory data server listening on ", name));
  return server;
}

}  // namespace croupier
