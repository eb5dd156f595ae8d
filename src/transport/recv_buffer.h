// A user-space receive buffer for a framed byte stream: one read brings in whatever has arrived
// (several small frames, or a frame's header and its body together), and the frames are parsed
// from the buffer, so that a small frame costs one system call instead of one per field.
// Independent of the socket: the caller passes the read to use (plain, TLS, with descriptors).
#ifndef CROUPIER_SRC_TRANSPORT_RECV_BUFFER_H_
#define CROUPIER_SRC_TRANSPORT_RECV_BUFFER_H_

#include <cstddef>
#include <cstring>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/net/socket.h"

namespace croupier::net {

// Thread-compatible.
class RecvBuffer {
 public:
  // The default holds many small frames and the largest ERROR frame (frame.h).
  static constexpr size_t kDefaultCapacity = size_t{64} << 10;
  explicit RecvBuffer(size_t capacity = kDefaultCapacity);

  size_t capacity() const { return capacity_; }
  // The bytes received and not consumed yet.
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  absl::string_view data() const { return absl::string_view(buf_.get() + begin_, size()); }
  // Drops the first n buffered bytes (n <= size()).
  void Consume(size_t n);

  // Makes at least `n` bytes (n <= capacity()) available in data(), reading as much as fits
  // each time. UNAVAILABLE "connection closed by <peer> after <k> of <n> bytes" when the stream
  // ends first; the read's own errors as they are.
  absl::Status Fill(size_t n, ReadSomeFn read, absl::string_view peer);
  // One read into the free space, whatever has arrived: the number of bytes added, 0 at a clean
  // close. For a caller waiting for the first byte of a frame with a wait of its own.
  absl::StatusOr<size_t> ReadOnce(ReadSomeFn read);

  // Copies exactly n bytes of the stream into dst: what is buffered first, then the rest. A
  // short rest (below half the capacity) is read through the buffer, which may bring the next
  // frames along; a long one straight into dst, so that a large body is not copied twice.
  absl::Status Take(char* dst, size_t n, ReadSomeFn read, absl::string_view peer);

 private:
  // Moves the buffered bytes to the front.
  void Compact();

  const size_t capacity_;
  std::unique_ptr<char[]> buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace croupier::net

#endif  // CROUPIER_SRC_TRANSPORT_RECV_BUFFER_H_
