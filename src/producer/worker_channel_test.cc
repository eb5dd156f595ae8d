#include "src/producer/worker_channel.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// What the fake worker was asked.
struct Request {
  uint64_t epoch = 0, batch = 0, slot = 0, capacity = 0;
  std::vector<uint64_t> forget, ids;
  bool got_fd = false;
};

bool ReadAll(int fd, void* out, size_t size) {
  auto* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, p + got, size - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

void Answer(int fd, uint64_t code, uint64_t size, const std::string& message) {
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

TEST(ProducerWorkerChannelTest, AWorkersBatchIsAdoptedAndItsSlotPassedOnce) {
  FakeWorker worker;
  {
    WorkerChannel channel(worker.parent_fd, 4242, /*max_idle_slots=*/4);
    const std::vector<uint64_t> ids = {7, 8, 9};
    for (uint64_t g = 0; g < 3; ++g) {
      WorkerChannel::Made made = channel.Make(1, g, ids);
      auto* batch = std::get_if<absl::StatusOr<Batch>>(&made);
      ASSERT_NE(batch, nullptr) << "the worker died";
      ASSERT_TRUE(batch->ok()) << batch->status();
      EXPECT_EQ((*batch)->num_records(), 3u);
    }  // each batch is dropped before the next: its slot comes back idle
    channel.Close();
  }
  ASSERT_EQ(worker.requests.size(), 3u);
  EXPECT_TRUE(worker.requests[0].got_fd);
  EXPECT_FALSE(worker.requests[1].got_fd) << "a slot's memfd goes to the worker once";
  EXPECT_EQ(worker.requests[1].slot, worker.requests[0].slot);
  EXPECT_EQ(worker.requests[2].epoch, 1u);
  EXPECT_EQ(worker.requests[2].batch, 2u);
  EXPECT_EQ(worker.requests[2].ids, (std::vector<uint64_t>{7, 8, 9}));
}

TEST(ProducerWorkerChannelTest, AWorkersErrorIsItsCodeAndMessage) {
  FakeWorker worker([](const Request& r, int fd) {
    if (r.batch != 1) return true;
    Answer(fd, static_cast<uint64_t>(absl::StatusCode::kInvalidArgument), 0,
           "record 12: the transform raised ValueError");
    return false;
  });
  {
    WorkerChannel channel(worker.parent_fd, 4242, 4);
    const std::vector<uint64_t> ids = {12};
    WorkerChannel::Made failed = channel.Make(0, 1, ids);
    auto* error = std::get_if<absl::StatusOr<Batch>>(&failed);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(error->status().code(), absl::StatusCode::kInvalidArgument) << error->status();
    EXPECT_THAT(error->status().message(), HasSubstr("record 12: the transform raised"));
    // The slot went back: the next batch is made in it.
    WorkerChannel::Made next = channel.Make(0, 2, ids);
    ASSERT_TRUE(std::get<absl::StatusOr<Batch>>(next).ok());
    EXPECT_EQ(channel.slot_stats().created, 1u);
    channel.Close();
  }
}

TEST(ProducerWorkerChannelTest, AWorkerThatDiesIsADeathBeforeOrWhileMakingTheBatch) {
  // It dies while making batch 0 (its end closes without an answer).
  FakeWorker dying([](const Request&, int fd) {
    ::shutdown(fd, SHUT_RDWR);
    return false;
  });
  WorkerChannel channel(dying.parent_fd, 4242, 4);
  const std::vector<uint64_t> ids = {1};
  WorkerChannel::Made made = channel.Make(0, 0, ids);
  ASSERT_TRUE(std::holds_alternative<WorkerChannel::Died>(made));
  EXPECT_FALSE(std::get<WorkerChannel::Died>(made).before);
  // Asked again, it is already gone: dead before it was asked.
  made = channel.Make(0, 1, ids);
  ASSERT_TRUE(std::holds_alternative<WorkerChannel::Died>(made));
  EXPECT_TRUE(std::get<WorkerChannel::Died>(made).before);
  EXPECT_EQ(channel.slot_stats().slots, 1u) << "the slot went back idle";
}

TEST(ProducerWorkerChannelTest, ClosingTheChannelEndsAMakeThatWaits) {
  FakeWorker stuck([](const Request&, int) { return false; });  // never answers
  WorkerChannel channel(stuck.parent_fd, 4242, 4);
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    channel.CloseChannel();
  });
  const std::vector<uint64_t> ids = {1};
  WorkerChannel::Made made = channel.Make(0, 0, ids);
  closer.join();
  EXPECT_TRUE(std::holds_alternative<WorkerChannel::Died>(made));
}

TEST(ProducerWorkerChannelTest, AnAnswerOutOfStepIsAnErrorNamingTheWorker) {
  FakeWorker garbled([](const Request&, int fd) {
    const uint64_t words[3] = {uint64_t{1} << 40, 0, 0};
    ::send(fd, words, sizeof(words), MSG_NOSIGNAL);
    return false;
  });
  WorkerChannel channel(garbled.parent_fd, 4242, 4);
  const std::vector<uint64_t> ids = {1};
  WorkerChannel::Made made = channel.Make(0, 0, ids);
  auto* error = std::get_if<absl::StatusOr<Batch>>(&made);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(error->status().message(), HasSubstr("worker pid 4242"));
}

}  // namespace
}  // namespace croupier
