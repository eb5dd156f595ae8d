#include "src/transport/recv_buffer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace croupier::net {

RecvBuffer::RecvBuffer(size_t capacity)
    : capacity_(capacity), buf_(new char[capacity]) {}

void RecvBuffer::Consume(size_t n) {
  begin_ += n;
  if (begin_ == end_) begin_ = end_ = 0;
}

void RecvBuffer::Compact() {
  if (begin_ == 0) return;
  std::memmove(buf_.get(), buf_.get() + begin_, size());
  end_ -= begin_;
  begin_ = 0;
}

absl::StatusOr<size_t> RecvBuffer::ReadOnce(ReadSomeFn read) {
  if (end_ == capacity_) Compact();
  absl::StatusOr<size_t> got = read(buf_.get() + end_, capacity_ - end_);
  if (got.ok()) end_ += *got;
  return got;
}

absl::Status RecvBuffer::Fill(size_t n, ReadSomeFn read, absl::string_view peer) {
  if (size() >= n) return absl::OkStatus();
  if (n > capacity_) {
    return absl::InternalError(
        absl::StrCat("a frame field of ", n, " bytes exceeds the receive buffer of ", capacity_));
  }
  if (capacity_ - begin_ < n) Compact();
  while (size() < n) {
    const size_t had = size();
    absl::StatusOr<size_t> got = read(buf_.get() + end_, capacity_ - end_);
    if (!got.ok()) return got.status();
    if (*got == 0) {
      return absl::UnavailableError(
          absl::StrCat("connection closed by ", peer, " after ", had, " of ", n, " bytes"));
    }
    end_ += *got;
  }
  return absl::OkStatus();
}

absl::Status RecvBuffer::Take(char* dst, size_t n, ReadSomeFn read, absl::string_view peer) {
  const size_t buffered = std::min(n, size());
  if (buffered > 0) std::memcpy(dst, buf_.get() + begin_, buffered);
  Consume(buffered);
  size_t done = buffered;
  if (done == n) return absl::OkStatus();
  // The buffer is empty now.
  const size_t rest = n - done;
  if (rest < capacity_ / 2) {
    if (absl::Status s = Fill(rest, read, peer); !s.ok()) {
      if (absl::IsUnavailable(s) && size() < rest) {
        return absl::UnavailableError(absl::StrCat("connection closed by ", peer, " after ",
                                                   done + size(), " of ", n, " bytes"));
      }
      return s;
    }
    std::memcpy(dst + done, buf_.get() + begin_, rest);
    Consume(rest);
    return absl::OkStatus();
  }
  return ReadFull(dst, done, n, read, peer);
}

}  // namespace croupier::net
