#include "src/producer/worker_channel.h"

#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/worker_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using testing::Answer;
using testing::FakeWorker;
using testing::Request;

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
  EXPECT_EQ(channel.slot_stats().idle, 1u) << "the slot went back idle";
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
