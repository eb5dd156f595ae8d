// The same-host shared-memory transport: batches travel as sealed memfd segments whose
// descriptors are passed over a Unix domain socket (SCM_RIGHTS); only the frame headers and the
// descriptor cross the socket, and the consumer's Batch is a read-only mapping of the segment
// (numpy arrays are views of it).
//
// Where the server listens: an abstract Unix socket (a name in the network namespace, no file):
// ShmAddressFor(tcp_address) beside a producer's TCP data server, so that a consumer holding the
// producer's advertised "host:port" finds it without any new field in the control plane. The
// abstract namespace is per network namespace, and names vanish with the process that bound
// them: a consumer that can connect shares the producer's kernel (descriptors can be passed),
// and a consumer on another host or in another network namespace cannot connect and falls back
// to TCP.
//
// Wire protocol: the TCP transport's (frame.h: HELLO, HELLO_OK, ERROR, GET_BATCH, GET_ANY, same
// token and error codes, pipelined requests; the version is kShmProtocolVersion) over a
// SOCK_STREAM Unix socket, plus two frames:
//   type 19 SHM_BATCH (server -> client), body 24 bytes:
//     0 u64 global batch index   8 u64 size (of the batch)   16 u64 segment id
//     The frame's first byte carries the segment's descriptor (SCM_RIGHTS). The segment is a memfd
//     of at least `size` bytes, sealed against shrinking, whose first `size` bytes are the batch
//     buffer (layout in croupier/batch.h). The segment is the client's until it releases it.
//   type 20 SHM_RELEASE (client -> server), body 8n bytes: n u64 segment ids the client no longer
//     uses (their batches were released). Sent just before a request; the server may then refill
//     those segments for later batches. An id the connection does not hold is malformed.
// Segments are recycled (a pool per server, bounded in free bytes) so that a batch costs the
// producer one memcpy into pages already allocated, and the client maps each segment once and
// keeps the mapping (a small cache per connection) while the server keeps reusing it. A batch
// that already lies at the start of a memfd (memfd_bytes.h: a map job's worker laid it out in a
// slot of the producer's, or a producer's maker in a memfd of its own) is not copied: that memfd is the segment, held until the client
// releases it, and retired (never written again) if the connection closes first.
//
// Reclaiming: a segment lives while the server's pool or lease holds it, or a client maps it.
// When a connection closes, the server drops the segments leased on it instead of reusing them
// (the client may still hold batches in them); the kernel frees each segment with its last
// descriptor and mapping: when every copy of the consumer's Batch (and every numpy array viewing
// it) is gone, or when the processes die. Nothing is ever created in /dev/shm or on a file
// system, so a crash leaves nothing behind.
#ifndef CROUPIER_SRC_TRANSPORT_SHM_TRANSPORT_H_
#define CROUPIER_SRC_TRANSPORT_SHM_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/string_view.h"
#include "src/net/socket.h"
#include "src/transport/transport.h"

namespace croupier {

// The version in the HELLO and HELLO_OK of the shared-memory socket: its own, so that a client
// and a server built from different versions of this file refuse each other at the handshake
// (FAILED_PRECONDITION), and a consumer in auto mode falls back to TCP. Bump it on any change.
// 1003 adds pipelining, as version 2 of the TCP protocol (frame.h); 1004 the challenge and
// response of version 3 (the token never crosses the socket, and a consumer with a token refuses
// a process that squats the name without it). A server accepts 1004 only.
inline constexpr uint32_t kShmProtocolVersion = 1004;
inline constexpr uint32_t kOldestShmProtocolVersion = 1004;
inline constexpr uint32_t kShmBatchFrameType = 19;
inline constexpr size_t kShmBatchBodyBytes = 24;
inline constexpr uint32_t kShmReleaseFrameType = 20;

// The abstract socket name of the shared-memory server paired with the TCP data server
// advertised as `tcp_address`: "@croupier-shm/<tcp_address>", or "@croupier-shm/h<hash>" when the
// address is too long for a socket name.
std::string ShmAddressFor(absl::string_view tcp_address);

// When a consumer uses shared memory.
enum class ShmMode {
  kAuto,  // when the producer offers it on this host; TCP otherwise
  kOn,    // always: a producer that cannot be reached through shared memory is an error
  kOff,   // never
};
// "auto", "on" or "off" (also "1"/"0", "true"/"false"); an empty `text` reads $CROUPIER_SHM, and
// an unset variable means auto. INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<ShmMode> ParseShmMode(absl::string_view text);

// A segment the server fills: a memfd sealed against shrinking, mapped read-write.
// Thread-compatible.
class ShmSegment {
 public:
  // A segment of at least `capacity` bytes (rounded up to whole pages) with a new id.
  // RESOURCE_EXHAUSTED naming the size when it cannot be made.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(size_t capacity);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint64_t id() const { return id_; }
  int fd() const { return fd_.fd(); }
  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  ShmSegment(uint64_t id, net::Socket fd, uint8_t* data, size_t capacity)
      : id_(id), fd_(std::move(fd)), data_(data), capacity_(capacity) {}
  const uint64_t id_;
  net::Socket fd_;
  uint8_t* const data_;
  const size_t capacity_;
};

// Free segments of one server, for reuse. Thread-safe.
class ShmSegmentPool {
 public:
  explicit ShmSegmentPool(size_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}
  // A free segment of at least `size` bytes (and not more than four times that), else a new one.
  absl::StatusOr<std::unique_ptr<ShmSegment>> Get(size_t size);
  // Takes a segment no client uses any more; drops it when the pool is full.
  void Put(std::unique_ptr<ShmSegment> segment);

 private:
  const size_t max_free_bytes_;
  absl::Mutex mu_;
  std::multimap<size_t, std::unique_ptr<ShmSegment>> free_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// A read-only mapping of a whole segment on the client. Thread-safe: immutable.
class ShmMapping {
 public:
  // Maps the segment behind `fd` (closed before returning). DATA_LOSS naming `peer` when it is
  // not a memfd sealed against shrinking of at least `min_size` bytes.
  static absl::StatusOr<std::shared_ptr<ShmMapping>> Map(net::Socket fd, uint64_t min_size,
                                                         absl::string_view peer);
  ~ShmMapping();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ShmMapping(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* const data_;
  const size_t size_;
};

// For tests: `bytes` in a new sealed segment of exactly that size, and the descriptor.
absl::StatusOr<net::Socket> MakeShmSegment(absl::string_view bytes);
// For tests: a Batch of the first `size` bytes of the segment behind `fd`, owning its mapping.
absl::StatusOr<Batch> MapShmSegment(net::Socket fd, uint64_t size, absl::string_view peer);

// What Transport::Shm() runs. The server listens on options.bind_address when it is an abstract
// name ("@..."), else on a fresh name "@croupier-shm/anon-<pid>-<n>" (DataServer::address gives
// it; port() is 0). The client's address is such a name.
absl::StatusOr<std::unique_ptr<DataServer>> StartShmDataServer(const DataServerOptions& options,
                                                               BatchSource* source);
absl::StatusOr<std::unique_ptr<DataClient>> ConnectShmDataClient(const std::string& address,
                                                                 const DataClientOptions& options);

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_SHM_TRANSPORT_H_
