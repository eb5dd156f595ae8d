#include "croupier/dataset.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

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

// An object's ETag, as OpenCountingEnv's Stat gives it.
constexpr char kEtag[] = "\"e\"";

// Files of `counts` records each, in `dir`; `known` gets each one's Stat, with kEtag for all but
// the first (objects of a store, as a job's FileInfo names them).
std::vector<std::string> WriteFiles(const ScopedTempDir& dir, const std::vector<int>& counts,
                                    std::vector<FileStat>* known) {
  std::vector<std::string> files;
  for (size_t f = 0; f < counts.size(); ++f) {
    files.push_back(dir.Join("f" + std::to_string(f)));
    auto w = *RecordWriter::Create(files.back());
    for (int r = 0; r < counts[f]; ++r) EXPECT_TRUE(w->Write(std::to_string(f * 100 + r)).ok());
    EXPECT_TRUE(w->Close().ok());
    FileStat st = *Env::Default()->Stat(files.back());
    if (f > 0) st.etag = kEtag;
    known->push_back(st);
  }
  return files;
}

// A producer's dataset: the objects' indexes are read when a batch first needs them, each once
// however many threads ask for it at once; a file that is not an object is indexed at once.
TEST(DatasetTest, OpenKnownIndexesAnObjectWhenFirstAskedAndOnce) {
  ScopedTempDir tmp;
  std::vector<FileStat> known;
  const std::vector<std::string> files = WriteFiles(tmp, {3, 2, 4, 1}, &known);
  croupier::testing::OpenCountingEnv env(kEtag);
  IndexCache cache(tmp.Join("cache"), &env);
  auto ds = Dataset::OpenKnown(files, known, {3, 2, 4, 1}, cache);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE((*ds)->loaded(0));
  EXPECT_EQ(env.opened(files[0]), 1);
  for (size_t f = 1; f < 4; ++f) {
    EXPECT_FALSE((*ds)->loaded(f)) << f;
    EXPECT_EQ(env.opened(files[f]), 0) << f;
    EXPECT_EQ((*ds)->path(f), files[f]);
  }
  EXPECT_EQ((*ds)->num_records(), 10u);
  EXPECT_EQ((*ds)->Locate(5).file, 2u);
  EXPECT_EQ((*ds)->Locate(5).record, 0u);

  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      const std::vector<size_t> wanted = {3, 2, 3};
      if (!(*ds)->Load(wanted).ok()) ++failed;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(env.opened(files[2]), 1);
  EXPECT_EQ(env.opened(files[3]), 1);
  EXPECT_EQ(env.opened(files[1]), 0);
  EXPECT_FALSE((*ds)->loaded(1));
  EXPECT_EQ((*ds)->index(2).num_records(), 4u);
  EXPECT_EQ((*ds)->index(3).path, files[3]);
}

// An object that no longer holds the records the job counted, or is gone, fails the Load that
// needs it, naming it, and every Load of it after; the first in the order asked is the one named.
TEST(DatasetTest, OpenKnownNamesAnObjectThatChangedOrIsGoneWhenItIsLoaded) {
  ScopedTempDir tmp;
  std::vector<FileStat> known;
  std::vector<std::string> files = WriteFiles(tmp, {3, 2}, &known);
  files.push_back(tmp.Join("gone"));
  known.push_back(FileStat{100, 1, kEtag});
  croupier::testing::OpenCountingEnv env(kEtag);
  IndexCache cache(tmp.Join("cache"), &env);
  auto ds = Dataset::OpenKnown(files, known, {3, 5, 7}, cache);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_records(), 15u);
  const std::vector<size_t> first = {0};
  EXPECT_TRUE((*ds)->Load(first).ok());
  const std::vector<size_t> changed = {1};
  for (int i = 0; i < 2; ++i) {
    absl::Status s = (*ds)->Load(changed);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), ::testing::HasSubstr(files[1] + " holds 2 records but held 5 when the "
                                                  "job was created: the file changed since"));
  }
  const std::vector<size_t> gone_first = {2, 1};
  absl::Status s = (*ds)->Load(gone_first);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr(files[2]));
  const std::vector<size_t> changed_first = {0, 1, 2};
  EXPECT_TRUE(absl::IsFailedPrecondition((*ds)->Load(changed_first)));
  EXPECT_FALSE((*ds)->loaded(1));
  EXPECT_FALSE((*ds)->loaded(2));
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
