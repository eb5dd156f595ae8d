#include "src/producer/record_cache.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/producer/producer_testing.h"
#include "src/producer/tfrecord_maker.h"

namespace croupier {
namespace {

using ::croupier::testing::MakeJob;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::WriteDataset;
using ::testing::HasSubstr;

std::unique_ptr<RecordCache> MustCreate(uint64_t capacity, const std::string& dir = "") {
  RecordCache::Options options;
  options.capacity_bytes = capacity;
  options.dir = dir;
  auto cache = RecordCache::Create(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

// Content hashes of every batch of `epoch`.
std::vector<uint64_t> Hashes(const BatchMaker& maker, uint64_t epoch) {
  std::vector<uint64_t> out;
  for (uint64_t g = 0; g < maker.batches_per_epoch(); ++g) {
    auto batch = maker.Make(epoch, g);
    EXPECT_TRUE(batch.ok()) << batch.status();
    out.push_back(batch.ok() ? batch->ContentHash() : 0);
  }
  return out;
}

class ProducerRecordCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_ = WriteDataset(tmp_.path(), counts_);
    job_ = MakeJob(paths_, counts_);  // batch size 4, 2 consumers: 24 batches, no remainder
    auto plain = TfrecordBatchMaker::Create(job_, index_);
    ASSERT_TRUE(plain.ok()) << plain.status();
    plain_ = *std::move(plain);
  }
  std::unique_ptr<TfrecordBatchMaker> Maker(RecordCache* cache) {
    auto maker = TfrecordBatchMaker::Create(job_, index_, cache);
    EXPECT_TRUE(maker.ok()) << maker.status();
    return maker.ok() ? *std::move(maker) : nullptr;
  }

  ScopedTempDir tmp_;
  const std::vector<int> counts_ = {40, 56};
  std::vector<std::string> paths_;
  v1::JobInfo job_;
  IndexCache index_{tmp_.Join("index")};
  std::unique_ptr<TfrecordBatchMaker> plain_;
};

TEST_F(ProducerRecordCacheTest, SecondEpochIsServedFromMemory) {
  auto cache = MustCreate(1 << 20);
  auto maker = Maker(cache.get());
  ASSERT_NE(maker, nullptr);
  EXPECT_EQ(Hashes(*maker, 0), Hashes(*plain_, 0));
  RecordCache::Stats s = cache->stats();
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 96u);
  EXPECT_EQ(s.records, 96u);
  EXPECT_GT(s.bytes, 0u);
  EXPECT_LE(s.bytes, s.capacity_bytes);

  EXPECT_EQ(Hashes(*maker, 1), Hashes(*plain_, 1));
  s = cache->stats();
  EXPECT_EQ(s.hits, 96u);
  EXPECT_EQ(s.misses, 96u);
  EXPECT_EQ(s.rejected, 0u);
}

TEST_F(ProducerRecordCacheTest, FullCacheStopsAdmittingAndStaysWithinItsBound) {
  const uint64_t capacity = 3000;  // room for part of the dataset only
  auto cache = MustCreate(capacity);
  auto maker = Maker(cache.get());
  ASSERT_NE(maker, nullptr);
  std::vector<uint64_t> records;  // held after each epoch
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(Hashes(*maker, epoch), Hashes(*plain_, epoch)) << epoch;
    EXPECT_LE(cache->stats().bytes, capacity);
    records.push_back(cache->stats().records);
  }
  const RecordCache::Stats s = cache->stats();
  EXPECT_GT(records[0], 0u);
  EXPECT_LT(s.records, 96u);
  EXPECT_GT(s.rejected, 0u);
  EXPECT_EQ(s.hits + s.misses, 3 * 96u);
  // No eviction: every record admitted by an epoch is a hit in each later one (each epoch reads
  // every record once).
  EXPECT_EQ(s.hits, records[0] + records[1]);
}

TEST_F(ProducerRecordCacheTest, ConsecutiveReadsCountEveryRecordOnce) {
  testing::JobOptions o;
  o.shuffle = "none";  // whole batches of consecutive records, read together when not cached
  job_ = MakeJob(paths_, counts_, o);
  plain_ = Maker(nullptr);
  auto cache = MustCreate(3000);  // some records cached, most not: runs end at cached ones
  auto maker = Maker(cache.get());
  ASSERT_NE(maker, nullptr);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(Hashes(*maker, epoch), Hashes(*plain_, epoch)) << epoch;
  }
  const RecordCache::Stats s = cache->stats();
  EXPECT_GT(s.hits, 0u);
  EXPECT_EQ(s.hits + s.misses, 3 * 96u);
}

TEST_F(ProducerRecordCacheTest, DirectoryModeReadsBackAndCleansUp) {
  std::string path;
  {
    auto cache = MustCreate(1 << 20, tmp_.Join("cache"));
    ASSERT_NE(cache, nullptr);
    path = cache->path();
    EXPECT_THAT(path, HasSubstr(tmp_.Join("cache/")));
    auto maker = Maker(cache.get());
    ASSERT_NE(maker, nullptr);
    EXPECT_EQ(Hashes(*maker, 0), Hashes(*plain_, 0));
    EXPECT_TRUE(std::filesystem::exists(path));
    uint64_t on_disk = 0;
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      on_disk += entry.file_size();
    }
    EXPECT_EQ(on_disk, cache->stats().bytes);
    EXPECT_EQ(Hashes(*maker, 1), Hashes(*plain_, 1));
    EXPECT_EQ(cache->stats().hits, 96u);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists(tmp_.Join("cache")));  // only our own directory goes
}

TEST_F(ProducerRecordCacheTest, DamagedCacheFileFallsBackToTheSource) {
  auto cache = MustCreate(1 << 20, tmp_.Join("cache"));
  ASSERT_NE(cache, nullptr);
  auto maker = Maker(cache.get());
  ASSERT_NE(maker, nullptr);
  Hashes(*maker, 0);
  for (const auto& entry : std::filesystem::directory_iterator(cache->path())) {
    if (entry.file_size() == 0) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('\x7f');  // the first record of every shard file is damaged
  }
  EXPECT_EQ(Hashes(*maker, 1), Hashes(*plain_, 1));
  EXPECT_GT(cache->stats().read_errors, 0u);
}

TEST_F(ProducerRecordCacheTest, FileIdsFollowFileIdentity) {
  auto cache = MustCreate(1 << 20);
  RecordIndex a{"/data/a", 100, 5, {}};
  RecordIndex b{"/data/b", 100, 5, {}};
  RecordIndex a_changed{"/data/a", 100, 6, {}};
  const uint32_t id = cache->FileId(a);
  EXPECT_EQ(cache->FileId(a), id);
  EXPECT_NE(cache->FileId(b), id);
  EXPECT_NE(cache->FileId(a_changed), id);

  std::string buffer;
  EXPECT_TRUE(cache->Insert(id, 3, "three"));
  EXPECT_EQ(cache->Lookup(id, 3, buffer), "three");
  EXPECT_EQ(cache->Lookup(cache->FileId(a_changed), 3, buffer), std::nullopt);
}

TEST(ProducerRecordCacheOptionsTest, ZeroCapacityIsInvalid) {
  RecordCache::Options options;
  options.capacity_bytes = 0;
  EXPECT_EQ(RecordCache::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace croupier
