#include "croupier/dataset.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "croupier/tfrecord.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "src/common/env.h"
#include "src/testing/forwarding_env.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;

TEST(DatasetTest, GlobalIdsRunThroughTheFilesInOrder) {
  ScopedTempDir tmp;
  std::vector<std::string> files;
  std::vector<int> counts = {3, 0, 5, 1};
  for (size_t f = 0; f < counts.size(); ++f) {
    files.push_back(tmp.Join("f" + std::to_string(f)));
    auto w = *RecordWriter::Create(files.back());
    for (int r = 0; r < counts[f]; ++r) ASSERT_TRUE(w->Write(std::to_string(f * 100 + r)).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  IndexCache cache(tmp.Join("cache"));
  auto ds = Dataset::Open(files, cache);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_records(), 9u);
  EXPECT_EQ((*ds)->num_files(), 4u);
  std::vector<std::pair<size_t, uint64_t>> expected = {{0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1},
                                                       {2, 2}, {2, 3}, {2, 4}, {3, 0}};
  for (uint64_t id = 0; id < 9; ++id) {
    auto loc = (*ds)->Locate(id);
    EXPECT_EQ(loc.file, expected[id].first) << id;
    EXPECT_EQ(loc.record, expected[id].second) << id;
  }
}

TEST(DatasetTest, MissingFileIsNotFound) {
  ScopedTempDir tmp;
  IndexCache cache(tmp.Join("cache"));
  auto ds = Dataset::Open({tmp.Join("absent.tfrecord")}, cache);
  EXPECT_TRUE(absl::IsNotFound(ds.status())) << ds.status();
}

// The default Env, whose Stat answers as slowly as an object store's HEAD, counting the calls
// that wait at once.
class SlowStatEnv final : public croupier::testing::ForwardingEnv {
 public:
  absl::StatusOr<FileStat> Stat(const std::string& p) override {
    const int now = ++waiting_;
    for (int seen = most_; now > seen && !most_.compare_exchange_weak(seen, now);) {
    }
    absl::SleepFor(absl::Milliseconds(50));
    --waiting_;
    return base()->Stat(p);
  }
  int most_at_once() const { return most_.load(); }

 private:
  std::atomic<int> waiting_{0};
  std::atomic<int> most_{0};
};

// More files than are indexed at once, one of them listed twice and one cut inside a record: the
// error names the cut file, as indexing them one after another would; and once it is whole, the
// files are numbered in the given order whichever thread indexed them.
TEST(DatasetTest, ManyFilesAreIndexedTogetherAndTheFirstBadOneInOrderIsNamed) {
  ScopedTempDir tmp;
  std::vector<std::string> files;
  const size_t n = 3 * Dataset::kMaxFilesIndexedAtOnce + 1;
  for (size_t f = 0; f < n; ++f) {
    files.push_back(tmp.Join("f" + std::to_string(f)));
    auto w = *RecordWriter::Create(files.back());
    for (size_t r = 0; r < f % 4 + 1; ++r) ASSERT_TRUE(w->Write(std::to_string(f * 100 + r)).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  files.push_back(files[5]);
  const std::string cut = files[20];
  const std::string whole = tmp.Join("whole");
  ASSERT_EQ(std::rename(cut.c_str(), whole.c_str()), 0);
  {
    auto w = *RecordWriter::Create(cut);
    ASSERT_TRUE(w->Write("0123456789").ok());
    ASSERT_TRUE(w->Close().ok());
  }
  ASSERT_EQ(::truncate(cut.c_str(), 20), 0);
  IndexCache cache(tmp.Join("cache"));
  std::atomic<uint64_t> last{0};
  auto bad = Dataset::Open(files, cache, [&](uint64_t done, uint64_t) { last = done; });
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr(cut));

  ASSERT_EQ(std::rename(whole.c_str(), cut.c_str()), 0);
  SlowStatEnv slow;
  IndexCache slow_cache(tmp.Join("cache"), &slow);
  uint64_t total = 0;
  auto ds = Dataset::Open(files, slow_cache, [&](uint64_t done, uint64_t all) {
    EXPECT_LE(done, all);
    total = all;
    last = done;
  });
  ASSERT_TRUE(ds.ok()) << ds.status();
  // 49 distinct files whose Stat takes 50 ms: 2.45 s one after another. (How many wait at once
  // depends on how soon the threads start on a busy machine; more than one, never more than the
  // bound.)
  EXPECT_GE(slow.most_at_once(), 2);
  EXPECT_LE(slow.most_at_once(), static_cast<int>(Dataset::kMaxFilesIndexedAtOnce));
  EXPECT_EQ(last.load(), total);
  ASSERT_EQ((*ds)->num_files(), n + 1);
  uint64_t records = 0;
  for (size_t f = 0; f < n; ++f) {
    EXPECT_EQ((*ds)->index(f).path, files[f]);
    EXPECT_EQ((*ds)->first_id(f), records) << f;
    records += f % 4 + 1;
  }
  EXPECT_EQ((*ds)->index(n).path, files[5]);
  EXPECT_EQ((*ds)->num_records(), records + 5 % 4 + 1);
  auto where = (*ds)->Locate((*ds)->first_id(20));
  EXPECT_EQ(where.file, 20u);
  EXPECT_EQ(where.record, 0u);
}

}  // namespace
}  // namespace croupier
