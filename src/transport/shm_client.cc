// The shared-memory data client: a PooledDataClient (pooled_data_client.h) of Unix-socket
// connections to one server, receiving batches as segments to map (protocol in shm_transport.h).
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/status_macros.h"
#include "src/transport/client_connection.h"
#include "src/transport/frame.h"
#include "src/transport/pooled_data_client.h"
#include "src/transport/shm_socket.h"
#include "src/transport/shm_transport.h"

namespace croupier {
namespace {

// Mappings a connection keeps for segments the server may fill again; beyond these bounds the
// ones no batch uses are unmapped. A producer passes the memfds its batches were made in
// (src/producer/memfd_buffers.h), up to 1,024 of them in turn when it makes hundreds of batches
// ahead: a mapping kept is one not made, faulted in and unmapped again for the next batch in
// that memfd (a tokens trainer paid 50% more CPU per token with 64 mappings, 15% with these).
constexpr size_t kMaxCachedMappings = 1024;
constexpr size_t kMaxCachedBytes = size_t{512} << 20;

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

// One handshaken connection: the Unix socket, the descriptors that come with SHM_BATCH frames,
// and the segments released back to the server; the rest is ClientConnection's.
// Thread-compatible.
class ShmConnection final : public ClientConnection {
 public:
  static absl::StatusOr<std::unique_ptr<ShmConnection>> Open(const std::string& address,
                                                             const DataClientOptions& options,
                                                             absl::Time deadline,
                                                             const net::WakeEvent* cancel) {
    ASSIGN_OR_RETURN(net::Socket socket,
                     net::DialUnix(address, net::IoWait{.deadline = deadline, .wake = cancel}));
    std::unique_ptr<ShmConnection> c(
        new ShmConnection(std::move(socket), address, options.max_batch_bytes, cancel));
    RETURN_IF_ERROR(c->Handshake(kShmProtocolVersion, options.auth_token, deadline));
    return c;
  }

 private:
  ShmConnection(net::Socket socket, const std::string& address, uint64_t max_batch_bytes,
                const net::WakeEvent* cancel)
      : ClientConnection(address, max_batch_bytes, cancel), socket_(std::move(socket)) {}

  absl::Status SendAll(absl::string_view bytes, const net::IoWait& wait) override {
    return net::SendAll(socket_.fd(), bytes, wait, peer_);
  }

  // Reads into the receive buffer, keeping the descriptors that come along (in order).
  absl::StatusOr<size_t> RecvSome(char* dst, size_t room, const net::IoWait& wait) override {
    received_.clear();
    absl::StatusOr<size_t> got =
        net::RecvSomeWithFds(socket_.fd(), dst, room, wait, peer_, &received_);
    for (net::Socket& fd : received_) fds_.push_back(std::move(fd));
    received_.clear();
    return got;
  }

  bool PeerHungUpOrSpoke() override { return net::PeerHungUpOrSpoke(socket_.fd()); }

  // The segments of released batches go back first, in the same write as the requests.
  void AppendBeforeRequests(std::string* out) override {
    released_.clear();
    {
      absl::MutexLock lock(&releases_->mu);
      released_.swap(releases_->ids);
    }
    if (released_.empty()) return;
    const auto h = frame::EncodeHeader(static_cast<frame::FrameType>(kShmReleaseFrameType),
                                       8 * released_.size());
    out->append(h.data(), h.size());
    out->append(reinterpret_cast<const char*>(released_.data()), 8 * released_.size());
  }

  // Every descriptor came with a SHM_BATCH frame: one left over came with a frame that has none.
  absl::Status CheckNothingLeft(bool handshake) override {
    if (fds_.empty()) return absl::OkStatus();
    if (handshake) return Malformed(absl::DataLossError("a descriptor with the handshake"));
    fds_.clear();
    return Malformed(absl::DataLossError("a descriptor with a frame that has none"));
  }

  Answer ReadBatchFrame(const frame::FrameHeader& h) override {
    if (h.type == kShmBatchFrameType) return ReadBatch(h.length);
    return UnexpectedFrame(h.type);
  }

  Answer ReadBatch(uint64_t length) {
    if (length != kShmBatchBodyBytes) {
      return Malformed(absl::DataLossError(absl::StrCat("SHM_BATCH frame of ", length, " bytes")));
    }
    RETURN_IF_ERROR(Fill(kShmBatchBodyBytes, BodyWait()));
    uint64_t fields[3];
    std::memcpy(fields, in_.data().data(), sizeof(fields));
    in_.Consume(kShmBatchBodyBytes);
    const uint64_t index = fields[0], size = fields[1], id = fields[2];
    // The descriptor came with the frame's first byte, so it has arrived by now.
    if (fds_.empty()) {
      return Malformed(absl::DataLossError("SHM_BATCH frame without a descriptor"));
    }
    net::Socket segment = std::move(fds_.front());
    fds_.pop_front();
    // The segment is ours now whatever happens: hand it back with the next request.
    auto give_back = [&] {
      absl::MutexLock lock(&releases_->mu);
      releases_->ids.push_back(id);
    };
    set_in_step(true);
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
        set_in_step(false);
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
      set_in_step(false);
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
  std::deque<net::Socket> fds_;        // descriptors received and not matched to a frame yet
  std::vector<net::Socket> received_;  // scratch for one read's descriptors
  std::vector<uint64_t> released_;     // scratch: the segment ids sent back with a call
  const std::shared_ptr<ReleaseQueue> releases_ = std::make_shared<ReleaseQueue>();
  absl::flat_hash_map<uint64_t, std::shared_ptr<ShmMapping>> cache_;  // segment id -> mapping
  size_t cached_bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataClient>> ConnectShmDataClient(const std::string& address,
                                                                 const DataClientOptions& options) {
  return PooledDataClient<ShmConnection>::Connect(
      address, options, [address, options](absl::Time deadline, const net::WakeEvent* cancel) {
        return ShmConnection::Open(address, options, deadline, cancel);
      });
}

}  // namespace croupier
