#include "src/io/record_fetch.h"

#include <atomic>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "croupier/tfrecord.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"
#include "src/s3/range_plan.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;

// A local file that reads like an object store's: remote, its ReadRanges merged by the store's
// plan (src/s3/range_plan.h) into requests, which are counted.
class RemoteLike final : public RandomAccessFile {
 public:
  explicit RemoteLike(std::unique_ptr<RandomAccessFile> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* dst) const override {
    ++requests;
    if (clock != nullptr) {
      int unset = 0;
      first_read.compare_exchange_strong(unset, ++*clock);
    }
    if (const int ms = delay_ms.load(); ms > 0) absl::SleepFor(absl::Milliseconds(ms));
    return inner_->Read(offset, n, dst);
  }
  const std::string& name() const override { return inner_->name(); }
  absl::StatusOr<uint64_t> Size() const override { return inner_->Size(); }
  bool remote() const override { return true; }
  absl::Status ReadRanges(absl::Span<Range> ranges) const override {
    const uint64_t size = *inner_->Size();
    for (const s3::RangeRequest& req : s3::PlanRangeRequests(ranges, size, 0, 4096)) {
      std::string staging(req.range.length, '\0');
      char* base = req.direct ? ranges[req.members.front()].dst : staging.data();
      for (const s3::ByteRange& part : req.parts) {
        absl::StatusOr<size_t> got =
            Read(part.offset, part.length, base + (part.offset - req.range.offset));
        if (!got.ok()) return got.status();
      }
      if (req.direct) continue;
      for (size_t m : req.members) {
        std::memcpy(ranges[m].dst, staging.data() + (ranges[m].offset - req.range.offset),
                    ranges[m].got);
      }
    }
    return absl::OkStatus();
  }
  mutable std::atomic<int> requests{0};
  std::atomic<int> delay_ms{0};  // each read answers this late, as a store would
  // When set, the first read of this file takes the next tick of `clock`, kept in first_read: the
  // order in which files were first read.
  std::atomic<int>* clock = nullptr;
  mutable std::atomic<int> first_read{0};

 private:
  std::unique_ptr<RandomAccessFile> inner_;
};

class RecordFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(5);
    for (int f = 0; f < 3; ++f) {
      paths_.push_back(tmp_.Join("f" + std::to_string(f)));
      auto w = *RecordWriter::Create(paths_.back());
      for (int r = 0; r < 50; ++r) {
        std::string data(50 + rng() % 500, static_cast<char>('a' + (f * 50 + r) % 26));
        data += std::to_string(f * 1000 + r);
        ASSERT_TRUE(w->Write(data).ok());
      }
      ASSERT_TRUE(w->Close().ok());
    }
    IndexCache cache(tmp_.Join("cache"));
    dataset_ = *Dataset::Open(paths_, cache);
    for (const std::string& p : paths_) {
      files_.push_back(std::make_unique<RemoteLike>(*Env::Default()->OpenForRead(p)));
    }
  }

  RecordFetcher::Opener Opener() {
    return [this](size_t f) -> absl::StatusOr<const RandomAccessFile*> { return files_[f].get(); };
  }
  int Requests() {
    int n = 0;
    for (auto& f : files_) n += f->requests.load();
    return n;
  }
  // Record `loc`'s data, read on its own.
  std::string Expected(const Dataset::Location& loc) {
    auto file = *IndexedRecordFile::Open(dataset_->shared_index(loc.file));
    std::string buffer;
    return std::string(*file->Read(loc.record, buffer));
  }
  void ExpectRecords(const FetchedRecords& got, const std::vector<Dataset::Location>& locs) {
    ASSERT_EQ(got.starts.size(), locs.size());
    for (size_t j = 0; j < locs.size(); ++j) {
      const uint64_t framed =
          dataset_->index(locs[j].file).data_length(locs[j].record) + kRecordOverheadBytes;
      ASSERT_EQ(got.got[j], framed);
      auto data = CheckRecord(got.record(j), "f", 0);
      ASSERT_TRUE(data.ok()) << data.status() << " record " << j;
      EXPECT_EQ(*data, Expected(locs[j])) << j;
    }
  }

  ScopedTempDir tmp_;
  std::vector<std::string> paths_;
  std::unique_ptr<Dataset> dataset_;
  std::vector<std::unique_ptr<RemoteLike>> files_;
};

TEST_F(RecordFetchTest, ShuffledRecordsOfSeveralFilesComeBackInTheOrderAsked) {
  RecordFetcher fetcher(*dataset_, Opener(), {});
  std::mt19937 rng(9);
  std::vector<Dataset::Location> locs;
  for (int i = 0; i < 40; ++i) locs.push_back(dataset_->Locate(rng() % 150));
  locs.push_back(locs[3]);  // a repeat
  auto got = fetcher.Fetch(locs);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectRecords(**got, locs);
}

TEST_F(RecordFetchTest, ConsecutiveRecordsAreFewRequests) {
  RecordFetcher fetcher(*dataset_, Opener(), {});
  std::vector<Dataset::Location> locs;
  for (uint64_t id = 10; id < 30; ++id) locs.push_back(dataset_->Locate(id));
  auto got = fetcher.Fetch(locs);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectRecords(**got, locs);
  uint64_t bytes = 0;
  for (const auto& loc : locs) bytes += dataset_->index(0).data_length(loc.record) + 16;
  // One merged range, cut in 4 KiB parts.
  EXPECT_EQ(Requests(), static_cast<int>((bytes + 4095) / 4096));
}

TEST_F(RecordFetchTest, BatchesFetchedAheadAreTakenWithoutAnotherRead) {
  RecordFetcher fetcher(*dataset_, Opener(), {});
  std::vector<std::vector<Dataset::Location>> batches(4);
  for (size_t b = 0; b < batches.size(); ++b) {
    for (uint64_t i = 0; i < 10; ++i)
      batches[b].push_back(dataset_->Locate((b * 37 + i * 11) % 150));
  }
  for (size_t b = 1; b < batches.size(); ++b) fetcher.Ahead({0, b}, batches[b]);
  auto first = fetcher.Take({0, 0}, batches[0]);
  ASSERT_TRUE(first.ok());
  ExpectRecords(**first, batches[0]);
  for (size_t b = 1; b < batches.size(); ++b) {
    auto got = fetcher.Take({0, b}, batches[b]);
    ASSERT_TRUE(got.ok());
    ExpectRecords(**got, batches[b]);
  }
  const int requests = Requests();
  // Taken batches are not fetched ahead again.
  fetcher.Ahead({0, 2}, batches[2]);
  EXPECT_EQ(fetcher.stats().ahead_started, 3u);
  // Batch 0, and any batch whose read-ahead had not started when it was taken.
  EXPECT_EQ(fetcher.stats().ahead_used + fetcher.stats().fetched_now, 4u);
  EXPECT_GE(fetcher.stats().fetched_now, 1u);
  EXPECT_EQ(Requests(), requests);
}

// What the producer's metrics show of the reads ahead (croupier_s3_batches_*, _wait_seconds):
// a batch whose fetch ahead is under way when it is made waits for it, one fetched already is
// ready, one not asked for ahead is fetched now; the time waited is counted, by the fetcher and
// for the process.
TEST_F(RecordFetchTest, TheWaitForTheStoreAndTheBatchesReadyAreCounted) {
  const RecordFetcher::Stats before = RecordFetcher::ProcessStats();
  RecordFetcher fetcher(*dataset_, Opener(), {});
  std::vector<std::vector<Dataset::Location>> batches(4);
  for (size_t b = 0; b < batches.size(); ++b) {
    for (uint64_t i = 0; i < 10; ++i) batches[b].push_back(dataset_->Locate(b * 10 + i));
  }
  for (auto& f : files_) f->delay_ms = 100;
  fetcher.Ahead({0, 1}, batches[1]);
  auto waited = fetcher.Take({0, 1}, batches[1]);
  ASSERT_TRUE(waited.ok()) << waited.status();
  ExpectRecords(**waited, batches[1]);
  RecordFetcher::Stats s = fetcher.stats();
  EXPECT_EQ(s.ahead_used, 1u);
  EXPECT_EQ(s.ahead_ready, 0u);
  EXPECT_GE(s.wait_seconds, 0.05);

  for (auto& f : files_) f->delay_ms = 0;
  fetcher.Ahead({0, 2}, batches[2]);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (fetcher.stats().ahead_fetches < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(fetcher.Take({0, 2}, batches[2]).ok());
  ASSERT_TRUE(fetcher.Take({0, 3}, batches[3]).ok());
  s = fetcher.stats();
  EXPECT_EQ(s.ahead_used, 2u);
  EXPECT_EQ(s.ahead_ready, 1u);
  EXPECT_EQ(s.fetched_now, 1u);

  const RecordFetcher::Stats after = RecordFetcher::ProcessStats();
  EXPECT_EQ(after.ahead_used - before.ahead_used, 2u);
  EXPECT_EQ(after.ahead_ready - before.ahead_ready, 1u);
  EXPECT_EQ(after.fetched_now - before.fetched_now, 1u);
  EXPECT_NEAR(after.wait_seconds - before.wait_seconds, s.wait_seconds, 1e-6);
}

TEST_F(RecordFetchTest, ReadAheadStaysWithinItsBytes) {
  RecordFetcher fetcher(*dataset_, Opener(), {/*max_ahead_bytes=*/1000});
  std::vector<Dataset::Location> big;
  for (uint64_t id = 0; id < 20; ++id) big.push_back(dataset_->Locate(id));
  fetcher.Ahead({0, 1}, big);
  EXPECT_EQ(fetcher.stats().ahead_started, 0u);
  auto got = fetcher.Take({0, 1}, big);
  ASSERT_TRUE(got.ok());
  ExpectRecords(**got, big);
}

TEST_F(RecordFetchTest, EachCallIsAFetchOfItsOwnAndAForgottenListNeverRuns) {
  // Declared before the fetcher, so that it outlives the fetch thread that waits on it.
  absl::Notification release;
  RecordFetcher fetcher(*dataset_, Opener(), {.fetch_threads = 1});
  std::atomic<bool> forgotten_ran{false};
  std::atomic<bool> last_ran{false};
  auto batch = [&](uint64_t b) {
    RecordFetcher::Batches out;
    out.emplace_back(RecordFetcher::Key{0, b},
                     std::vector<Dataset::Location>{dataset_->Locate(b * 10)});
    return out;
  };
  // The one thread is held in the first list, while the next two wait behind it.
  fetcher.AheadLater({0, 0, 1}, [&] {
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return batch(0);
  });
  fetcher.AheadLater({0, 5, 6}, [&] {
    forgotten_ran = true;
    return batch(5);
  });
  fetcher.AheadLater({0, 7, 8}, [&] {
    last_ran = true;
    return batch(7);
  });
  fetcher.Forget({0, 5, 6});
  release.Notify();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fetcher.stats().ahead_fetches < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_TRUE(last_ran);
  EXPECT_FALSE(forgotten_ran);
  EXPECT_FALSE(fetcher.Known({0, 5}));
  // Batches 0 and 7, named in two calls: two fetches.
  EXPECT_EQ(fetcher.stats().ahead_started, 2u);
  EXPECT_EQ(fetcher.stats().ahead_fetches, 2u);
  EXPECT_GT(fetcher.stats().ahead_bytes, 0u);
  for (uint64_t b : {0, 7}) {
    auto got = fetcher.Take({0, b}, batch(b)[0].second);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectRecords(**got, batch(b)[0].second);
  }
  EXPECT_EQ(fetcher.stats().ahead_used, 2u);
  EXPECT_EQ(fetcher.stats().ahead_bytes, 0u);
}

// The records of batch `b` in these tests: two of file `file`.
std::vector<Dataset::Location> TwoOf(size_t file, uint64_t b) {
  return {Dataset::Location{file, b}, Dataset::Location{file, b + 1}};
}

// Holds the fetcher's one thread in a list until `release` (at most 20 s); returns once it is.
void HoldTheFetchThread(RecordFetcher& fetcher, absl::Notification& release) {
  auto held = std::make_shared<absl::Notification>();
  fetcher.AheadLater({0, 0, 1}, [held, &release] {
    held->Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
    return RecordFetcher::Batches{};
  });
  ASSERT_TRUE(held->WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST_F(RecordFetchTest, ABatchBeingMadeDoesNotWaitBehindReadsAheadNotStarted) {
  // Declared before the fetcher, so that it outlives the fetch thread that waits on it.
  absl::Notification release;
  RecordFetcher fetcher(*dataset_, Opener(), {.fetch_threads = 1});
  // The one fetch thread is held in a list; batch 3's fetch ahead waits behind it.
  HoldTheFetchThread(fetcher, release);
  fetcher.Ahead({0, 3}, TwoOf(1, 3));
  EXPECT_EQ(fetcher.stats().ahead_started, 1u);
  // The maker takes batch 3: it fetches it on its own thread rather than wait for the held one.
  absl::Notification took;
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> got;
  std::thread maker([&] {
    got = fetcher.Take({0, 3}, TwoOf(1, 3));
    took.Notify();
  });
  const bool in_time = took.WaitForNotificationWithTimeout(absl::Seconds(5));
  release.Notify();
  maker.join();
  ASSERT_TRUE(in_time) << "Take waited for the read-ahead thread held elsewhere";
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectRecords(**got, TwoOf(1, 3));
  const RecordFetcher::Stats s = fetcher.stats();
  EXPECT_EQ(s.ahead_used, 1u);
  EXPECT_EQ(s.ahead_by_maker, 1u);
  EXPECT_EQ(s.ahead_ready, 0u);
  EXPECT_EQ(s.fetched_now, 0u);
  EXPECT_EQ(s.ahead_bytes, 0u);
}

TEST_F(RecordFetchTest, AMakersBatchesTakenTogetherAreOneFetchOnItsThread) {
  // Declared before the fetcher, so that it outlives the fetch thread that waits on it.
  absl::Notification release;
  RecordFetcher fetcher(*dataset_, Opener(), {.fetch_threads = 1});
  HoldTheFetchThread(fetcher, release);
  // Batches 4 and 6 asked for together: the maker taking 4 fetches 6 too, in the same requests.
  RecordFetcher::Batches both;
  both.emplace_back(RecordFetcher::Key{0, 4}, TwoOf(0, 4));
  both.emplace_back(RecordFetcher::Key{0, 6}, TwoOf(0, 6));
  fetcher.Ahead(std::move(both));
  auto first = fetcher.Take({0, 4}, TwoOf(0, 4));
  ASSERT_TRUE(first.ok()) << first.status();
  const int requests = Requests();
  EXPECT_EQ(requests, 1) << "records 4 to 7 of one file merge into one request";
  auto second = fetcher.Take({0, 6}, TwoOf(0, 6));
  release.Notify();
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectRecords(**first, TwoOf(0, 4));
  ExpectRecords(**second, TwoOf(0, 6));
  EXPECT_EQ(Requests(), requests);
  const RecordFetcher::Stats s = fetcher.stats();
  EXPECT_EQ(s.ahead_used, 2u);
  EXPECT_EQ(s.ahead_by_maker, 1u);
  EXPECT_EQ(s.ahead_ready, 1u);
  EXPECT_EQ(s.ahead_fetches, 1u);
}

TEST_F(RecordFetchTest, TheNextBatchesOfTheTaskBeingMadeAreFetchedBeforeLaterTasks) {
  std::atomic<int> clock{0};
  for (auto& f : files_) f->clock = &clock;
  // Declared before the fetcher, so that it outlives the fetch thread that waits on it.
  absl::Notification release;
  RecordFetcher fetcher(*dataset_, Opener(), {.fetch_threads = 1});
  HoldTheFetchThread(fetcher, release);
  // Asked for while the thread is held: a later task's batch (file 0), then the next batch of
  // the task being made (file 1), which goes first.
  fetcher.Ahead({0, 20}, TwoOf(0, 20), RecordFetcher::Priority::kLater);
  fetcher.Ahead({0, 2}, TwoOf(1, 2), RecordFetcher::Priority::kNext);
  release.Notify();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fetcher.stats().ahead_fetches < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(fetcher.stats().ahead_fetches, 2u);
  // Both read (a tick each), batch 2's file first.
  EXPECT_GT(files_[1]->first_read.load(), 0);
  EXPECT_LT(files_[1]->first_read.load(), files_[0]->first_read.load());
  for (auto [key, locs] : {std::pair{RecordFetcher::Key{0, 2}, TwoOf(1, 2)},
                           std::pair{RecordFetcher::Key{0, 20}, TwoOf(0, 20)}}) {
    auto got = fetcher.Take(key, locs);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectRecords(**got, locs);
  }
  EXPECT_EQ(fetcher.stats().ahead_ready, 2u);
  EXPECT_EQ(fetcher.stats().ahead_by_maker, 0u);
}

}  // namespace
}  // namespace croupier
