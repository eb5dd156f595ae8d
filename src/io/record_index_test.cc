#include "croupier/record_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "croupier/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"
#include "src/io/io_testing.h"
#include "src/io/testdata_dirs.h"
#include "src/testing/forwarding_env.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::SharedTfrecordDir;
using ::croupier::testing::WriteRecords;
using ::testing::HasSubstr;

std::vector<std::string> MakeRecords(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string r(rng() % 300, '\0');
    for (char& c : r) c = static_cast<char>(rng());
    out.push_back(r + std::to_string(i));
  }
  return out;
}

// Gives the file a different modification time even within one clock tick.
void BumpMtime(const std::string& path, int seconds) {
  struct timespec times[2] = {{0, UTIME_OMIT}, {1700000000 + seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(RecordIndexTest, RandomAccessMatchesSequentialReading) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  auto records = MakeRecords(500, 3);
  WriteRecords(path, records);
  IndexCache cache(tmp.Join("cache"));
  auto index = cache.Get(path);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ((*index)->num_records(), records.size());
  auto file = *IndexedRecordFile::Open(*index);
  std::vector<uint64_t> order(records.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  std::string buffer;
  for (uint64_t i : order) {
    auto got = file->Read(i, buffer);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, records[i]) << "record " << i;
    EXPECT_EQ((*index)->data_length(i), records[i].size());
  }
  auto past = file->Read(records.size(), buffer);
  EXPECT_TRUE(absl::IsOutOfRange(past.status()));
}

TEST(RecordIndexTest, CachedUntilTheFileChanges) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, MakeRecords(10, 1));
  BumpMtime(path, 1);
  IndexCache cache(tmp.Join("cache"));
  bool rebuilt = false;
  ASSERT_TRUE(cache.Get(path, nullptr, &rebuilt).ok());
  EXPECT_TRUE(rebuilt);
  auto again = cache.Get(path, nullptr, &rebuilt);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(rebuilt);
  EXPECT_EQ((*again)->num_records(), 10u);

  // A new file of a different size.
  WriteRecords(path, MakeRecords(25, 2));
  BumpMtime(path, 2);
  auto grown = cache.Get(path, nullptr, &rebuilt);
  ASSERT_TRUE(grown.ok());
  EXPECT_TRUE(rebuilt);
  EXPECT_EQ((*grown)->num_records(), 25u);

  // Same size, new modification time: rebuilt too.
  BumpMtime(path, 3);
  ASSERT_TRUE(cache.Get(path, nullptr, &rebuilt).ok());
  EXPECT_TRUE(rebuilt);
}

TEST(RecordIndexTest, ACorruptCacheFileIsRebuilt) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, MakeRecords(10, 1));
  IndexCache cache(tmp.Join("cache"));
  ASSERT_TRUE(cache.Get(path).ok());
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(cache.CachePath(path), "garbage").ok());
  bool rebuilt = false;
  auto index = cache.Get(path, nullptr, &rebuilt);
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(rebuilt);
  EXPECT_EQ((*index)->num_records(), 10u);
}

TEST(RecordIndexTest, AnUnwritableCacheStillGivesTheIndex) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, MakeRecords(4, 1));
  // A cache "directory" below a regular file can never be created.
  IndexCache cache(path + "/cache");
  auto index = cache.Get(path);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ((*index)->num_records(), 4u);
}

TEST(RecordIndexTest, SerializationRoundTripsAndRejectsDamage) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, MakeRecords(7, 9));
  auto index = BuildRecordIndex(*Env::Default(), path);
  ASSERT_TRUE(index.ok());
  std::string bytes = SerializeRecordIndex(*index);
  auto parsed = ParseRecordIndex(bytes, "x");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->offsets, index->offsets);
  EXPECT_EQ(parsed->path, path);
  EXPECT_EQ(parsed->file_size, index->file_size);
  EXPECT_EQ(parsed->mtime_ns, index->mtime_ns);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = ParseRecordIndex(bytes.substr(0, cut), "x");
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << "cut " << cut;
  }
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string damaged = bytes;
    damaged[at] ^= 0x01;
    auto r = ParseRecordIndex(damaged, "x");
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << "flip " << at;
    EXPECT_THAT(r.status().message(), HasSubstr("index file x is invalid"));
  }
}

// Regression (make asan): an empty file's index passed the null data() of an empty vector to
// memcpy, which UBSan reports as undefined behavior, when serialized and when parsed back.
TEST(RecordIndexTest, AnEmptyIndexRoundTrips) {
  RecordIndex index;
  index.path = "empty.tfrecord";
  std::string bytes = SerializeRecordIndex(index);
  EXPECT_EQ(bytes.size(), 44u + index.path.size());  // 40-byte header, path, CRC
  auto parsed = ParseRecordIndex(bytes, "x");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->num_records(), 0u);
  EXPECT_EQ(parsed->path, index.path);
}

TEST(RecordIndexTest, CorruptDataFileNamesTheOffset) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, {"aaaa", "bbbb"});
  std::string bytes = *ReadFileToString(*Env::Default(), path);
  bytes.resize(bytes.size() - 2);
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(path, bytes).ok());
  auto index = BuildRecordIndex(*Env::Default(), path);
  EXPECT_TRUE(absl::IsDataLoss(index.status()));
  EXPECT_THAT(index.status().message(), HasSubstr("truncated record at byte 20 of " + path));
}

TEST(RecordIndexTest, ReadingAfterTheFileShrankIsDataLoss) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, {"aaaa", "bbbbbbbb"});
  IndexCache cache(tmp.Join("cache"));
  auto index = *cache.Get(path);
  auto file = *IndexedRecordFile::Open(index);
  WriteRecords(path, {"aaaa", "bb"});
  std::string buffer;
  auto got = file->Read(1, buffer);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("at byte 20 of " + path));
}

// Reads ../shared/data/tfrecord and skips without it; tf_written_test.cc indexes files that
// TensorFlow writes at test time.
TEST(RecordIndexTest, SharedFilesIndexAndReadBack) {
  auto dir = SharedTfrecordDir();
  if (!dir.ok()) GTEST_SKIP() << dir.status().message();
  ScopedTempDir tmp;
  IndexCache cache(tmp.Join("cache"));
  std::string path = *dir + "/detection-test.tfrecord";
  auto index = cache.Get(path);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ((*index)->num_records(), 1u);
  auto file = *IndexedRecordFile::Open(*index);
  std::string buffer;
  auto record = file->Read(0, buffer);
  ASSERT_TRUE(record.ok());
  // The record holds a 708,684-byte JPEG among its features.
  EXPECT_GT(record->size(), 708684u);
  EXPECT_NE(record->find("\xff\xd8\xff"), absl::string_view::npos);
}

TEST(RecordIndexTest, ProgressIsReportedToTheEnd) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("d.tfrecord");
  WriteRecords(path, MakeRecords(50, 4));
  uint64_t last_done = 0, last_total = 0;
  auto index = BuildRecordIndex(*Env::Default(), path, [&](uint64_t done, uint64_t total) {
    last_done = done;
    last_total = total;
  });
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(last_done, index->file_size);
  EXPECT_EQ(last_total, index->file_size);
}

}  // namespace
}  // namespace croupier

namespace croupier {
namespace {

// The default Env, with a place for derived files that every reader shares (as an object
// store's Env keeps record indexes in the store).
class SharingEnv final : public croupier::testing::ForwardingEnv {
 public:
  explicit SharingEnv(std::string shared_dir) : shared_dir_(std::move(shared_dir)) {}
  std::string SharedDerivedPath(const std::string& p, absl::string_view suffix) override {
    return absl::StrCat(shared_dir_, "/", p.substr(p.find_last_of('/') + 1), suffix);
  }

 private:
  const std::string shared_dir_;
};

TEST(RecordIndexTest, AnIndexKeptForEveryReaderSavesTheOthersTheirScan) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join("data.tfrecord");
  {
    auto w = *RecordWriter::Create(path);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(w->Write(std::string(10 + i, 'x')).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  SharingEnv env(tmp.path());
  bool rebuilt = false;
  IndexCache first(tmp.Join("cache1"), &env);
  auto built = first.Get(path, nullptr, &rebuilt);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(rebuilt);
  const std::string shared = env.SharedDerivedPath(path, IndexCache::kSharedIndexSuffix);
  ASSERT_TRUE(Env::Default()->Stat(shared).ok());

  // Another reader, its own cache empty: the shared index, no scan; and now in its cache.
  IndexCache second(tmp.Join("cache2"), &env);
  auto taken = second.Get(path, nullptr, &rebuilt);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_FALSE(rebuilt);
  EXPECT_EQ((*taken)->offsets, (*built)->offsets);
  EXPECT_TRUE(Env::Default()->Stat(second.CachePath(path)).ok());

  // The file changes: the shared index no longer matches it, and is scanned and replaced.
  {
    auto w = *RecordWriter::Create(path);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(w->Write("y").ok());
    ASSERT_TRUE(w->Close().ok());
  }
  IndexCache third(tmp.Join("cache3"), &env);
  auto rescanned = third.Get(path, nullptr, &rebuilt);
  ASSERT_TRUE(rescanned.ok()) << rescanned.status();
  EXPECT_TRUE(rebuilt);
  EXPECT_EQ((*rescanned)->num_records(), 5u);
  auto kept = ParseRecordIndex(*ReadFileToString(*Env::Default(), shared), shared);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->num_records(), 5u);
}

}  // namespace
}  // namespace croupier
