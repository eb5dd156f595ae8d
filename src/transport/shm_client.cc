// The shared-memory data client: a small pool of Unix-socket connections to one server, as the
// TCP client's, receiving batches as segments to map (protocol in shm_transport.h).
#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/protocol.h"
#include "src/common/status_macros.h"
#include "src/transport/fetch_many.h"
#include "src/transport/frame.h"
#include "src/transport/recv_buffer.h"
#include "src/transport/shm_socket.h"
#include "src/transport/shm_transport.h"
#include "src/transport/tcp_client_connection.h"

namespace croupier {
namespace {

// Mappings a connection keeps for segments the server may fill again; beyond these bounds the
// ones no batch uses are unmapped.
constexpr size_t kMaxCachedMappings = 64;
constexpr size_t kMaxCachedBytes = size_t{256} << 20;

// Segment ids whose batches are gone, to send with the connection's next request. Shared by the
// connection and the deleters of its batches, which may outlive it. Thread-safe.
struct ReleaseQueue {
  absl::Mutex mu;
  std::vector<uint64_t> ids ABSL_GUARDED_BY(mu);
};

// The deleter of a batch's buffer: keeps the mapping alive, and queues the segment's release.
struct SegmentReleaser {
  std::shared_ptr<ShmMapping> mapping;
  std::shared_ptr<ReleaseQueue> queue;
  uint64_t id;
  void operator()(const uint8_t*) {
    {
      absl::MutexLock lock(&queue->mu);
      queue->ids.push_back(id);
    }
    mapping.reset();
  }
};

absl::Status Malformed(absl::string_view peer, const absl::Status& status) {
  return absl::DataLossError(
      absl::StrCat("malformed response from ", peer, ": ", status.message()));
}

// One handshaken connection, used by one call at a time. Thread-compatible.
class ShmConnection {
 public:
  static absl::StatusOr<std::unique_ptr<ShmConnection>> Open(const std::string& address,
                                                             const DataClientOptions& options,
                                                             absl::Time deadline,
                                                             const net::WakeEvent* cancel) {
    ASSIGN_OR_RETURN(net::Socket socket,
                     net::DialUnix(address, net::IoWait{.deadline = deadline, .wake = cancel}));
    std::unique_ptr<ShmConnection> c(
        new ShmConnection(std::move(socket), address, options.max_batch_bytes, cancel));
    RETURN_IF_ERROR(c->Handshake(options.auth_token, deadline));
    return c;
  }

  absl::StatusOr<std::pair<uint64_t, Batch>> Call(const frame::Request& request,
                                                  absl::Time deadline) {
    std::optional<Answer> answer;
    const absl::Status status = CallMany(absl::MakeConstSpan(&request, 1), deadline,
                                         [&](size_t, Answer got) { answer = std::move(got); });
    if (!answer.has_value()) return status;
    return *std::move(answer);
  }

  // As ClientConnection::CallMany (tcp_client_connection.h).
  absl::Status CallMany(absl::Span<const frame::Request> requests, absl::Time deadline,
                        absl::FunctionRef<void(size_t, Answer)> on_answer) {
    reusable_ = false;
    if (requests.size() > kMaxPipelinedRequests) {
      return absl::InvalidArgumentError(absl::StrCat(
          requests.size(), " requests in one call; at most ", kMaxPipelinedRequests));
    }
    const absl::Time now = absl::Now();
    deadline = std::min(deadline, now + frame::kMaxRequestTimeout);
    const uint64_t timeout_ms = frame::TimeoutMs(deadline, now);
    const net::IoWait answer_wait{.deadline = deadline + kResponseGrace, .wake = cancel_};
    // The segments of released batches go back first, in the same write as the requests.
    released_.clear();
    {
      absl::MutexLock lock(&releases_->mu);
      released_.swap(releases_->ids);
    }
    out_.clear();
    if (!released_.empty()) {
      const auto h = frame::EncodeHeader(static_cast<frame::FrameType>(kShmReleaseFrameType),
                                         8 * released_.size());
      out_.append(h.data(), h.size());
      out_.append(reinterpret_cast<const char*>(released_.data()), 8 * released_.size());
    }
    for (const frame::Request& request : requests) {
      frame::Request timed = request;
      timed.timeout_ms = timeout_ms;
      frame::AppendRequest(timed, &out_);
    }
    RETURN_IF_ERROR(net::SendAll(socket_.fd(), out_, answer_wait, peer_));
    for (size_t i = 0; i < requests.size(); ++i) {
      reusable_ = false;
      Answer answer = ReadAnswer(answer_wait);
      const bool in_step = reusable_;
      const absl::Status status = answer.status();
      on_answer(i, std::move(answer));
      if (!in_step) return status.ok() ? absl::DataLossError("connection out of step") : status;
    }
    // Every descriptor came with a SHM_BATCH frame: one left over came with a frame that has
    // none.
    if (!fds_.empty()) {
      fds_.clear();
      return Malformed(peer_, absl::DataLossError("a descriptor with a frame that has none"));
    }
    reusable_ = true;
    return absl::OkStatus();
  }

  bool reusable() const { return reusable_; }
  bool Stale() const {
    return !reusable_ || !in_.empty() || net::PeerHungUpOrSpoke(socket_.fd());
  }

 private:
  ShmConnection(net::Socket socket, const std::string& address, uint64_t max_batch_bytes,
                const net::WakeEvent* cancel)
      : socket_(std::move(socket)),
        peer_(absl::StrCat("data server ", address)),
        max_batch_bytes_(max_batch_bytes),
        cancel_(cancel) {}

  // Reads into the receive buffer, keeping the descriptors that come along (in order).
  absl::StatusOr<size_t> ReadSome(char* dst, size_t room, const net::IoWait& wait) {
    received_.clear();
    absl::StatusOr<size_t> got =
        net::RecvSomeWithFds(socket_.fd(), dst, room, wait, peer_, &received_);
    for (net::Socket& fd : received_) fds_.push_back(std::move(fd));
    received_.clear();
    return got;
  }

  absl::Status Fill(size_t n, const net::IoWait& wait) {
    return in_.Fill(n, [&](char* dst, size_t room) { return ReadSome(dst, room, wait); }, peer_);
  }

  absl::Status Handshake(absl::string_view token, absl::Time deadline) {
    const net::IoWait wait{.deadline = deadline, .wake = cancel_};
    const absl::Status sent =
        net::SendAll(socket_.fd(), frame::EncodeHello(kShmProtocolVersion, token), wait, peer_);
    const absl::Status got = Fill(frame::kHeaderBytes, wait);
    if (!got.ok()) {
      const absl::Status& cause = sent.ok() ? got : sent;
      if (absl::IsCancelled(cause)) return cause;
      return absl::UnavailableError(
          absl::StrCat("handshake with ", peer_, " failed: ", cause.message()));
    }
    absl::StatusOr<frame::FrameHeader> h =
        frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes));
    if (!h.ok()) return Malformed(peer_, h.status());
    in_.Consume(frame::kHeaderBytes);
    if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
    if (h->type != static_cast<uint32_t>(frame::FrameType::kHelloOk) ||
        h->length != frame::kHelloOkBytes) {
      return Malformed(peer_,
                       absl::DataLossError(absl::StrCat("frame type ", h->type, " of ", h->length,
                                                        " bytes in answer to the handshake")));
    }
    RETURN_IF_ERROR(Fill(frame::kHelloOkBytes, wait));
    absl::StatusOr<uint32_t> version =
        frame::ParseHelloOk(in_.data().substr(0, frame::kHelloOkBytes));
    in_.Consume(frame::kHelloOkBytes);
    if (!version.ok()) return Malformed(peer_, version.status());
    if (*version != kShmProtocolVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat("protocol version mismatch: ", peer_, " speaks version ", *version,
                       ", this client version ", kShmProtocolVersion));
    }
    if (!fds_.empty()) {
      return Malformed(peer_, absl::DataLossError("a descriptor with the handshake"));
    }
    return absl::OkStatus();
  }

  Answer ReadAnswer(const net::IoWait& answer_wait) {
    absl::Status got = Fill(frame::kHeaderBytes, answer_wait);
    if (absl::IsDeadlineExceeded(got)) {
      return absl::DeadlineExceededError(
          absl::StrCat(peer_, " did not answer by the deadline (plus ",
                       absl::FormatDuration(kResponseGrace), " grace)"));
    }
    RETURN_IF_ERROR(got);
    absl::StatusOr<frame::FrameHeader> h =
        frame::ParseHeader(in_.data().substr(0, frame::kHeaderBytes));
    if (!h.ok()) return Malformed(peer_, h.status());
    in_.Consume(frame::kHeaderBytes);
    if (h->type == kShmBatchFrameType) return ReadBatch(h->length);
    if (h->type == static_cast<uint32_t>(frame::FrameType::kError)) return ReadError(h->length);
    return Malformed(peer_, absl::DataLossError(
                                absl::StrCat("frame type ", h->type, " in answer to a request")));
  }

  absl::Status ReadError(uint64_t length) {
    if (length < frame::kErrorFixedBytes ||
        length > frame::kErrorFixedBytes + frame::kMaxErrorMessageBytes) {
      return Malformed(peer_,
                       absl::DataLossError(absl::StrCat("ERROR frame of ", length, " bytes")));
    }
    RETURN_IF_ERROR(Fill(length, net::IoWait{.stall = kClientStallTimeout, .wake = cancel_}));
    absl::StatusOr<frame::ErrorBody> error = frame::ParseError(in_.data().substr(0, length));
    in_.Consume(length);
    if (!error.ok()) return Malformed(peer_, error.status());
    reusable_ = true;
    return absl::Status(error->code, absl::StrCat(peer_, ": ", error->message));
  }

  absl::StatusOr<std::pair<uint64_t, Batch>> ReadBatch(uint64_t length) {
    if (length != kShmBatchBodyBytes) {
      return Malformed(peer_,
                       absl::DataLossError(absl::StrCat("SHM_BATCH frame of ", length, " bytes")));
    }
    RETURN_IF_ERROR(
        Fill(kShmBatchBodyBytes, net::IoWait{.stall = kClientStallTimeout, .wake = cancel_}));
    uint64_t fields[3];
    std::memcpy(fields, in_.data().data(), sizeof(fields));
    in_.Consume(kShmBatchBodyBytes);
    const uint64_t index = fields[0], size = fields[1], id = fields[2];
    // The descriptor came with the frame's first byte, so it has arrived by now.
    if (fds_.empty()) {
      return Malformed(peer_, absl::DataLossError("SHM_BATCH frame without a descriptor"));
    }
    net::Socket segment = std::move(fds_.front());
    fds_.pop_front();
    // The segment is ours now whatever happens: hand it back with the next request.
    auto give_back = [&] {
      absl::MutexLock lock(&releases_->mu);
      releases_->ids.push_back(id);
    };
    reusable_ = true;
    if (size > max_batch_bytes_) {
      give_back();
      return absl::ResourceExhaustedError(absl::StrCat("batch of ", size, " bytes from ", peer_,
                                                       " exceeds max_batch_bytes ",
                                                       max_batch_bytes_));
    }
    std::shared_ptr<ShmMapping> mapping;
    if (auto it = cache_.find(id); it != cache_.end() && it->second->size() >= size) {
      mapping = it->second;  // a segment the server filled again: already mapped
    } else {
      absl::StatusOr<std::shared_ptr<ShmMapping>> mapped =
          ShmMapping::Map(std::move(segment), size, peer_);
      if (!mapped.ok()) {
        reusable_ = false;
        return absl::Status(mapped.status().code(), absl::StrCat("batch ", index, ": ",
                                                                 mapped.status().message()));
      }
      mapping = *std::move(mapped);
      cached_bytes_ += mapping->size();
      cache_[id] = mapping;
      Trim();
    }
    absl::StatusOr<Batch> batch = Batch::FromBuffer(
        std::shared_ptr<const uint8_t>(mapping->data(), SegmentReleaser{mapping, releases_, id}),
        size);
    if (!batch.ok()) {
      reusable_ = false;
      return absl::DataLossError(absl::StrCat("malformed batch ", index, " from ", peer_, ": ",
                                              batch.status().message()));
    }
    return std::make_pair(index, *std::move(batch));
  }

  // Unmaps cached segments that no batch uses while the cache is over its bounds.
  void Trim() {
    if (cache_.size() <= kMaxCachedMappings && cached_bytes_ <= kMaxCachedBytes) return;
    for (auto it = cache_.begin(); it != cache_.end();) {
      if (cache_.size() <= kMaxCachedMappings / 2 && cached_bytes_ <= kMaxCachedBytes / 2) break;
      if (it->second.use_count() == 1) {
        cached_bytes_ -= it->second->size();
        cache_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  net::Socket socket_;
  const std::string peer_;
  const uint64_t max_batch_bytes_;
  const net::WakeEvent* const cancel_;
  bool reusable_ = true;
  net::RecvBuffer in_;               // what the server sent and was not parsed yet
  std::deque<net::Socket> fds_;      // descriptors received and not matched to a frame yet
  std::vector<net::Socket> received_;  // scratch for one read's descriptors
  std::vector<uint64_t> released_;     // scratch: the segment ids sent back with a call
  std::string out_;                    // scratch: the frames of a call
  const std::shared_ptr<ReleaseQueue> releases_ = std::make_shared<ReleaseQueue>();
  absl::flat_hash_map<uint64_t, std::shared_ptr<ShmMapping>> cache_;  // segment id -> mapping
  size_t cached_bytes_ = 0;
};

// Thread-safe; the pool logic is the TCP client's (tcp_client.h).
class ShmDataClient final : public DataClient {
 public:
  ShmDataClient(const std::string& address, const DataClientOptions& options,
                std::unique_ptr<net::WakeEvent> cancel)
      : address_(address), options_(options), cancel_(std::move(cancel)) {}
  ~ShmDataClient() override { Cancel(); }

  absl::Status OpenFirst() {
    ASSIGN_OR_RETURN(std::unique_ptr<ShmConnection> first,
                     ShmConnection::Open(address_, options_,
                                         absl::Now() + options_.connect_timeout, cancel_.get()));
    absl::MutexLock lock(&mu_);
    open_ = 1;
    idle_.push_back(std::move(first));
    return absl::OkStatus();
  }

  absl::StatusOr<Batch> Fetch(const BatchKey& key, absl::Time deadline) override {
    RETURN_IF_ERROR(CheckJob(key.job));
    ASSIGN_OR_RETURN(auto answer, Call(frame::Request{.type = frame::FrameType::kGetBatch,
                                                      .job = key.job,
                                                      .epoch = key.epoch,
                                                      .batch = key.batch},
                                       deadline));
    if (answer.first != key.batch) {
      return absl::DataLossError(absl::StrCat("data server ", address_, " answered batch ",
                                              answer.first, " to a request for batch ",
                                              key.batch));
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
    FetchPipelined<ShmConnection>(
        address_, CheckJob(job), job, epoch, batches, deadline,
        [this](absl::Time d) { return Acquire(d); },
        [this](std::unique_ptr<ShmConnection> c) { Release(std::move(c)); },
        [this] { return CancelledError(); }, on_batch);
  }

  void Cancel() override {
    std::vector<std::unique_ptr<ShmConnection>> idle;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      idle.swap(idle_);
      open_ -= idle.size();
    }
    cancel_->Notify();
  }

  void Retire() override {
    std::vector<std::unique_ptr<ShmConnection>> idle;
    {
      absl::MutexLock lock(&mu_);
      retired_ = true;
      idle.swap(idle_);
      open_ -= idle.size();
    }
    // `idle` closes here, outside the lock; busy connections close when their calls end.
  }

 private:
  absl::StatusOr<std::pair<uint64_t, Batch>> Call(const frame::Request& request,
                                                  absl::Time deadline) {
    ASSIGN_OR_RETURN(std::unique_ptr<ShmConnection> connection,
                     Acquire(deadline + kResponseGrace));
    absl::StatusOr<std::pair<uint64_t, Batch>> answer = connection->Call(request, deadline);
    Release(std::move(connection));
    if (absl::IsCancelled(answer.status())) return CancelledError();
    return answer;
  }

  absl::StatusOr<std::unique_ptr<ShmConnection>> Acquire(absl::Time deadline) {
    absl::Status last_open_error;
    while (true) {
      std::unique_ptr<ShmConnection> connection;
      {
        absl::MutexLock lock(&mu_);
        const bool may_open = last_open_error.ok();
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return cancelled_ || !idle_.empty() ||
                 (may_open && open_ < options_.max_connections) || (!may_open && open_ == 0);
        };
        if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
          if (!last_open_error.ok()) return last_open_error;
          return absl::DeadlineExceededError(absl::StrCat(
              "no free connection to data server ", address_, " before the deadline (all ",
              options_.max_connections, " busy)"));
        }
        if (cancelled_) return CancelledError();
        if (!idle_.empty()) {
          connection = std::move(idle_.back());
          idle_.pop_back();
        } else if (!may_open) {
          return last_open_error;
        } else {
          ++open_;
        }
      }
      if (connection != nullptr) {
        if (!connection->Stale()) return connection;
        Discard(std::move(connection));
        continue;
      }
      absl::StatusOr<std::unique_ptr<ShmConnection>> opened = ShmConnection::Open(
          address_, options_, std::min(deadline, absl::Now() + options_.connect_timeout),
          cancel_.get());
      if (opened.ok()) return opened;
      {
        absl::MutexLock lock(&mu_);
        --open_;
      }
      if (absl::IsCancelled(opened.status())) return CancelledError();
      last_open_error = opened.status();
    }
  }

  void Release(std::unique_ptr<ShmConnection> connection) {
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

  void Discard(std::unique_ptr<ShmConnection> connection) {
    connection.reset();
    absl::MutexLock lock(&mu_);
    --open_;
  }

  absl::Status CheckJob(absl::string_view job) const {
    if (job.size() <= frame::kMaxJobBytes) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("job name of ", job.size(), " bytes exceeds ",
                                                   frame::kMaxJobBytes,
                                                   " (request to data server ", address_, ")"));
  }

  absl::Status CancelledError() const {
    return absl::CancelledError(
        absl::StrCat("the data client of data server ", address_, " was cancelled"));
  }

  const std::string address_;
  const DataClientOptions options_;
  const std::unique_ptr<net::WakeEvent> cancel_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<ShmConnection>> idle_ ABSL_GUARDED_BY(mu_);
  size_t open_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;  // Retire(): no connection goes back to idle_
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataClient>> ConnectShmDataClient(const std::string& address,
                                                                 const DataClientOptions& options) {
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("data client max_connections must be at least 1");
  }
  if (options.auth_token.size() > frame::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth token longer than ", frame::kMaxTokenBytes, " bytes"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<net::WakeEvent> cancel, net::WakeEvent::Create());
  auto client = std::make_unique<ShmDataClient>(address, options, std::move(cancel));
  RETURN_IF_ERROR(client->OpenFirst());
  return client;
}

}  // namespace croupier
