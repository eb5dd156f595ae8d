#include "src/producer/worker_pool.h"

#include <sys/socket.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/producer/worker_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using testing::FakeWorker;
using testing::Request;

// Fake worker processes, started by the pool's spawn: pids 1001, 1002, ... Each dies (closes its
// channel without an answer) when `dies` says so for the request it got, and is stuck (gives no
// answer, and ends once the pool closes its channel) when `hangs` says so.
class FakeProcesses {
 public:
  explicit FakeProcesses(std::function<bool(const Request&)> dies = nullptr,
                         std::function<bool(const Request&)> hangs = nullptr)
      : dies_(std::move(dies)), hangs_(std::move(hangs)) {}

  WorkerPool::Options Options(size_t workers, size_t max_deaths = 10,
                              absl::Duration batch_timeout = absl::InfiniteDuration()) {
    WorkerPool::Options o;
    o.workers = workers;
    o.max_deaths = max_deaths;
    o.batch_timeout = batch_timeout;
    o.spawn = [this](size_t) -> absl::StatusOr<WorkerPool::Started> {
      absl::MutexLock lock(&mu_);
      if (spawn_fails_) return absl::UnavailableError("the zygote is gone");
      const int pid = 1001 + static_cast<int>(workers_.size());
      auto worker = std::make_unique<FakeWorker>([this, pid](const Request& r, int fd) {
        if (dies_ && dies_(r)) {
          ::shutdown(fd, SHUT_RDWR);
          return false;
        }
        if (hangs_ && hangs_(r)) return false;
        absl::MutexLock lock(&mu_);
        made_[pid].push_back(r.batch);
        return true;
      });
      const int fd = worker->parent_fd;
      workers_.push_back(std::move(worker));
      return WorkerPool::Started{.pid = pid, .fd = fd};
    };
    o.bury = [](int) { return std::string("killed by signal 9"); };
    o.kill = [this](int pid) {
      absl::MutexLock lock(&mu_);
      killed_.push_back(pid);
    };
    o.on_death = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      deaths.push_back(line);
    };
    return o;
  }
  void FailSpawns() {
    absl::MutexLock lock(&mu_);
    spawn_fails_ = true;
  }
  size_t spawned() {
    absl::MutexLock lock(&mu_);
    return workers_.size();
  }
  // The batches worker `pid` answered, in order.
  std::vector<uint64_t> made(int pid) {
    absl::MutexLock lock(&mu_);
    return made_[pid];
  }

  // The pids of the stuck workers the pool killed, in order.
  std::vector<int> killed() {
    absl::MutexLock lock(&mu_);
    return killed_;
  }

  std::vector<std::string> deaths;  // the on_death lines

 private:
  std::function<bool(const Request&)> dies_, hangs_;
  std::vector<int> killed_;
  absl::Mutex mu_;
  bool spawn_fails_ = false;
  std::map<int, std::vector<uint64_t>> made_;
  // Destroyed after the pool (declared before it in each test): each thread ends once the pool
  // has closed its channel.
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

const std::vector<uint64_t> kIds = {3, 4};

TEST(ProducerWorkerPoolTest, MakesBatchesOnItsWorkersInTurn) {
  FakeProcesses processes;
  auto pool = WorkerPool::Start(processes.Options(2));
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->pids(), (std::vector<int>{1001, 1002}));
  for (uint64_t g = 0; g < 4; ++g) {
    absl::StatusOr<Batch> batch = (*pool)->Make(0, g, kIds);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->num_records(), 2u);
  }
  // First in, first out: each idle worker takes its turn.
  EXPECT_EQ(processes.made(1001), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(processes.made(1002), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ((*pool)->Broken(), std::nullopt);
  (*pool)->Close();
  EXPECT_EQ((*pool)->Make(0, 5, kIds).status().code(), absl::StatusCode::kUnavailable);
}

TEST(ProducerWorkerPoolTest, ADeadWorkerIsReplacedAndItsBatchMadeAgain) {
  std::atomic<int> deaths{0};
  FakeProcesses processes([&](const Request& r) { return r.batch == 5 && deaths++ == 0; });
  auto pool = WorkerPool::Start(processes.Options(1));
  ASSERT_TRUE(pool.ok()) << pool.status();
  absl::StatusOr<Batch> batch = (*pool)->Make(0, 5, kIds);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ((*pool)->pids(), (std::vector<int>{1002}));
  ASSERT_EQ(processes.deaths.size(), 1u);
  EXPECT_EQ(processes.deaths[0],
            "croupier produce: worker 0 (pid 1001) died (killed by signal 9) while making batch 5 "
            "of epoch 0; replaced by pid 1002, which makes the batch again");
}

TEST(ProducerWorkerPoolTest, ABatchThatKillsTwoWorkersFailsAndIsNotTriedAgain) {
  FakeProcesses processes([](const Request& r) { return r.batch == 7; });
  auto pool = WorkerPool::Start(processes.Options(1));
  ASSERT_TRUE(pool.ok()) << pool.status();
  absl::StatusOr<Batch> failed = (*pool)->Make(2, 7, kIds);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal) << failed.status();
  EXPECT_THAT(failed.status().message(),
              HasSubstr("batch 7 of epoch 2 was tried twice and killed its worker both times: "
                        "worker pid 1001 (killed by signal 9), then worker pid 1002"));
  EXPECT_EQ(processes.spawned(), 3u) << "the pool stays at its size";
  absl::StatusOr<Batch> again = (*pool)->Make(2, 7, kIds);
  EXPECT_THAT(again.status().message(), HasSubstr("(not tried again)"));
  EXPECT_EQ(processes.spawned(), 3u) << "no worker more was killed";
  EXPECT_TRUE((*pool)->Make(2, 8, kIds).ok()) << "the other batches go on";
}

TEST(ProducerWorkerPoolTest, AStuckWorkerIsKilledAndReplacedAndItsBatchMadeAgain) {
  std::atomic<int> stuck{0};
  FakeProcesses processes(nullptr, [&](const Request& r) { return r.batch == 5 && stuck++ == 0; });
  auto pool = WorkerPool::Start(processes.Options(1, 10, absl::Milliseconds(200)));
  ASSERT_TRUE(pool.ok()) << pool.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<Batch> batch = (*pool)->Make(0, 5, kIds);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(processes.killed(), (std::vector<int>{1001}));
  EXPECT_EQ((*pool)->pids(), (std::vector<int>{1002}));
  ASSERT_EQ(processes.deaths.size(), 1u);
  EXPECT_EQ(processes.deaths[0],
            "croupier produce: worker 0 (pid 1001) died (stuck: no answer within 0.2 s, so "
            "killed; killed by signal 9) while making batch 5 of epoch 0; replaced by pid 1002, "
            "which makes the batch again");
  EXPECT_TRUE((*pool)->Make(0, 6, kIds).ok()) << "the replacement goes on";
}

TEST(ProducerWorkerPoolTest, ABatchThatHangsTwoWorkersFailsNamingTheTimeout) {
  FakeProcesses processes(nullptr, [](const Request& r) { return r.batch == 3; });
  auto pool = WorkerPool::Start(processes.Options(1, 10, absl::Milliseconds(100)));
  ASSERT_TRUE(pool.ok()) << pool.status();
  absl::StatusOr<Batch> failed = (*pool)->Make(1, 3, kIds);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal) << failed.status();
  EXPECT_THAT(failed.status().message(),
              HasSubstr("batch 3 of epoch 1 was tried twice and killed its worker both times: "
                        "worker pid 1001 (stuck: no answer within 0.1 s, so killed; killed by "
                        "signal 9), then worker pid 1002 (stuck"));
  EXPECT_THAT(failed.status().message(), HasSubstr("may crash or hang the source"));
  EXPECT_EQ(processes.killed(), (std::vector<int>{1001, 1002}));
  EXPECT_TRUE((*pool)->Make(1, 4, kIds).ok()) << "the other batches go on";
}

TEST(ProducerWorkerPoolTest, ABatchTimeoutOfZeroIsRefused) {
  FakeProcesses processes;
  auto pool = WorkerPool::Start(processes.Options(1, 10, absl::ZeroDuration()));
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument) << pool.status();
}

TEST(ProducerWorkerPoolTest, ReplacingStopsPastTheDeathLimitAndThePoolSaysWhyItIsBroken) {
  FakeProcesses processes([](const Request&) { return true; });  // every worker dies
  auto pool = WorkerPool::Start(processes.Options(1, /*max_deaths=*/2));
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->Make(0, 0, kIds).status().code(), absl::StatusCode::kInternal);  // 2 deaths
  absl::StatusOr<Batch> last = (*pool)->Make(0, 1, kIds);  // the third death: not replaced
  EXPECT_EQ(last.status().code(), absl::StatusCode::kUnavailable) << last.status();
  EXPECT_THAT(last.status().message(),
              HasSubstr("3 workers of this producer died within 60 s, more than the 2 it "
                        "replaces: it replaces no more"));
  ASSERT_TRUE((*pool)->Broken().has_value());
  EXPECT_THAT(*(*pool)->Broken(), HasSubstr("it replaces no more"));
  EXPECT_THAT((*pool)->Make(0, 2, kIds).status().message(),
              HasSubstr("this producer has no worker left to make batch 2 of epoch 0"));
}

TEST(ProducerWorkerPoolTest, AWorkerThatCannotBeReplacedStopsReplacingNamingWhy) {
  FakeProcesses processes([](const Request& r) { return r.batch == 1; });
  auto pool = WorkerPool::Start(processes.Options(1));
  ASSERT_TRUE(pool.ok()) << pool.status();
  processes.FailSpawns();
  absl::StatusOr<Batch> failed = (*pool)->Make(0, 1, kIds);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_THAT(failed.status().message(),
              HasSubstr("worker pid 1001 (killed by signal 9) died making batch 1 of epoch 0, "
                        "which this producer does not make again: the zygote is gone"));
  EXPECT_EQ((*pool)->Broken(), std::optional<std::string>("the zygote is gone"));
}

TEST(ProducerWorkerPoolTest, AStartThatCannotSpawnItsWorkersFails) {
  FakeProcesses processes;
  processes.FailSpawns();
  auto pool = WorkerPool::Start(processes.Options(2));
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kUnavailable) << pool.status();
  EXPECT_THAT(pool.status().message(), HasSubstr("the zygote is gone"));
}

}  // namespace
}  // namespace croupier
