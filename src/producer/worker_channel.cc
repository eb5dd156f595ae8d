#include "src/producer/worker_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace croupier {
namespace {

constexpr size_t kWord = sizeof(uint64_t);
constexpr size_t kRequestWords = 5;  // epoch, batch, slot id, capacity, F
constexpr size_t kAnswerWords = 2;   // code, size
// The largest answer a worker may send: its error message with a short traceback.
constexpr uint64_t kMaxAnswerBytes = uint64_t{1} << 20;

void PutWord(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), kWord);
}

uint64_t GetWord(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, kWord);
  return v;
}

// Sends all of `data`, `fd_to_pass` (if >= 0) on its first byte. False once the channel is closed.
bool SendAll(int fd, absl::string_view data, int fd_to_pass) {
  size_t sent = 0;
  if (fd_to_pass >= 0) {
    iovec iov{const_cast<char*>(data.data()), data.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd_to_pass, sizeof(int));
    ssize_t n;
    do {
      n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    sent = static_cast<size_t>(n);
  }
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes into `out`. False at the end of the channel or on an error.
bool ReadAll(int fd, char* out, size_t size) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Whether `fd` has something to read (or has closed) before `deadline`.
bool ReadableBy(int fd, absl::Time deadline) {
  while (true) {
    int wait_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      wait_ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60000));
    }
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, wait_ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the read that follows says what is wrong
  }
}

}  // namespace

WorkerChannel::WorkerChannel(int fd, int pid, size_t max_idle_slots)
    : fd_(fd), pid_(pid), slots_(max_idle_slots) {}

WorkerChannel::~WorkerChannel() {
  Close();
  ::close(fd_);
}

WorkerChannel::Made WorkerChannel::Make(uint64_t epoch, uint64_t batch,
                                        absl::Span<const uint64_t> ids, absl::Duration timeout) {
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  absl::StatusOr<BatchSlots::Lease> lease = slots_.Acquire(last_size_);
  if (!lease.ok()) return lease.status();
  const std::vector<uint64_t> forget = slots_.TakeFreed();
  std::string request;
  request.reserve(kWord * (1 + kRequestWords + forget.size() + ids.size()));
  PutWord(request, kWord * (kRequestWords + forget.size() + ids.size()));
  for (uint64_t v : {epoch, batch, lease->id, static_cast<uint64_t>(lease->capacity),
                     static_cast<uint64_t>(forget.size())}) {
    PutWord(request, v);
  }
  for (uint64_t v : forget) PutWord(request, v);
  for (uint64_t v : ids) PutWord(request, v);
  if (!SendAll(fd_, request, lease->fresh ? lease->fd : -1)) {
    slots_.Release(lease->id);
    return Died{.before = true};
  }
  if (!ReadableBy(fd_, deadline)) {
    slots_.Release(lease->id);  // freed with the channel, which is closed with the worker
    return Died{.before = false, .stuck = true};
  }
  char head[kWord * (1 + kAnswerWords)];
  if (!ReadAll(fd_, head, sizeof(head))) {
    slots_.Release(lease->id);
    return Died{.before = false};
  }
  const uint64_t length = GetWord(head);
  const uint64_t code = GetWord(head + kWord);
  const uint64_t size = GetWord(head + 2 * kWord);
  if (length < kAnswerWords * kWord || length - kAnswerWords * kWord > kMaxAnswerBytes) {
    slots_.Release(lease->id);
    CloseChannel();  // out of step: nothing more it says can be read
    return absl::InternalError(absl::StrCat("worker pid ", pid_, " answered ", length,
                                            " bytes, not an answer of the worker channel"));
  }
  std::string message(length - kAnswerWords * kWord, '\0');
  if (!ReadAll(fd_, message.data(), message.size())) {
    slots_.Release(lease->id);
    return Died{.before = false};
  }
  if (code != 0) {
    slots_.Release(lease->id);
    const auto status_code = code <= static_cast<uint64_t>(absl::StatusCode::kUnauthenticated)
                                 ? static_cast<absl::StatusCode>(code)
                                 : absl::StatusCode::kInternal;
    return absl::Status(status_code, message);
  }
  last_size_ = size;
  absl::StatusOr<Batch> made = slots_.Adopt(lease->id, size);
  if (!made.ok()) {
    // Not a batch: a bug, or a transform that wrote into the slot.
    return absl::Status(made.status().code(),
                        absl::StrCat("worker pid ", pid_, ": ", made.status().message()));
  }
  return made;
}

void WorkerChannel::CloseChannel() { ::shutdown(fd_, SHUT_RDWR); }

void WorkerChannel::Close() {
  CloseChannel();
  slots_.Close();
}

}  // namespace croupier
