// A whole job through DispatcherImpl: fake producers pull tasks and serve batches, fake consumers
// locate and fetch their batches in order and acknowledge their positions, on a FakeClock. One
// producer dies halfway through a task, holding another; its tasks expire and go to the others.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

constexpr uint32_t kSlots = 2;
constexpr uint64_t kEpochs = 2;

struct FakeProducer {
  std::string address;
  uint64_t id = 0;
  bool alive = true;
  int serves_until_death = -1;  // dies right after this many more batches served; -1: never
  struct Held {
    v1::Task task;
    std::set<uint64_t> served;
  };
  std::map<uint64_t, Held> held;    // by task id
  std::vector<uint64_t> to_report;  // finished since the last heartbeat
};

struct FakeConsumer {
  uint32_t rank = 0;
  uint64_t id = 0;
  uint64_t epoch = 0;
  uint64_t step = 0;
};

class DispatcherSimulationTest : public testing::DispatcherTest {
 protected:
  void Heartbeat(FakeProducer& p) {
    const uint32_t free = p.held.size() >= kSlots ? 0 : kSlots - p.held.size();
    auto r = Producer(p.id, p.address, free, p.to_report);
    ASSERT_TRUE(r.ok()) << r.status();
    p.id = r->producer_id();
    p.to_report.clear();
    for (uint64_t id : r->revoked_tasks()) {
      // Every batch of it reached its consumer (some perhaps from a producer that died).
      ASSERT_TRUE(assigned_.contains(id));
      done_[id] = assigned_[id];
      p.held.erase(id);
    }
    for (const v1::Task& t : r->new_tasks()) {
      ASSERT_EQ(t.job(), "train");
      p.held[t.task_id()].task = t;
      assigned_[t.task_id()] = t;
    }
  }

  // Serves global batch g of `epoch` if `p` holds a task covering it.
  bool Serve(FakeProducer& p, uint64_t epoch, uint64_t g) {
    for (auto& [id, h] : p.held) {
      const v1::Task& t = h.task;
      if (t.epoch() != epoch || g < t.first_batch() || g >= t.first_batch() + t.num_batches()) {
        continue;
      }
      EXPECT_TRUE(h.served.insert(g).second) << "batch " << g << " served twice by task " << id;
      if (h.served.size() == t.num_batches()) {
        done_[id] = t;
        p.to_report.push_back(id);
        p.held.erase(id);
      }
      if (p.serves_until_death > 0 && --p.serves_until_death == 0) {
        p.alive = false;
        for (const auto& [held_id, unused] : p.held) dead_tasks_.insert(held_id);
      }
      return true;
    }
    return false;
  }

  // Tries to fetch the consumer's next batch; false if it has to wait.
  bool Fetch(FakeConsumer& c, std::vector<FakeProducer>& producers, const v1::JobInfo& job) {
    if (c.epoch >= kEpochs) return false;
    const uint64_t g = c.step * job.spec().num_consumers() + c.rank;
    auto where = Locate("train", c.epoch, g, 1);
    EXPECT_TRUE(where.ok()) << where.status();
    if (!where.ok() || where->tasks_size() != 1) return false;
    const v1::TaskLocation& loc = where->tasks(0);
    EXPECT_LE(loc.task().first_batch(), g);
    EXPECT_GT(loc.task().first_batch() + loc.task().num_batches(), g);
    EXPECT_FALSE(loc.finished()) << "batch " << g << " of epoch " << c.epoch;
    if (loc.producer_address().empty()) return false;  // not assigned yet: ask again
    for (FakeProducer& p : producers) {
      if (p.address != loc.producer_address() || !p.alive) continue;
      if (!Serve(p, c.epoch, g)) return false;
      EXPECT_TRUE(delivered_[c.epoch].insert(g).second) << "batch " << g << " delivered twice";
      if (++c.step == job.steps_per_epoch()) {
        ++c.epoch;
        c.step = 0;
      }
      return true;
    }
    return false;  // the producer is gone: ask again later
  }

  std::map<uint64_t, v1::Task> assigned_;  // every task ever assigned, by id
  std::map<uint64_t, v1::Task> done_;      // finished by their producer, or revoked as delivered
  std::set<uint64_t> dead_tasks_;          // held by the producer that died
  std::map<uint64_t, std::set<uint64_t>> delivered_;  // epoch -> global batches
};

TEST_F(DispatcherSimulationTest, EveryBatchOfTwoEpochsIsCoveredByExactlyOneFinishedTask) {
  DispatcherOptions options;
  options.rounds_per_task = 1;  // tasks of 4 batches: 12 per epoch
  Recreate(options);
  WriteData({30, 40, 30});  // 100 records; batches of 2 for 4 consumers: 48 batches per epoch
  absl::StatusOr<v1::JobInfo> job = Create(Spec("train", 2, 4, kEpochs));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->batches_per_epoch(), 48u);
  ASSERT_EQ(job->batches_per_task(), 4u);

  std::vector<FakeProducer> producers(3);
  for (int i = 0; i < 3; ++i) producers[i].address = "producer-" + std::to_string(i) + ":7000";
  // Producer 2 first takes [16, 20) and [20, 24); it dies after serving two batches of the first.
  producers[2].serves_until_death = 2;
  std::vector<FakeConsumer> consumers(4);
  for (uint32_t r = 0; r < 4; ++r) {
    consumers[r].rank = r;
    auto reg = Consumer(0, "train", r, 4);
    ASSERT_TRUE(reg.ok()) << reg.status();
    consumers[r].id = reg->consumer_id();
  }

  int round = 0;
  for (; round < 500; ++round) {
    for (FakeProducer& p : producers) {
      if (p.alive) Heartbeat(p);
    }
    for (FakeConsumer& c : consumers) {
      for (int k = 0; k < 3 && Fetch(c, producers, *job); ++k) {
      }
      ASSERT_TRUE(Consumer(c.id, "train", c.rank, 4, c.epoch, c.step).ok());
    }
    clock_->Advance(absl::Milliseconds(500));
    impl_->Tick();
    bool done = true;
    for (const FakeConsumer& c : consumers) done = done && c.epoch == kEpochs;
    for (const FakeProducer& p : producers) {
      done = done && (!p.alive || (p.held.empty() && p.to_report.empty()));
    }
    if (done) break;
  }
  ASSERT_LT(round, 500) << "the job did not finish";
  EXPECT_FALSE(producers[2].alive);
  EXPECT_EQ(dead_tasks_.size(), 2u);
  // The dead producer held up its tasks' batches for its timeout: 10 s of 0.5 s rounds.
  EXPECT_GT(round, 20);

  // Every global batch of both epochs is covered by exactly one finished task...
  std::map<uint64_t, std::vector<int>> cover;
  for (const auto& [id, t] : done_) {
    EXPECT_FALSE(dead_tasks_.contains(id));
    cover[t.epoch()].resize(job->batches_per_epoch());
    for (uint64_t g = t.first_batch(); g < t.first_batch() + t.num_batches(); ++g) {
      ++cover[t.epoch()][g];
    }
  }
  ASSERT_EQ(cover.size(), kEpochs);
  for (uint64_t e = 0; e < kEpochs; ++e) {
    for (uint64_t g = 0; g < job->batches_per_epoch(); ++g) {
      EXPECT_EQ(cover[e][g], 1) << "epoch " << e << " batch " << g;
    }
    // ...and was delivered once, to its consumer (checked in Fetch).
    EXPECT_EQ(delivered_[e].size(), job->batches_per_epoch());
  }
  EXPECT_EQ(done_.size() + dead_tasks_.size(), assigned_.size());

  // The dispatcher agrees: both epochs finished, nothing outstanding, everyone acknowledged.
  for (uint64_t e = 0; e < kEpochs; ++e) {
    auto where = Locate("train", e, 0, job->batches_per_epoch());
    ASSERT_TRUE(where.ok());
    EXPECT_TRUE(where->epoch_finished());
    ASSERT_EQ(where->tasks_size(), 1);
    EXPECT_TRUE(where->tasks(0).finished());
  }
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->producers_size(), 2);  // the dead one expired
  for (const v1::ProducerStatus& p : status->producers()) EXPECT_TRUE(p.tasks().empty());
  for (const v1::ConsumerStatus& c : status->consumers()) {
    EXPECT_EQ(c.epoch(), kEpochs);
    EXPECT_EQ(c.step(), 0u);
  }
  EXPECT_EQ(impl_->StateDebugString().find("orphan"), std::string::npos);
  auto more = Producer(producers[0].id, producers[0].address, kSlots);
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(more->new_tasks().empty());
}

}  // namespace
}  // namespace croupier
