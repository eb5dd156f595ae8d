#include "src/producer/tfrecord_maker.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/producer/producer_testing.h"

namespace croupier {
namespace {

using ::croupier::testing::IdsOf;
using ::croupier::testing::JobOptions;
using ::croupier::testing::MakeJob;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::WriteDataset;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

std::unique_ptr<TfrecordBatchMaker> MustCreate(const v1::JobInfo& job, IndexCache& cache) {
  auto maker = TfrecordBatchMaker::Create(job, cache);
  EXPECT_TRUE(maker.ok()) << maker.status();
  return maker.ok() ? *std::move(maker) : nullptr;
}

// Flips one bit of byte `offset` of `path`.
void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(ProducerBatchMakerTest, BatchesHoldThePlannedRecordsInEveryMode) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {37, 0, 50, 9};  // an empty file holds no ids
  const auto paths = WriteDataset(tmp.path(), counts);
  IndexCache cache(tmp.Join("index"));
  for (const char* shuffle : {"none", "global", "blocks"}) {
    for (const char* remainder : {"drop", "pad"}) {
      JobOptions o;
      o.shuffle = shuffle;
      o.remainder = remainder;
      o.batch_size = 5;
      o.num_consumers = 3;
      o.block_size = 4;
      o.window_blocks = 3;
      const v1::JobInfo job = MakeJob(paths, counts, o);
      auto maker = MustCreate(job, cache);
      ASSERT_NE(maker, nullptr);
      ASSERT_EQ(maker->batches_per_epoch(), job.batches_per_epoch());
      for (uint64_t epoch : {0, 1, 5}) {
        auto plan = EpochPlan::Create(maker->plan_spec(), epoch);
        ASSERT_TRUE(plan.ok()) << plan.status();
        for (uint64_t g = 0; g < plan->num_batches(); ++g) {
          auto batch = maker->Make(epoch, g);
          ASSERT_TRUE(batch.ok()) << batch.status();
          const std::vector<uint64_t> ids = IdsOf(*batch);
          ASSERT_EQ(ids, plan->BatchRecords(g)) << shuffle << " " << remainder << " " << g;
          // The other features follow their record, including the variable-length one.
          const ColumnView* tokens = batch->view().Find("tokens");
          ASSERT_NE(tokens, nullptr);
          for (size_t r = 0; r < ids.size(); ++r) {
            EXPECT_EQ(tokens->row_splits[r + 1] - tokens->row_splits[r], ids[r] % 4);
          }
          EXPECT_EQ(batch->view().Find("name")->bytes(0), absl::StrCat("record-", ids[0]));
        }
      }
    }
  }
}

TEST(ProducerBatchMakerTest, DefaultsFillEmptySettings) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {40};
  const auto paths = WriteDataset(tmp.path(), counts);
  JobOptions o;
  o.shuffle = "";
  o.remainder = "";
  o.num_consumers = 0;
  IndexCache index(tmp.Join("index"));
  auto maker = TfrecordBatchMaker::Create(MakeJob(paths, counts, o), index);
  ASSERT_TRUE(maker.ok()) << maker.status();
  const PlanSpec* spec = &(*maker)->plan_spec();
  EXPECT_EQ(spec->shuffle, ShuffleMode::kGlobal);
  EXPECT_EQ(spec->remainder, Remainder::kDrop);
  EXPECT_EQ(spec->block_size, 1024u);
  EXPECT_EQ(spec->window_blocks, 16u);
  EXPECT_EQ(spec->num_consumers, 1u);
  EXPECT_EQ(spec->num_records, 40u);
  // No batches per task: one round (a division by zero in JobConfig::TaskStart before).
  EXPECT_EQ((*maker)->config().batches_per_task, 1u);
  EXPECT_EQ((*maker)->config().TaskStart(0, 7), 7u);
}

TEST(ProducerBatchMakerTest, SameBytesAcrossInstancesAndThreads) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {30, 45};
  const auto paths = WriteDataset(tmp.path(), counts);
  const v1::JobInfo job = MakeJob(paths, counts);
  IndexCache cache_a(tmp.Join("index-a"));
  IndexCache cache_b(tmp.Join("index-b"));
  auto a = MustCreate(job, cache_a);
  auto b = MustCreate(job, cache_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const uint64_t n = a->batches_per_epoch();
  std::vector<uint64_t> expected;
  for (uint64_t g = 0; g < n; ++g) expected.push_back(a->Make(2, g)->ContentHash());

  // Four threads make every batch of b in different orders, twice.
  std::vector<std::vector<uint64_t>> got(4, std::vector<uint64_t>(n));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> order(2 * n);
      for (uint64_t i = 0; i < 2 * n; ++i) order[i] = i % n;
      std::shuffle(order.begin(), order.end(), std::mt19937_64(t));
      for (uint64_t g : order) {
        auto batch = b->Make(2, g);
        if (batch.ok()) got[t][g] = batch->ContentHash();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], expected) << "thread " << t;
  // Another epoch is another order.
  EXPECT_NE(a->Make(3, 0)->ContentHash(), expected[0]);
}

TEST(ProducerBatchMakerTest, LargeBatchesReuseTheBuffersOfBatchesThatAreGone) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {64};
  // 32 records of 4 KiB: batches of about 130 KiB, pooled
  // (TfrecordBatchMaker::kMinPooledBatchBytes).
  const auto paths = WriteDataset(tmp.path(), counts, [](int64_t id) {
    const float f = static_cast<float>(id);
    return EncodeExample({{"id", Feature::Ints({id})},
                          {"pair", Feature::Floats({f, -f})},
                          {"tokens", Feature::Ints({id, id})},
                          {"name", Feature::Bytes({std::string(4096, 'a' + id % 26)})}});
  });
  JobOptions o;
  o.batch_size = 32;
  o.num_consumers = 1;
  IndexCache cache(tmp.Join("index"));
  auto maker = MustCreate(MakeJob(paths, counts, o), cache);
  ASSERT_NE(maker, nullptr);
  const void* first = nullptr;
  uint64_t first_hash = 0;
  {
    absl::StatusOr<Batch> a = maker->Make(0, 0);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_GE(a->bytes().size(), TfrecordBatchMaker::kMinPooledBatchBytes);
    first = a->bytes().data();
    first_hash = a->ContentHash();
  }
  // The first batch is gone: the next one is laid out in its buffer, and is right.
  absl::StatusOr<Batch> b = maker->Make(0, 1);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(static_cast<const void*>(b->bytes().data()), first);
  EXPECT_NE(b->ContentHash(), first_hash);
  std::vector<uint64_t> ids = IdsOf(*b);
  std::sort(ids.begin(), ids.end());
  ASSERT_EQ(ids.size(), 32u);
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
  // While b lives, another batch gets another buffer.
  absl::StatusOr<Batch> c = maker->Make(0, 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(static_cast<const void*>(c->bytes().data()), first);
  EXPECT_EQ(c->ContentHash(), first_hash);
}

// The batch of `epoch` holding record `id`.
uint64_t BatchHolding(const BatchMaker& maker, uint64_t epoch, uint64_t id) {
  auto plan = *EpochPlan::Create(maker.plan_spec(), epoch);
  for (uint64_t g = 0; g < plan.num_batches(); ++g) {
    for (uint64_t r : plan.BatchRecords(g)) {
      if (r == id) return g;
    }
  }
  ADD_FAILURE() << "record " << id << " is in no batch";
  return 0;
}

// Consecutive records are read together with shuffle none, one by one with shuffle global: both
// paths name the bad record.
TEST(ProducerBatchMakerTest, CorruptRecordIsDataLossNamingFileAndOffset) {
  for (const char* shuffle : {"none", "global"}) {
    SCOPED_TRACE(shuffle);
    ScopedTempDir tmp;
    const std::vector<int> counts = {20};
    const auto paths = WriteDataset(tmp.path(), counts);
    JobOptions o;
    o.shuffle = shuffle;
    o.num_consumers = 1;
    const v1::JobInfo job = MakeJob(paths, counts, o);
    IndexCache cache(tmp.Join("index"));
    auto maker = MustCreate(job, cache);
    ASSERT_NE(maker, nullptr);
    const uint64_t offset = maker->dataset().index(0).offsets[7];
    FlipByte(paths[0], offset + kRecordHeaderBytes + 3);

    const uint64_t g = BatchHolding(*maker, 0, 7);
    auto batch = maker->Make(0, g);
    ASSERT_EQ(batch.status().code(), absl::StatusCode::kDataLoss) << batch.status();
    EXPECT_THAT(batch.status().message(),
                HasSubstr(absl::StrCat("job 'train' epoch 0 batch ", g, ": record 7 of ", paths[0],
                                       " (byte ", offset, "): ")));
    EXPECT_TRUE(maker->Make(0, (g + 1) % maker->batches_per_epoch()).ok());

    // A file cut short after the job was planned.
    std::filesystem::resize_file(paths[0], maker->dataset().index(0).offsets[18] + 5);
    const uint64_t cut = BatchHolding(*maker, 0, 18);
    batch = maker->Make(0, cut);
    ASSERT_EQ(batch.status().code(), absl::StatusCode::kDataLoss) << batch.status();
    EXPECT_THAT(std::string(batch.status().message()),  // 18 is cut, 19 gone
                ContainsRegex(absl::StrCat("epoch 0 batch ", cut, ": record 1[89] of ")));
    EXPECT_THAT(batch.status().message(), HasSubstr("cut short"));
  }
}

TEST(ProducerBatchMakerTest, FeatureMismatchNamesRecordAndFeature) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {12};
  const auto paths = WriteDataset(tmp.path(), counts, [](int64_t id) {
    Example e = testing::RecordOf(id);
    if (id == 5) e[0].second = Feature::Floats({1.5f});
    return EncodeExample(e);
  });
  JobOptions o;
  o.shuffle = "none";
  o.num_consumers = 1;
  IndexCache cache(tmp.Join("index"));
  auto maker = MustCreate(MakeJob(paths, counts, o), cache);
  ASSERT_NE(maker, nullptr);
  auto batch = maker->Make(0, 1);
  ASSERT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument) << batch.status();
  EXPECT_EQ(batch.status().message(),
            absl::StrCat("job 'train' epoch 0 batch 1: record 5 of ", paths[0], " (byte ",
                         maker->dataset().index(0).offsets[5],
                         "): feature 'id': expected int64, found float_list"));
}

TEST(ProducerBatchMakerTest, ChangedFileIsFailedPrecondition) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {10, 10};
  auto paths = WriteDataset(tmp.path(), counts);
  const v1::JobInfo job = MakeJob(paths, counts);
  IndexCache cache(tmp.Join("index"));
  ASSERT_NE(MustCreate(job, cache), nullptr);
  WriteDataset(tmp.path(), {10, 12});  // part-1 grows
  auto maker = TfrecordBatchMaker::Create(job, cache);
  ASSERT_EQ(maker.status().code(), absl::StatusCode::kFailedPrecondition) << maker.status();
  EXPECT_THAT(maker.status().message(), HasSubstr(paths[1]));
  EXPECT_THAT(maker.status().message(), HasSubstr("holds 12 records but held 10"));
}

TEST(ProducerBatchMakerTest, BadSpecsAndRangesAreNamed) {
  ScopedTempDir tmp;
  const std::vector<int> counts = {16};
  const auto paths = WriteDataset(tmp.path(), counts);
  IndexCache cache(tmp.Join("index"));

  JobOptions o;
  v1::JobInfo unknown_shuffle = MakeJob(paths, counts, o);
  unknown_shuffle.mutable_spec()->set_shuffle(static_cast<v1::Shuffle>(9));
  auto maker = TfrecordBatchMaker::Create(unknown_shuffle, cache);
  EXPECT_EQ(maker.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(maker.status().message(), HasSubstr("job 'train': "));
  EXPECT_THAT(maker.status().message(), HasSubstr("shuffle mode 9"));

  o = JobOptions();
  o.features = "id:int64,id:float32";
  maker = TfrecordBatchMaker::Create(MakeJob(paths, counts, o), cache);
  EXPECT_EQ(maker.status().code(), absl::StatusCode::kInvalidArgument);

  v1::JobInfo missing = MakeJob({tmp.Join("absent.tfrecord")}, {16});
  maker = TfrecordBatchMaker::Create(missing, cache);
  EXPECT_EQ(maker.status().code(), absl::StatusCode::kNotFound) << maker.status();

  auto ok = MustCreate(MakeJob(paths, counts), cache);
  ASSERT_NE(ok, nullptr);
  auto past = ok->Make(0, ok->batches_per_epoch());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(past.status().message(),
              HasSubstr(absl::StrCat("job 'train' epoch 0 batch ", ok->batches_per_epoch(), ": ")));
}

}  // namespace
}  // namespace croupier
