// Tokens jobs on the in-process cluster: the dispatcher, producers and consumers of every other
// job, dealing packed sequences (docs/protocol.md §7).
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "src/testing/cluster_testing.h"
#include "src/testing/token_data.h"

namespace croupier::testing {
namespace {

// A hash of each sequence of a batch: its five rows.
std::vector<uint64_t> SequenceHashes(const BatchView& batch) {
  std::vector<uint64_t> out;
  for (uint64_t r = 0; r < batch.num_records(); ++r) {
    std::string rows;
    for (const char* name : kTokenColumns) {
      const ColumnView* column = batch.Find(name);
      const size_t row_bytes = column->dims[0] * sizeof(int32_t);
      rows.append(column->values.data() + r * row_bytes, row_bytes);
    }
    out.push_back(ContentHash(rows));
  }
  return out;
}

constexpr uint32_t kGlobalBatch = 120;
constexpr uint64_t kSteps = 12;

// Reads global steps [first, end) of a tokens job over `prefixes` with `world` ranks (a job of
// its own, created to start at global step `first`, as a resume does) and returns its sequences'
// hashes in global order: step by step, rank by rank.
std::vector<uint64_t> ReadSteps(TestCluster& cluster, const std::string& name,
                                const std::vector<std::string>& prefixes, v1::Packing packing,
                                uint32_t world, uint64_t first, uint64_t end) {
  v1::JobSpec spec = TokenJobSpec(name, prefixes, 32, kGlobalBatch, kSteps, world, packing);
  spec.set_start_batch(first * world);  // the first global batch of global step `first`
  // Web, code and books 3:1:1, then 1:1:2 from global step 7.
  for (auto [step, weights] :
       {std::tuple{0, std::vector<double>{3, 1, 1}}, std::tuple{7, std::vector<double>{1, 1, 2}}}) {
    v1::WeightChange* change = spec.mutable_tokens()->add_weights();
    change->set_first_step(step);
    for (double w : weights) change->add_weights(w);
  }
  const v1::JobInfo job = Must(cluster.CreateJob(spec));
  EXPECT_EQ(job.spec().batch_size(), kGlobalBatch / world);
  std::vector<std::unique_ptr<Consumer>> ranks;
  for (uint32_t r = 0; r < world; ++r) {
    ranks.push_back(Must(cluster.Connect(spec.name(), r, world, {.timeout = absl::Seconds(60)})));
    if (ranks.back() == nullptr) return {};
    EXPECT_TRUE(ranks.back()->StartEpoch(0, 0).ok());
  }
  std::vector<uint64_t> hashes;
  for (uint64_t step = first; step < end; ++step) {
    for (uint32_t r = 0; r < world; ++r) {
      std::optional<Batch> batch = Must(ranks[r]->Next());
      if (!batch.has_value()) {
        ADD_FAILURE() << "rank " << r << " of " << world << " ended before global step " << step;
        return hashes;
      }
      EXPECT_EQ(batch->num_records(), kGlobalBatch / world);
      CheckTokenBatch(batch->view(), packing == v1::PACKING_BEST_FIT);
      for (uint64_t h : SequenceHashes(batch->view())) hashes.push_back(h);
    }
  }
  for (auto& rank : ranks) rank->Close();
  return hashes;
}

// The guarantee no peer gives with packing and mixing: a run resumed at any world size that
// divides the global batch continues with the same sequences, bit for bit. 1 -> 3 -> 8 -> 5 ranks
// at B = 120, each resume at a global step, against one uninterrupted run at 1 rank; for both
// packings, with three sources of either dtype mixed 3:1:1 and then, from step 7, 1:1:2.
TEST(TokenClusterTest, AResumeAtAnyWorldSizeContinuesWithTheSameSequences) {
  auto cluster = Must(TestCluster::Start({.producers = 2}));
  ASSERT_NE(cluster, nullptr);
  const std::vector<std::string> prefixes = {
      WriteTokenSource(cluster->dir() + "/web", 0, 290, TokenDType::kUInt16),
      WriteTokenSource(cluster->dir() + "/code", 1, 150, TokenDType::kInt32),
      WriteTokenSource(cluster->dir() + "/books", 2, 90, TokenDType::kInt32)};
  for (v1::Packing packing : {v1::PACKING_CONCAT, v1::PACKING_BEST_FIT}) {
    SCOPED_TRACE(v1::Packing_Name(packing));
    const std::string name = v1::Packing_Name(packing);
    const std::vector<uint64_t> whole =
        ReadSteps(*cluster, name + "-whole", prefixes, packing, 1, 0, kSteps);
    ASSERT_EQ(whole.size(), kSteps * kGlobalBatch);
    std::vector<uint64_t> resumed;
    const std::vector<std::pair<uint32_t, uint64_t>> legs = {{1, 0}, {3, 3}, {8, 6}, {5, 9}};
    for (size_t leg = 0; leg < legs.size(); ++leg) {
      const uint64_t end = leg + 1 < legs.size() ? legs[leg + 1].second : kSteps;
      const auto [world, first] = legs[leg];
      for (uint64_t h : ReadSteps(*cluster, absl::StrCat(name, "-", world, "-from-", first),
                                  prefixes, packing, world, first, end)) {
        resumed.push_back(h);
      }
      ASSERT_FALSE(HasFailure());
    }
    ASSERT_EQ(resumed.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_EQ(resumed[i], whole[i]) << "global sequence " << i;
    }
  }
}

// Epoch 0 of tokens job `name` read on every rank at once, each on its own thread, `per_batch`
// apart, while `fault` runs 150 ms in: each rank's sequence hashes.
std::vector<std::vector<uint64_t>> ReadRanksThroughAFault(TestCluster& cluster,
                                                          const std::string& name, uint32_t world,
                                                          absl::Duration per_batch,
                                                          const std::function<void()>& fault) {
  std::vector<std::vector<uint64_t>> got(world);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto consumer = Must(
          cluster.Connect(name, r, world, {.prefetch_batches = 1, .timeout = absl::Seconds(60)}));
      if (!consumer || !consumer->StartEpoch(0, 0).ok()) return;
      while (true) {
        std::optional<Batch> batch = Must(consumer->Next());
        if (!batch.has_value()) break;
        CheckTokenBatch(batch->view(), /*best_fit=*/true);
        for (uint64_t h : SequenceHashes(batch->view())) got[r].push_back(h);
        absl::SleepFor(per_batch);
      }
      consumer->Close();
    });
  }
  if (fault) {
    absl::SleepFor(absl::Milliseconds(150));
    fault();
  }
  for (auto& t : threads) t.join();
  return got;
}

// A producer stopped mid-epoch (as if killed) and then the dispatcher crashed and restarted from
// its journal: every rank gets the sequences of a fault-free run, bit for bit.
TEST(TokenClusterTest, AStoppedProducerAndARestartedDispatcherChangeNoSequence) {
  auto run = [](bool faults) {
    auto cluster = Must(TestCluster::Start({.producers = 2, .rounds_per_task = 1}));
    if (cluster == nullptr) return std::vector<std::vector<uint64_t>>{};
    const std::vector<std::string> prefixes = {
        WriteTokenSource(cluster->dir() + "/web", 0, 290, TokenDType::kUInt16),
        WriteTokenSource(cluster->dir() + "/code", 1, 150, TokenDType::kInt32)};
    v1::JobSpec spec =
        TokenJobSpec("lm", prefixes, 32, kGlobalBatch, /*steps=*/30, 2, v1::PACKING_BEST_FIT);
    EXPECT_TRUE(cluster->CreateJob(spec).ok());
    TestCluster* c = cluster.get();
    return ReadRanksThroughAFault(*cluster, "lm", 2, absl::Milliseconds(20), [&] {
      if (!faults) return;
      c->StopProducer(0);
      absl::SleepFor(absl::Milliseconds(150));
      c->dispatcher().Crash();
      absl::SleepFor(absl::Milliseconds(300));  // calls retry
      EXPECT_TRUE(c->dispatcher().Restart().ok());
    });
  };
  const auto reference = run(false);
  ASSERT_EQ(reference.size(), 2u);
  ASSERT_EQ(reference[0].size(), 30u * kGlobalBatch / 2);
  EXPECT_EQ(run(true), reference);
}

}  // namespace
}  // namespace croupier::testing
