// The shared-memory data server: a ServeLoop (serve_loop.h) of ShmServerConnections, answering
// batches with sealed memfd segments (protocol in shm_transport.h).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/transport/frame.h"
#include "src/transport/memfd_bytes.h"
#include "src/transport/serve_loop.h"
#include "src/transport/server_connection.h"
#include "src/transport/shm_socket.h"
#include "src/transport/shm_transport.h"

namespace croupier {
namespace {

// Free segments kept for reuse, per server: part of a producer's memory beyond its batch buffer.
constexpr size_t kPoolFreeBytes = size_t{64} << 20;

// One accepted connection: the Unix socket, SHM_RELEASE frames, and SHM_BATCH answers written
// with their descriptors in one sendmsg; the rest is ServerConnection's. Thread-compatible.
class ShmServerConnection final : public ServerConnection {
 public:
  ShmServerConnection(net::Socket socket, const DataServerOptions& options, BatchSource* source,
                      ConnectionSlot* slot, ShmSegmentPool* pool)
      : ServerConnection(absl::StrCat("client ", net::UnixPeerName(socket.fd())),
                         "shared-memory connection", kOldestShmProtocolVersion,
                         kShmProtocolVersion, options, source, slot),
        socket_(std::move(socket)),
        pool_(pool) {}
  // Segments still leased to the client are dropped, not reused: it may still hold their batches.
  // So are the memfds of batches passed as they are (retired: never written again).
  ~ShmServerConnection() override {
    for (const auto& [id, batch] : passed_) {
      if (const MemfdBytes* backing = std::get_deleter<MemfdBytes>(batch.buffer())) {
        backing->Retire();
      }
    }
  }

 private:
  absl::Status SendAll(absl::string_view bytes, const net::IoWait& wait) override {
    return net::SendAll(socket_.fd(), bytes, wait, peer_);
  }
  absl::StatusOr<size_t> RecvSome(char* dst, size_t room, const net::IoWait& wait) override {
    return net::RecvSome(socket_.fd(), dst, room, wait, peer_);
  }
  bool PeerHungUp() override { return net::PeerHungUp(socket_.fd()); }
  void CloseGracefully(absl::Duration linger) override {
    net::CloseGracefully(std::move(socket_), linger);
  }

  bool AcceptsFrame(uint32_t type) const override { return type == kShmReleaseFrameType; }

  // SHM_RELEASE: the segments go back to the pool, to be filled again.
  absl::Status HandleFrame(uint32_t type, absl::string_view body) override {
    if (body.size() % 8 != 0) {
      return absl::DataLossError(absl::StrCat("SHM_RELEASE frame of ", body.size(), " bytes"));
    }
    for (size_t i = 0; i < body.size(); i += 8) {
      uint64_t id;
      std::memcpy(&id, body.data() + i, 8);
      if (passed_.erase(id) > 0) continue;  // the batch's own memfd: its owner reuses it
      auto it = leased_.find(id);
      if (it == leased_.end()) {
        return absl::DataLossError(
            absl::StrCat("release of segment ", id, ", which the connection does not hold"));
      }
      pool_->Put(std::move(it->second));
      leased_.erase(it);
    }
    return absl::OkStatus();
  }

  void HoldAnswer(const frame::Request& request,
                  absl::StatusOr<std::pair<uint64_t, Batch>> answer) override {
    if (!answer.ok()) {
      out_ += frame::EncodeError(answer.status());
      return;
    }
    const auto& [index, batch] = *answer;
    const absl::string_view bytes = batch.bytes();
    // A batch already at the start of a memfd (a map job's worker laid it out there) goes as it
    // is: no copy. Held until the client releases it.
    const MemfdBytes* backing = std::get_deleter<MemfdBytes>(batch.buffer());
    if (backing != nullptr && bytes.data() == reinterpret_cast<const char*>(batch.buffer().get()) &&
        !passed_.contains(backing->segment_id)) {
      AppendBatchFrame(index, bytes.size(), backing->segment_id, backing->fd);
      NoteServed(BatchKey{request.job, request.epoch, index}, bytes.size(),
                 request.type == frame::FrameType::kGetAny);
      passed_.emplace(backing->segment_id, batch);
      return;
    }
    absl::StatusOr<std::unique_ptr<ShmSegment>> segment = pool_->Get(bytes.size());
    if (!segment.ok()) {
      Log(LogLevel::kWarning, kTransportLog,
          absl::StrCat("batch ", index, " of job '", request.job, "' epoch ", request.epoch,
                       " for ", peer_, ": ", segment.status().message()));
      out_ += frame::EncodeError(segment.status());
      return;
    }
    // The one copy of the shared-memory path: into pages the segment already has.
    std::memcpy((*segment)->data(), bytes.data(), bytes.size());
    AppendBatchFrame(index, bytes.size(), (*segment)->id(), (*segment)->fd());
    NoteServed(BatchKey{request.job, request.epoch, index}, bytes.size(),
               request.type == frame::FrameType::kGetAny);
    leased_.emplace((*segment)->id(), *std::move(segment));
  }

  // An SHM_BATCH frame for batch `index` of `size` bytes in segment `id`, whose descriptor goes
  // with it.
  void AppendBatchFrame(uint64_t index, uint64_t size, uint64_t id, int fd) {
    const auto header = frame::EncodeHeader(static_cast<frame::FrameType>(kShmBatchFrameType),
                                            kShmBatchBodyBytes);
    out_.append(header.data(), header.size());
    // Little-endian hosts only, as frame.cc.
    const uint64_t fields[3] = {index, size, id};
    out_.append(reinterpret_cast<const char*>(fields), sizeof(fields));
    fds_.push_back(fd);
  }

  bool HeldFull() const override { return fds_.size() >= net::kMaxFdsPerMessage; }

  // Every held answer in one sendmsg, the descriptors of its SHM_BATCH frames with it in order.
  absl::Status WriteHeld(const net::IoWait& wait) override {
    return net::SendAllWithFds(socket_.fd(), out_, fds_, wait, peer_);
  }

  void DropHeld() override {
    out_.clear();
    fds_.clear();
  }

  net::Socket socket_;
  ShmSegmentPool* const pool_;
  std::string out_;       // the frames of the held answers
  std::vector<int> fds_;  // the descriptors of their SHM_BATCH frames, in order
  // Segments whose batches the client has not released yet, by id.
  absl::flat_hash_map<uint64_t, std::unique_ptr<ShmSegment>> leased_;
  // Batches passed in their own memfd (MemfdBytes) that the client has not released yet, by id.
  absl::flat_hash_map<uint64_t, Batch> passed_;
};

// Thread-safe.
class ShmDataServer final : public DataServer {
 public:
  ShmDataServer(const DataServerOptions& options, BatchSource* source, std::string name)
      : options_(options), source_(source), address_(std::move(name)) {}
  ~ShmDataServer() override { Shutdown(); }

  absl::Status Start(net::Socket listener) {
    ASSIGN_OR_RETURN(
        loop_,
        ServeLoop::Start(
            std::move(listener),
            ServeLoopOptions{
                .name = absl::StrCat("shared-memory data server ", address_),
                .max_connections = options_.max_connections,
                // Every client is on this host: the limit in all is the only one.
                .max_connections_per_peer = std::numeric_limits<size_t>::max(),
                .max_handshakes = options_.max_handshakes,
                .max_handshakes_per_peer = options_.max_handshakes,
                .send_refusal = true,
                .admit = [](int) { return std::string("this host"); },
                .peer_name = [](int fd) { return net::UnixPeerName(fd); },
                .serve =
                    [this](net::Socket socket, ConnectionSlot* slot) {
                      ShmServerConnection(std::move(socket), options_, source_, slot, &pool_)
                          .Run();
                    }}));
    return absl::OkStatus();
  }

  int port() const override { return 0; }
  std::string address() const override { return address_; }
  void Shutdown() override {
    if (loop_ != nullptr) loop_->Shutdown();
  }

 private:
  // Constant after construction.
  const DataServerOptions options_;
  BatchSource* const source_;
  const std::string address_;
  ShmSegmentPool pool_{kPoolFreeBytes};  // thread-safe
  // Set once by Start; its connection threads use the members above.
  std::unique_ptr<ServeLoop> loop_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataServer>> StartShmDataServer(const DataServerOptions& options,
                                                               BatchSource* source) {
  RETURN_IF_ERROR(ValidateDataServerOptions(options));
  if (source == nullptr) return absl::InvalidArgumentError("data server needs a BatchSource");
  std::string name = options.bind_address;
  if (name.empty() || name[0] != '@') {
    static std::atomic<uint64_t> counter{0};
    name = absl::StrCat("@croupier-shm/anon-", ::getpid(), "-", counter.fetch_add(1));
  }
  ASSIGN_OR_RETURN(net::Socket listener, net::ListenUnix(name));
  auto server = std::make_unique<ShmDataServer>(options, source, name);
  RETURN_IF_ERROR(server->Start(std::move(listener)));
  Log(LogLevel::kInfo, kTransportLog,
      absl::StrCat("shared-memory data server listening on ", name));
  return server;
}

}  // namespace croupier
