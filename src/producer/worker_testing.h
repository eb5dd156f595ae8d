// The tests' worker process: the worker's side of a map job's worker channel
// (worker_channel.h) on a thread, as python/croupier/map/zygote.py's _worker_main does it.
#ifndef CROUPIER_SRC_PRODUCER_WORKER_TESTING_H_
#define CROUPIER_SRC_PRODUCER_WORKER_TESTING_H_

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "croupier/batch.h"
#include "gtest/gtest.h"

namespace croupier::testing {

// What the fake worker was asked.
struct Request {
  uint64_t epoch = 0, batch = 0, slot = 0, capacity = 0;
  std::vector<uint64_t> forget, ids;
  bool got_fd = false;
};

inline bool ReadAll(int fd, void* out, size_t size) {
  auto* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, p + got, size - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

inline void Answer(int fd, uint64_t code, uint64_t size, const std::string& message) {
  const uint64_t words[3] = {16 + message.size(), code, size};
  std::string out(reinterpret_cast<const char*>(words), sizeof(words));
  out += message;
  ASSERT_EQ(::send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
}

// A worker process's side of the channel on a thread, as python/croupier/map/zygote.py's
// _worker_main does it: each request's batch is `num_records` uint8 values, each the batch's
// first record id, laid out in the slot; or what `reply` says instead.
class FakeWorker {
 public:
  // reply(request, fd): true to answer with the batch; false if it answered (or closed) itself.
  using Reply = std::function<bool(const Request&, int fd)>;
  explicit FakeWorker(Reply reply = nullptr) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    parent_fd = fds[0];
    fd_ = fds[1];
    thread_ = std::thread([this, reply] { Serve(reply); });
  }
  ~FakeWorker() {
    thread_.join();
    ::close(fd_);
    for (auto& [id, fd] : slots_) ::close(fd);
  }
  int parent_fd = -1;  // the channel's end, for the WorkerChannel to own
  std::vector<Request> requests;

 private:
  void Serve(const Reply& reply) {
    while (true) {
      uint64_t length = 0;
      char control[CMSG_SPACE(sizeof(int))] = {};
      iovec iov{&length, sizeof(length)};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      if (::recvmsg(fd_, &msg, 0) != sizeof(length)) return;  // closed
      std::vector<uint64_t> words(length / 8);
      if (!ReadAll(fd_, words.data(), length)) return;
      Request r{.epoch = words[0], .batch = words[1], .slot = words[2], .capacity = words[3]};
      r.forget.assign(words.begin() + 5, words.begin() + 5 + words[4]);
      r.ids.assign(words.begin() + 5 + words[4], words.end());
      if (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr && c->cmsg_type == SCM_RIGHTS) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c), sizeof(fd));
        slots_[r.slot] = fd;
        r.got_fd = true;
      }
      requests.push_back(r);
      if (reply && !reply(r, fd_)) continue;
      const std::vector<uint8_t> values(r.ids.size(), static_cast<uint8_t>(r.ids.at(0)));
      ColumnData column;
      column.name = "x";
      column.dtype = DType::kUInt8;
      column.num_values = values.size();
      column.values = absl::string_view(reinterpret_cast<const char*>(values.data()), values.size());
      void* mapped = nullptr;
      const int slot_fd = slots_.at(r.slot);
      auto in_slot = [&](size_t size) -> std::shared_ptr<uint8_t> {
        EXPECT_LE(size, r.capacity);
        mapped = ::mmap(nullptr, r.capacity, PROT_READ | PROT_WRITE, MAP_SHARED, slot_fd, 0);
        return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(mapped), [](uint8_t*) {});
      };
      absl::StatusOr<Batch> batch = Batch::FromColumns(values.size(), {&column, 1}, in_slot);
      ASSERT_TRUE(batch.ok()) << batch.status();
      const size_t size = batch->bytes().size();
      batch = absl::UnknownError("dropped");
      ::munmap(mapped, r.capacity);
      Answer(fd_, 0, size, "");
    }
  }

  int fd_ = -1;
  std::map<uint64_t, int> slots_;
  std::thread thread_;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_PRODUCER_WORKER_TESTING_H_
