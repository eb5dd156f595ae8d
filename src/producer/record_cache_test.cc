#include "src/producer/record_cache.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/producer/producer_testing.h"
#include "src/producer/tfrecord_maker.h"
#include "src/testing/forwarding_env.h"

namespace croupier {
namespace {

using ::croupier::testing::MakeJob;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::WriteDataset;
using ::testing::HasSubstr;

std::unique_ptr<RecordCache> MustCreate(uint64_t capacity, const std::string& dir = "",
                                        bool keep = false) {
  RecordCache::Options options;
  options.capacity_bytes = capacity;
  options.dir = dir;
  options.keep = keep;
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
    // The records' bytes, and a frame header for each (record_cache_file.h) and each file.
    const uint64_t bytes = cache->stats().bytes;
    EXPECT_GT(on_disk, bytes);
    EXPECT_LE(on_disk, bytes + 96 * (17 + 12) + 16 * 2 * (17 + 4 + 256));
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
    f.seekp(static_cast<std::streamoff>(entry.file_size()) - 1);
    f.put('\x7f');  // the last record of every shard file is damaged
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

// Kept (--cache-keep): the next cache in the same directory, a producer started again, holds the
// records from the start and serves the same bytes.
TEST_F(ProducerRecordCacheTest, AKeptCacheIsReadBackByTheNextOne) {
  const std::string dir = tmp_.Join("cache");
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    ASSERT_NE(cache, nullptr);
    EXPECT_TRUE(cache->kept());
    EXPECT_EQ(cache->path(), dir + "/croupier-record-cache");
    EXPECT_EQ(Hashes(*Maker(cache.get()), 0), Hashes(*plain_, 0));
    EXPECT_EQ(cache->stats().loaded, 0u);
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/croupier-record-cache"));
  auto again = MustCreate(1 << 20, dir, /*keep=*/true);
  ASSERT_NE(again, nullptr);
  RecordCache::Stats s = again->stats();
  EXPECT_EQ(s.loaded, 96u);
  EXPECT_EQ(s.records, 96u);
  EXPECT_GT(s.bytes, 0u);
  EXPECT_EQ(Hashes(*Maker(again.get()), 1), Hashes(*plain_, 1));
  s = again->stats();
  EXPECT_EQ(s.hits, 96u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.read_errors, 0u);
}

// FileIds are numbered anew by each process, in the order it meets the files: a record read back
// is found under its file's new number, with its own bytes, whatever its shard was before.
TEST_F(ProducerRecordCacheTest, AKeptRecordIsFoundUnderItsFilesNewNumber) {
  const std::string dir = tmp_.Join("cache");
  // Objects in a store: a kept cache does not ask the store whether they changed.
  const RecordIndex a{"s3://data/a", 100, 5, {}}, b{"s3://data/b", 200, 5, {}},
      c{"s3://data/c", 300, 5, {}};
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    cache->FileId(c);  // numbered 0 here, and never cached: a and b are 1 and 2
    const uint32_t fa = cache->FileId(a), fb = cache->FileId(b);
    for (uint64_t r = 0; r < 256; ++r) {
      ASSERT_TRUE(cache->Insert(fa, r, absl::StrCat("a", r)));
      ASSERT_TRUE(cache->Insert(fb, r, absl::StrCat("b", r)));
    }
  }
  auto again = MustCreate(1 << 20, dir, /*keep=*/true);
  EXPECT_EQ(again->stats().loaded, 512u);
  const uint32_t fa = again->FileId(a), fb = again->FileId(b);
  EXPECT_LT(std::max(fa, fb), 2u);  // renumbered: c is unknown to this one
  std::string buffer;
  for (uint64_t r = 0; r < 256; ++r) {
    EXPECT_EQ(again->Lookup(fa, r, buffer), absl::StrCat("a", r)) << r;
    EXPECT_EQ(again->Lookup(fb, r, buffer), absl::StrCat("b", r)) << r;
  }
  EXPECT_EQ(again->stats().hits, 512u);
  EXPECT_EQ(again->Lookup(again->FileId(c), 0, buffer), std::nullopt);
}

// A producer killed while writing leaves a frame cut short, or bytes after the last frame: the
// next cache drops them, cuts the file after its last good frame, and appends from there.
TEST_F(ProducerRecordCacheTest, AKeptCacheCutShortLosesOnlyTheRecordCut) {
  const std::string dir = tmp_.Join("cache");
  std::vector<std::filesystem::path> files;
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    Hashes(*Maker(cache.get()), 0);
    for (const auto& entry : std::filesystem::directory_iterator(cache->path())) {
      if (entry.path().extension() == ".records" && entry.file_size() > 0) {
        files.push_back(entry.path());
      }
    }
  }
  ASSERT_GE(files.size(), 2u);
  const uint64_t cut_size = std::filesystem::file_size(files[0]) - 3;  // its last record cut
  std::filesystem::resize_file(files[0], cut_size);
  const uint64_t whole_size = std::filesystem::file_size(files[1]);
  {
    std::ofstream junk(files[1], std::ios::app | std::ios::binary);
    junk << "not a frame";
  }
  {
    auto again = MustCreate(1 << 20, dir, /*keep=*/true);
    EXPECT_EQ(again->stats().loaded, 95u);
    EXPECT_LT(std::filesystem::file_size(files[0]), cut_size);
    EXPECT_EQ(std::filesystem::file_size(files[1]), whole_size);
    EXPECT_EQ(Hashes(*Maker(again.get()), 1), Hashes(*plain_, 1));
    const RecordCache::Stats s = again->stats();
    EXPECT_EQ(s.hits, 95u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.records, 96u);  // the record cut, admitted again
  }
  auto third = MustCreate(1 << 20, dir, /*keep=*/true);
  EXPECT_EQ(third->stats().loaded, 96u);
  EXPECT_EQ(Hashes(*Maker(third.get()), 2), Hashes(*plain_, 2));
  EXPECT_EQ(third->stats().hits, 96u);
}

// A kept record whose bytes were damaged on disk is a miss when read (its checksum), not a wrong
// record.
TEST_F(ProducerRecordCacheTest, ADamagedKeptRecordIsReadFromTheSource) {
  const std::string dir = tmp_.Join("cache");
  std::string path;
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    Hashes(*Maker(cache.get()), 0);
    path = cache->path();
  }
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.path().extension() != ".records" || entry.file_size() == 0) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(entry.file_size()) - 1);
    f.put('\x7f');  // the last record's last byte
  }
  auto again = MustCreate(1 << 20, dir, /*keep=*/true);
  EXPECT_EQ(again->stats().loaded, 96u);
  EXPECT_EQ(Hashes(*Maker(again.get()), 1), Hashes(*plain_, 1));
  EXPECT_GT(again->stats().read_errors, 0u);
}

// A source file that changed since: its records are dropped as the cache is read back, and the
// files that held them are written again without them (their room is the capacity's again).
TEST_F(ProducerRecordCacheTest, AKeptCacheDropsTheRecordsOfASourceFileThatChanged) {
  const std::string dir = tmp_.Join("cache");
  uint64_t bytes_before = 0, disk_before = 0;
  auto disk = [&] {
    uint64_t total = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/croupier-record-cache")) {
      if (entry.path().extension() == ".records") total += entry.file_size();
    }
    return total;
  };
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    EXPECT_EQ(Hashes(*Maker(cache.get()), 0), Hashes(*plain_, 0));
    bytes_before = cache->stats().bytes;
  }
  disk_before = disk();
  // The second file (56 records) is touched: same bytes, a new modification time.
  std::filesystem::last_write_time(
      paths_[1], std::filesystem::last_write_time(paths_[1]) + std::chrono::hours(1));
  auto again = MustCreate(1 << 20, dir, /*keep=*/true);
  const RecordCache::Stats s = again->stats();
  EXPECT_EQ(s.loaded, 40u);
  EXPECT_LT(s.bytes, bytes_before);
  EXPECT_LT(disk(), disk_before);
  EXPECT_FALSE(std::filesystem::exists(dir + "/croupier-record-cache/shard-0.records.compacting"));
  auto plain = TfrecordBatchMaker::Create(job_, index_);  // the index of the touched file anew
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Hashes(*Maker(again.get()), 1), Hashes(**plain, 1));
  EXPECT_EQ(again->stats().hits, 40u);
  EXPECT_EQ(again->stats().misses, 56u);
  EXPECT_EQ(again->stats().read_errors, 0u);
  // And read back once more: every record, the new ones of the touched file too.
  again.reset();
  auto third = MustCreate(1 << 20, dir, /*keep=*/true);
  EXPECT_EQ(third->stats().loaded, 96u);
  EXPECT_EQ(Hashes(*Maker(third.get()), 2), Hashes(**plain, 2));
  EXPECT_EQ(third->stats().hits, 96u);
}

// Objects in a store, as S3Env's Stat answers for them (a HEAD request, 50 ms here): a size and
// a time each, gone, or a store that cannot be asked. Counts the requests and how many were in
// flight at once.
class ObjectStoreEnv final : public croupier::testing::ForwardingEnv {
 public:
  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    if (!absl::StartsWith(path, "s3://")) return ForwardingEnv::Stat(path);
    const int now = in_flight.fetch_add(1) + 1;
    for (int seen = most_in_flight.load(); seen < now;) {
      if (most_in_flight.compare_exchange_weak(seen, now)) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    in_flight.fetch_sub(1);
    requests.fetch_add(1);
    absl::MutexLock lock(&mu);
    if (unreachable.contains(path)) return absl::UnavailableError("connection refused");
    auto it = objects.find(path);
    if (it == objects.end()) return absl::NotFoundError(absl::StrCat(path, ": no such key"));
    return it->second;
  }

  absl::Mutex mu;
  std::map<std::string, FileStat> objects ABSL_GUARDED_BY(mu);
  std::set<std::string> unreachable ABSL_GUARDED_BY(mu);
  std::atomic<int> in_flight{0}, most_in_flight{0}, requests{0};
};

// A kept cache of objects in a store asks the store about each object once, several at a time,
// when it is read back: the records of an object rewritten or deleted since are dropped, those
// of one it cannot ask about stay.
TEST_F(ProducerRecordCacheTest, AKeptCacheAsksTheStoreAboutItsObjectsAtOnce) {
  ObjectStoreEnv env;
  constexpr int kObjects = 32, kRecords = 4;
  auto index_of = [&](int i) {
    absl::MutexLock lock(&env.mu);
    RecordIndex index;
    index.path = absl::StrCat("s3://bucket/part-", i);
    index.file_size = env.objects[index.path].size;
    index.mtime_ns = env.objects[index.path].mtime_ns;
    return index;
  };
  {
    absl::MutexLock lock(&env.mu);
    for (int i = 0; i < kObjects; ++i) {
      env.objects[absl::StrCat("s3://bucket/part-", i)] = {.size = 1000u + i,
                                                           .mtime_ns = int64_t{i} * 1000000000};
    }
  }
  RecordCache::Options options;
  options.capacity_bytes = 1 << 20;
  options.dir = tmp_.Join("cache");
  options.keep = true;
  options.env = &env;
  {
    auto cache = RecordCache::Create(options);
    ASSERT_TRUE(cache.ok()) << cache.status();
    for (int i = 0; i < kObjects; ++i) {
      const uint32_t file = (*cache)->FileId(index_of(i));
      for (int r = 0; r < kRecords; ++r) {
        ASSERT_TRUE((*cache)->Insert(file, r, absl::StrCat("object ", i, " record ", r)));
      }
    }
  }
  {
    absl::MutexLock lock(&env.mu);
    env.objects["s3://bucket/part-3"].mtime_ns += 1000000000;  // rewritten
    env.objects.erase("s3://bucket/part-5");                   // deleted
    env.unreachable.insert("s3://bucket/part-7");              // cannot be asked
  }
  env.requests = 0;
  auto again = RecordCache::Create(options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(env.requests.load(), kObjects) << "each object asked about once";
  EXPECT_GE(env.most_in_flight.load(), 2) << "the requests run side by side";
  EXPECT_EQ((*again)->stats().loaded, uint64_t{(kObjects - 2) * kRecords});
  std::string buffer;
  auto found = [&](int i, int r) {
    return (*again)->Lookup((*again)->FileId(index_of(i)), r, buffer).has_value();
  };
  EXPECT_TRUE(found(0, 0));
  EXPECT_TRUE(found(7, 3)) << "an object the store could not be asked about keeps its records";
  EXPECT_FALSE(found(3, 0)) << "a rewritten object's records are gone";
  auto hit = (*again)->Lookup((*again)->FileId(index_of(31)), 2, buffer);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, "object 31 record 2");
}

// A smaller capacity the next time: the records that fit are read back, the rest dropped.
TEST_F(ProducerRecordCacheTest, AKeptCacheReadBackWithLessRoomHoldsWhatFits) {
  const std::string dir = tmp_.Join("cache");
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    Hashes(*Maker(cache.get()), 0);
  }
  auto small = MustCreate(3000, dir, /*keep=*/true);
  const RecordCache::Stats s = small->stats();
  EXPECT_GT(s.loaded, 0u);
  EXPECT_LT(s.loaded, 96u);
  EXPECT_LE(s.bytes, 3000u);
  EXPECT_EQ(Hashes(*Maker(small.get()), 1), Hashes(*plain_, 1));
  EXPECT_EQ(small->stats().hits, s.loaded);
}

// Two producers on one host: the second finds the kept directory locked and caches in a fresh
// directory of its own, removed when it ends; the first keeps its own.
TEST_F(ProducerRecordCacheTest, ASecondCacheOnAKeptDirectoryUsesAFreshOne) {
  const std::string dir = tmp_.Join("cache");
  auto first = MustCreate(1 << 20, dir, /*keep=*/true);
  ASSERT_NE(first, nullptr);
  std::string second_path;
  {
    auto second = MustCreate(1 << 20, dir, /*keep=*/true);
    ASSERT_NE(second, nullptr);
    EXPECT_FALSE(second->kept());
    second_path = second->path();
    EXPECT_THAT(second_path, HasSubstr(dir + "/croupier-record-cache."));
    EXPECT_EQ(Hashes(*Maker(second.get()), 0), Hashes(*plain_, 0));
  }
  EXPECT_FALSE(std::filesystem::exists(second_path));
  EXPECT_TRUE(first->kept());
  EXPECT_EQ(Hashes(*Maker(first.get()), 0), Hashes(*plain_, 0));
}

// Threads that insert the same records at once (producers' workers making overlapping batches):
// each record is written once and charged once, in a file and when it is read back.
TEST_F(ProducerRecordCacheTest, ARecordInsertedByManyThreadsAtOnceIsWrittenOnce) {
  const std::string dir = tmp_.Join("cache");
  const RecordIndex a{"s3://data/a", 100, 5, {}};
  const std::string data(100, 'x');
  {
    auto cache = MustCreate(1 << 20, dir, /*keep=*/true);
    const uint32_t file = cache->FileId(a);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (uint64_t r = 0; r < 200; ++r) EXPECT_TRUE(cache->Insert(file, r, data));
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(cache->stats().records, 200u);
    EXPECT_EQ(cache->stats().bytes, 200u * data.size());
  }
  auto again = MustCreate(1 << 20, dir, /*keep=*/true);
  EXPECT_EQ(again->stats().loaded, 200u);
  EXPECT_EQ(again->stats().bytes, 200u * data.size());
}

// The records of a kept cache's eviction tests: 64 apart, so that a file's records fall in every
// shard (ShardOf), each record's bytes its own.
std::string EvictionRecord(char file, uint64_t r) { return std::string(96, file) + absl::StrCat(r); }
constexpr uint64_t kEvictionStride = 64;

// Bytes in a kept directory's shard files.
uint64_t KeptDiskBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/croupier-record-cache")) {
    if (entry.path().extension() == ".records") total += entry.file_size();
  }
  return total;
}

// A producer whose jobs opened `files` (each a letter for its records' bytes, and its index)
// fills a kept cache of `capacity` bytes in `dir`, a record of each file in turn, until one does
// not fit: records 0 to the returned count - 1 of every file are held, kEvictionStride apart.
uint64_t FillKeptCache(const std::string& dir, uint64_t capacity,
                       const std::vector<std::pair<char, RecordIndex>>& files) {
  auto cache = MustCreate(capacity, dir, /*keep=*/true);
  std::vector<uint32_t> ids;
  for (const auto& [letter, index] : files) ids.push_back(cache->FileId(index));
  for (uint64_t held = 0;; ++held) {
    for (size_t i = 0; i < files.size(); ++i) {
      if (!cache->Insert(ids[i], held * kEvictionStride, EvictionRecord(files[i].first, held))) {
        return held;
      }
    }
  }
}

// A producer started again on a kept cache that another job filled: the first record of its own
// job that does not fit drops, once, every record read back of a file no job of this producer
// opened, and the files are written again without them; the next producer reads back this job's.
TEST_F(ProducerRecordCacheTest, AKeptCacheFullOfAnotherJobsRecordsMakesRoomOnce) {
  const std::string dir = tmp_.Join("cache");
  constexpr uint64_t kCapacity = 8000;
  const RecordIndex a{"s3://data/a", 100, 5, {}}, b{"s3://data/b", 200, 5, {}};
  const uint64_t held_a = FillKeptCache(dir, kCapacity, {{'a', a}});
  EXPECT_GT(held_a, 60u);
  const uint64_t disk_a = KeptDiskBytes(dir);
  uint64_t held_b = 0;
  {
    auto cache = MustCreate(kCapacity, dir, /*keep=*/true);
    EXPECT_EQ(cache->stats().loaded, held_a);
    const uint32_t fb = cache->FileId(b);  // another job: a is not one of its files
    for (; held_b < 20; ++held_b) {
      ASSERT_TRUE(cache->Insert(fb, held_b * kEvictionStride, EvictionRecord('b', held_b)))
          << held_b;
    }
    RecordCache::Stats s = cache->stats();
    EXPECT_EQ(s.evicted, held_a);
    EXPECT_EQ(s.records, 20u);
    EXPECT_EQ(s.rejected, 0u);
    EXPECT_LT(KeptDiskBytes(dir), disk_a / 2);  // the files hold b's 20 records only
    std::string buffer;
    for (uint64_t r = 0; r < held_b; ++r) {
      EXPECT_EQ(cache->Lookup(fb, r * kEvictionStride, buffer), EvictionRecord('b', r)) << r;
    }
    // Full again: every record held is of a file opened here, so nothing more is evicted.
    while (cache->Insert(fb, held_b * kEvictionStride, EvictionRecord('b', held_b))) ++held_b;
    s = cache->stats();
    EXPECT_EQ(s.evicted, held_a);
    EXPECT_EQ(s.rejected, 1u);
    EXPECT_EQ(s.records, held_b);
    EXPECT_LE(s.bytes, kCapacity);
    // a's records are gone: a job over a now reads its file.
    EXPECT_EQ(cache->Lookup(cache->FileId(a), 0, buffer), std::nullopt);
  }
  EXPECT_LE(KeptDiskBytes(dir), disk_a + 1000);
  auto third = MustCreate(kCapacity, dir, /*keep=*/true);
  EXPECT_EQ(third->stats().loaded, held_b);
  const uint32_t fb = third->FileId(b);
  std::string buffer;
  for (uint64_t r = 0; r < held_b; ++r) {
    EXPECT_EQ(third->Lookup(fb, r * kEvictionStride, buffer), EvictionRecord('b', r)) << r;
  }
  EXPECT_EQ(third->stats().read_errors, 0u);
}

// The records read back of a file that a job of this producer opened are its own: a full cache
// keeps them, and refuses the new record as before.
TEST_F(ProducerRecordCacheTest, AKeptCacheKeepsTheRecordsOfTheFilesItsJobsOpen) {
  const std::string dir = tmp_.Join("cache");
  constexpr uint64_t kCapacity = 8000;
  const RecordIndex a{"s3://data/a", 100, 5, {}}, b{"s3://data/b", 200, 5, {}};
  const uint64_t held_a = FillKeptCache(dir, kCapacity, {{'a', a}});
  auto cache = MustCreate(kCapacity, dir, /*keep=*/true);
  const uint32_t fa = cache->FileId(a), fb = cache->FileId(b);  // one job over a and b
  EXPECT_FALSE(cache->Insert(fb, 0, EvictionRecord('b', 0)));
  const RecordCache::Stats s = cache->stats();
  EXPECT_EQ(s.evicted, 0u);
  EXPECT_EQ(s.rejected, 1u);
  std::string buffer;
  for (uint64_t r = 0; r < held_a; ++r) {
    EXPECT_EQ(cache->Lookup(fa, r * kEvictionStride, buffer), EvictionRecord('a', r)) << r;
  }
}

// Readers of the records that stay, on other threads, are served their own bytes while an
// eviction writes the shard files they live in again.
TEST_F(ProducerRecordCacheTest, KeptRecordsThatStayAreReadWhileOthersAreEvicted) {
  const std::string dir = tmp_.Join("cache");
  constexpr uint64_t kCapacity = 16000;
  const RecordIndex a{"s3://data/a", 100, 5, {}}, b{"s3://data/b", 200, 5, {}},
      c{"s3://data/c", 300, 5, {}};
  const uint64_t held = FillKeptCache(dir, kCapacity, {{'a', a}, {'c', c}});
  auto cache = MustCreate(kCapacity, dir, /*keep=*/true);
  const uint32_t fa = cache->FileId(a), fb = cache->FileId(b);  // c is another job's
  std::atomic<bool> done{false};
  std::atomic<uint64_t> wrong{0}, reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::string buffer;
      for (uint64_t r = t; !done.load(); r = (r + 1) % held) {
        if (cache->Lookup(fa, r * kEvictionStride, buffer) != EvictionRecord('a', r)) ++wrong;
        ++reads;
      }
    });
  }
  while (reads.load() < 200) std::this_thread::yield();
  for (uint64_t r = 0; r < held / 2; ++r) {
    EXPECT_TRUE(cache->Insert(fb, r * kEvictionStride, EvictionRecord('b', r))) << r;
  }
  const uint64_t after = reads.load();
  while (reads.load() < after + 200) std::this_thread::yield();
  done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(cache->stats().evicted, held);  // all of c's
  EXPECT_EQ(cache->stats().read_errors, 0u);
}

// An Env whose renames fail: a shard file cannot be written again.
class NoRenameEnv final : public croupier::testing::ForwardingEnv {
 public:
  absl::Status Rename(const std::string& from, const std::string&) override {
    return absl::PermissionDeniedError(absl::StrCat("cannot rename ", from));
  }
};

// An eviction whose shard files cannot be written again: the records are out of the index all
// the same, those that stay are still served from the old files, those files admit nothing more,
// and the dropped bytes, still on the disk, stay counted against the capacity.
TEST_F(ProducerRecordCacheTest, AnEvictionThatCannotRewriteItsFilesKeepsTheirBytesCounted) {
  const std::string dir = tmp_.Join("cache");
  constexpr uint64_t kCapacity = 8000;
  const RecordIndex a{"s3://data/a", 100, 5, {}}, b{"s3://data/b", 200, 5, {}};
  const uint64_t held = FillKeptCache(dir, kCapacity, {{'a', a}, {'b', b}});
  NoRenameEnv env;
  RecordCache::Options options;
  options.capacity_bytes = kCapacity;
  options.dir = dir;
  options.keep = true;
  options.env = &env;
  auto cache = *RecordCache::Create(options);
  const uint64_t bytes_before = cache->stats().bytes;
  const uint32_t fa = cache->FileId(a);  // b is another job's
  // More than the room left: the records of b are dropped, and their bytes cannot be given back.
  EXPECT_FALSE(cache->Insert(fa, 1, std::string(kCapacity - bytes_before + 1, 'n')));
  const RecordCache::Stats s = cache->stats();
  EXPECT_GE(s.evicted, held);  // b's, out of the index
  EXPECT_EQ(s.bytes, bytes_before);
  std::string buffer;
  for (uint64_t r = 0; r < held; ++r) {
    EXPECT_EQ(cache->Lookup(fa, r * kEvictionStride, buffer), EvictionRecord('a', r)) << r;
  }
  EXPECT_EQ(cache->stats().read_errors, 0u);
  // The copies that could not take the files' places are not left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/croupier-record-cache")) {
    EXPECT_NE(entry.path().extension(), ".compacting") << entry.path();
  }
}

TEST(ProducerRecordCacheOptionsTest, ZeroCapacityIsInvalid) {
  RecordCache::Options options;
  options.capacity_bytes = 0;
  EXPECT_EQ(RecordCache::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace croupier
