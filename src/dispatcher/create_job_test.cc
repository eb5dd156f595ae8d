// CreateJob and GetJob against real TFRecord files.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dispatcher/job_builder.h"
#include "src/dispatcher/job_spec.h"
#include "src/dispatcher/kept_counts.h"
#include "src/dispatcher/test_util.h"
#include "src/common/status_macros.h"
#include "src/testing/forwarding_env.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class DispatcherCreateJobTest : public testing::DispatcherTest {
 protected:
  void ExpectRefused(const v1::JobSpec& spec, absl::StatusCode code, const std::string& substring) {
    absl::StatusOr<v1::JobInfo> info = Create(spec);
    EXPECT_EQ(info.status().code(), code) << info.status();
    EXPECT_THAT(std::string(info.status().message()), StartsWith("job '" + spec.name() + "': "));
    EXPECT_THAT(std::string(info.status().message()), HasSubstr(substring));
    EXPECT_EQ(impl_->StateDebugString().find("job 0"), std::string::npos) << "no job was created";
  }
};

TEST_F(DispatcherCreateJobTest, CountsWithDrop) {
  WriteData({10, 0, 13});  // 23 records
  absl::StatusOr<v1::JobInfo> info = Create(Spec("train", 2, 3));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_records(), 23u);
  // Rounds of 3 batches of 2: floor(23 / 6) = 3 rounds.
  EXPECT_EQ(info->batches_per_epoch(), 9u);
  EXPECT_EQ(info->steps_per_epoch(), 3u);
  EXPECT_EQ(info->batches_per_task(), 12u);  // 3 consumers * 4 rounds
  ASSERT_EQ(info->files_size(), 3);
  EXPECT_EQ(info->files(0).path(), dir_.Join("data/part-0.tfrecord"));
  EXPECT_EQ(info->files(0).num_records(), 10u);
  EXPECT_EQ(info->files(1).num_records(), 0u);
  EXPECT_EQ(info->files(2).num_records(), 13u);
  // Defaults filled in.
  EXPECT_EQ(info->spec().shuffle(), v1::SHUFFLE_GLOBAL);
  EXPECT_EQ(info->spec().remainder(), v1::REMAINDER_DROP);
  EXPECT_EQ(info->spec().mode(), v1::DEAL_MODE_DEALT);
  EXPECT_EQ(info->spec().block_size(), 1024u);
  EXPECT_EQ(info->spec().window_blocks(), 16u);
  EXPECT_EQ(info->spec().features(), testing::kTestFeatures);
  EXPECT_EQ(info->spec().files(0), dir_.Join("data/*.tfrecord"));  // as given

  absl::StatusOr<v1::GetJobResponse> got = impl_->GetJob([] {
    v1::GetJobRequest r;
    r.set_name("train");
    return r;
  }());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job().ShortDebugString(), info->ShortDebugString());
}

TEST_F(DispatcherCreateJobTest, CountsWithPad) {
  WriteData({23});
  v1::JobSpec spec = Spec("train", 2, 3);
  spec.set_remainder(v1::REMAINDER_PAD);
  DispatcherOptions options;
  options.rounds_per_task = 2;
  Recreate(options);
  absl::StatusOr<v1::JobInfo> info = Create(spec);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->batches_per_epoch(), 12u);  // ceil(23 / 6) = 4 rounds
  EXPECT_EQ(info->steps_per_epoch(), 4u);
  EXPECT_EQ(info->batches_per_task(), 6u);
}

TEST_F(DispatcherCreateJobTest, OptionsAreChecked) {
  DispatcherOptions options;
  options.producer_timeout = absl::ZeroDuration();
  auto impl = DispatcherImpl::Create(options);
  EXPECT_EQ(impl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(impl.status().message()), HasSubstr("producer_timeout is 0"));
}

TEST(AutoRoundsPerTaskTest, FourUnlessTheEpochIsLongAndTheBatchesSmall) {
  // Short epochs keep 4 rounds (and every epoch keeps at least 16 tasks once it is raised).
  EXPECT_EQ(AutoRoundsPerTask(10, 4, 1024), 4u);
  EXPECT_EQ(AutoRoundsPerTask(79, 4, 1024), 4u);
  EXPECT_EQ(AutoRoundsPerTask(195, 4, 280 << 10), 12u);  // 195 steps / 16
  // 64 MiB of batches per task at most: 4 consumers x 1 MiB -> 16 rounds.
  EXPECT_EQ(AutoRoundsPerTask(100000, 4, 1 << 20), 16u);
  // Batches so large that 4 rounds exceed it still get 4.
  EXPECT_EQ(AutoRoundsPerTask(100000, 16, 16 << 20), 4u);
  // Tiny batches: at most 1,024 rounds.
  EXPECT_EQ(AutoRoundsPerTask(100000, 1, 16), 1024u);
  // Unknown batch size (a Python job): the epoch alone.
  EXPECT_EQ(AutoRoundsPerTask(3200, 2, 0), 200u);
}

TEST_F(DispatcherCreateJobTest, TheAutomaticTaskSizeComesFromTheDataAndAGivenOneIsKept) {
  WriteData({400});
  ASSERT_EQ(DispatcherOptions().rounds_per_task, 0u);  // automatic by default
  absl::StatusOr<v1::JobInfo> info = Create(Spec("auto", 2, 2));  // 100 steps
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps_per_epoch(), 100u);
  EXPECT_EQ(info->batches_per_task(), 2u * 6);  // 100 / 16 rounds
  DispatcherOptions options;
  options.rounds_per_task = 3;
  Recreate(options);
  info = Create(Spec("given", 2, 2));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->batches_per_task(), 2u * 3);
}

// An Env whose glob lists files as an object store's listing does, each with its size,
// modification time and an ETag, and which counts the Stats asked of it. Given `shared`, it keeps
// the files derived from others there, as a store keeps them beside its objects, and counts the
// record indexes read (from a cache or from there).
class ListingEnv final : public testing::ForwardingEnv {
 public:
  explicit ListingEnv(std::string shared = "") : shared_(std::move(shared)) {}
  absl::StatusOr<FileStat> Stat(const std::string& p) override {
    ++stats;
    return StatOf(p);
  }
  std::string SharedDerivedPath(const std::string& p, absl::string_view suffix) override {
    return shared_.empty() ? "" : absl::StrCat(shared_, p, suffix);
  }
  absl::Status WriteFileAtomically(const std::string& p, absl::string_view bytes) override {
    RETURN_IF_ERROR(CreateDirs(std::filesystem::path(p).parent_path().string()));
    return ForwardingEnv::WriteFileAtomically(p, bytes);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    auto file = ForwardingEnv::OpenForRead(p);
    if (file.ok() && absl::EndsWith(p, ".crindex")) ++index_reads;
    return file;
  }
  absl::StatusOr<std::vector<Listed>> GlobWithStats(const std::string& p) override {
    absl::StatusOr<std::vector<Listed>> out = ForwardingEnv::GlobWithStats(p);
    if (!out.ok()) return out;
    for (Listed& listed : *out) {
      absl::StatusOr<FileStat> st = StatOf(listed.path);
      if (!st.ok()) return st.status();
      listed.stat = *st;
    }
    return out;
  }
  // What the store says of a file, in a listing or asked alone: an ETag too, which changes with
  // the file's size.
  absl::StatusOr<FileStat> StatOf(const std::string& p) {
    absl::StatusOr<FileStat> st = ForwardingEnv::Stat(p);
    if (st.ok()) st->etag = absl::StrCat("\"etag of ", p, " of ", st->size, " bytes\"");
    return st;
  }
  std::atomic<int> stats{0};
  std::atomic<int> index_reads{0};

 private:
  const std::string shared_;
};

TEST_F(DispatcherCreateJobTest, AJobOnListedFilesTakesTheirStatsFromTheListing) {
  WriteData({10, 13});
  ListingEnv env;
  IndexCache cache(dir_.Join("listed-index"), &env);
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(Spec("train", 2, 3));
  ASSERT_TRUE(spec.ok()) << spec.status();
  // The first job indexes the files: each scan asks for the file's stat after it, to see that it
  // did not change meanwhile, and nothing else.
  absl::StatusOr<v1::JobInfo> first = BuildJobInfo(*spec, cache, env, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(env.stats.load(), 2);
  // The next finds the indexes kept: the listing's stats are all it needs.
  env.stats = 0;
  absl::StatusOr<v1::JobInfo> second = BuildJobInfo(*spec, cache, env, 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(env.stats.load(), 0);
  ASSERT_EQ(second->files_size(), 2);
  EXPECT_EQ(second->files(1).etag(), (*env.StatOf(dir_.Join("data/part-1.tfrecord"))).etag);
  EXPECT_EQ(second->num_records(), 23u);
}

// The first job on a pattern of objects keeps their record counts in the store; the next job
// on it, on another dispatcher (an empty index cache), reads them instead of every object's
// index: only the index of the file whose first record it checks. An object written again since
// is not taken from them: that job indexes the files and keeps the new counts.
TEST_F(DispatcherCreateJobTest, ASecondJobOnAPatternTakesTheCountsTheFirstKept) {
  WriteData({10, 0, 13});
  ListingEnv env(dir_.Join("store/"));
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(Spec("train", 2, 3));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string kept = KeptCountsPath(env, spec->files(0));
  ASSERT_FALSE(kept.empty());
  IndexCache first_cache(dir_.Join("index-1"), &env);
  absl::StatusOr<v1::JobInfo> first = BuildJobInfo(*spec, first_cache, env, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(std::filesystem::exists(kept)) << kept;

  env.index_reads = 0;
  IndexCache second_cache(dir_.Join("index-2"), &env);
  absl::StatusOr<v1::JobInfo> second = BuildJobInfo(*spec, second_cache, env, 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->ShortDebugString(), first->ShortDebugString());
  EXPECT_EQ(env.index_reads.load(), 1);  // part-0's, whose record 0 is checked

  testing::WriteTestFile(dir_.Join("data/part-2.tfrecord"), 10, 15);
  env.index_reads = 0;
  IndexCache third_cache(dir_.Join("index-3"), &env);
  absl::StatusOr<v1::JobInfo> third = BuildJobInfo(*spec, third_cache, env, 0);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->files(2).num_records(), 15u);
  EXPECT_EQ(third->num_records(), 25u);
  // Each file's kept index: part-2's no longer matches it, so it is scanned.
  EXPECT_EQ(env.index_reads.load(), 3);
  absl::StatusOr<std::string> bytes = ReadFileToString(*Env::Default(), kept);
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<v1::KeptCounts> counts = ParseKeptCounts(*bytes, kept);
  ASSERT_TRUE(counts.ok()) << counts.status();
  ASSERT_EQ(counts->files_size(), 3);
  EXPECT_EQ(counts->files(2).num_records(), 15u);
  EXPECT_EQ(counts->pattern(), spec->files(0));
}

// Kept bytes that are not a pattern's counts are refused, naming where they were read.
TEST(KeptCountsTest, BadBytesAreDataLossNamingTheirSource) {
  v1::KeptCounts counts;
  counts.set_pattern("s3://b/d/*.tfrecord");
  v1::FileInfo* f = counts.add_files();
  f->set_path("s3://b/d/a.tfrecord");
  f->set_num_records(7);
  f->set_etag("\"e\"");
  const std::string bytes = SerializeKeptCounts(counts);
  absl::StatusOr<v1::KeptCounts> back = ParseKeptCounts(bytes, "s3://x");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ShortDebugString(), counts.ShortDebugString());
  for (const std::string& bad :
       {bytes.substr(0, 10), "XRCOUNT1" + bytes.substr(8), bytes.substr(0, bytes.size() - 1) + "?",
        std::string("CRCOUNT1") + "\xff\xff\xff"}) {
    absl::StatusOr<v1::KeptCounts> got = ParseKeptCounts(bad, "s3://x");
    EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("kept counts s3://x are invalid"));
  }
}

TEST_F(DispatcherCreateJobTest, GetUnknownJob) {
  v1::GetJobRequest request;
  request.set_name("nope");
  auto got = impl_->GetJob(request);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("job 'nope' is unknown (there are no jobs)"));
}

TEST_F(DispatcherCreateJobTest, NoFileMatches) {
  WriteData({10});
  v1::JobSpec spec = Spec("train", 2, 1);
  spec.add_files(dir_.Join("other/*.tfrecord"));
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "no file matches '" + dir_.Join("other/*.tfrecord") + "' (directory " +
                    dir_.Join("other") + " does not exist)");
  spec = Spec("train", 2, 1);
  spec.set_files(0, dir_.Join("data/*.tfrec"));
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "no file matches '" + dir_.Join("data/*.tfrec") + "'");
  spec = Spec("train", 2, 1);
  spec.set_files(0, dir_.Join("missing.tfrecord"));  // a plain path is a pattern too
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument, "no file matches");
}

TEST_F(DispatcherCreateJobTest, FileGivenTwice) {
  WriteData({10});
  v1::JobSpec spec = Spec("train", 2, 1);
  spec.add_files(dir_.Join("data/part-0.tfrecord"));
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "file " + dir_.Join("data/part-0.tfrecord") + " is given twice");
}

TEST_F(DispatcherCreateJobTest, CorruptFileKeepsItsCode) {
  WriteData({4, 4});
  std::ofstream(dir_.Join("data/part-1.tfrecord"), std::ios::app) << "garbage, not a record";
  absl::StatusOr<v1::JobInfo> info = Create(Spec("train", 2, 1));
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << info.status();
  EXPECT_THAT(std::string(info.status().message()), StartsWith("job 'train': "));
  EXPECT_THAT(std::string(info.status().message()), HasSubstr(dir_.Join("data/part-1.tfrecord")));
}

TEST_F(DispatcherCreateJobTest, RecordThatIsNotAnExample) {
  std::filesystem::create_directories(dir_.Join("data"));
  testing::WriteFile(dir_.Join("data/a.tfrecord"), {"\xff\xff\xff", "x"});
  ExpectRefused(Spec("train", 1, 1), absl::StatusCode::kDataLoss,
                "record 0 of " + dir_.Join("data/a.tfrecord") + " is not a tf.train.Example");
}

TEST_F(DispatcherCreateJobTest, FeaturesCheckedAgainstTheFirstRecord) {
  WriteData({0, 10});  // the first file is empty: record 0 of the second is checked
  const std::string where = "in record 0 of " + dir_.Join("data/part-1.tfrecord");
  v1::JobSpec spec = Spec("train", 2, 1);
  spec.set_features("idx:int64,label:int64");
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "feature 'label' is not in record 0 of " + dir_.Join("data/part-1.tfrecord") +
                    " (it has idx, name, x)");
  spec.set_features("idx:float32");
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "feature 'idx' is float32 in the spec but int64_list " + where);
  spec.set_features("name:int64");
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "feature 'name' is int64 in the spec but bytes_list " + where);
  spec.set_features("x:float32[3]");
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument,
                "feature 'x' is x:float32[3] in the spec (3 values) but has 2 values " + where);
  spec.set_features("x:float32");
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument, "(1 value) but has 2 values");
  // Variable length and matching fixed shapes pass.
  spec.set_features("x:float32[*],idx:int64[1],name:bytes[*]");
  EXPECT_TRUE(Create(spec).ok());
}

TEST_F(DispatcherCreateJobTest, BadFeatureSpecText) {
  WriteData({10});
  v1::JobSpec spec = Spec("train", 2, 1);
  spec.set_features("idx:int64,idx:int64");
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument, "idx");
}

TEST_F(DispatcherCreateJobTest, TooFewRecords) {
  WriteData({5});
  ExpectRefused(Spec("train", 2, 3), absl::StatusCode::kInvalidArgument,
                "num_records is 5, fewer than batch_size*num_consumers = 2*3 = 6");
  v1::JobSpec pad = Spec("train", 2, 3);
  pad.set_remainder(v1::REMAINDER_PAD);
  absl::StatusOr<v1::JobInfo> info = Create(pad);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->batches_per_epoch(), 3u);
}

TEST_F(DispatcherCreateJobTest, NoRecordsAtAll) {
  WriteData({0, 0});
  ExpectRefused(Spec("train", 2, 1), absl::StatusCode::kInvalidArgument,
                "the 2 files hold no records");
}

TEST_F(DispatcherCreateJobTest, SpecRefusalsNameTheJob) {
  WriteData({10});
  v1::JobSpec spec = Spec("train", 2, 0);
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument, "num_consumers is 0");
  spec = Spec("train", 2, 1);
  spec.set_mode(static_cast<v1::DealMode>(5));
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument, "mode 5 is not a value");
  spec = Spec("train", 0, 1);
  ExpectRefused(spec, absl::StatusCode::kInvalidArgument, "batch_size is 0");
  spec = Spec("train", 2, 1);
  spec.set_shuffle(v1::SHUFFLE_BLOCKS);
  spec.set_window_blocks(0);  // a default, not an error
  EXPECT_TRUE(Create(spec).ok());
  auto bad_name = Create(Spec("no good", 2, 1));
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_name.status().message()), HasSubstr("job name 'no good' is invalid"));
}

TEST_F(DispatcherCreateJobTest, ExistingName) {
  WriteData({20});
  absl::StatusOr<v1::JobInfo> first = Create(Spec("train", 2, 2));
  ASSERT_TRUE(first.ok()) << first.status();

  auto again = Create(Spec("train", 2, 2));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.status().message()),
              HasSubstr("job 'train' already exists (with this spec; pass exist_ok to use it)"));

  // exist_ok with an identical spec, defaults spelled out or not, gives the existing job.
  v1::JobSpec explicit_defaults = Spec("train", 2, 2);
  explicit_defaults.set_shuffle(v1::SHUFFLE_GLOBAL);
  explicit_defaults.set_mode(v1::DEAL_MODE_DEALT);
  explicit_defaults.set_block_size(1024);
  auto same = Create(explicit_defaults, /*exist_ok=*/true);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->ShortDebugString(), first->ShortDebugString());

  auto different = Create(Spec("train", 4, 2), /*exist_ok=*/true);
  EXPECT_EQ(different.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(different.status().message()),
              HasSubstr("job 'train' already exists with a different spec: batch_size is 2 in the "
                        "existing job, 4 in this request"));
}

TEST_F(DispatcherCreateJobTest, ConcurrentCreatesOfOneJobAllGetIt) {
  WriteData({50, 50});
  constexpr int kThreads = 6;
  std::vector<absl::StatusOr<v1::JobInfo>> results(kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = Create(Spec("train", 2, 2), /*exist_ok=*/true); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ShortDebugString(), results[0]->ShortDebugString());
  }
  EXPECT_EQ(results[0]->num_records(), 100u);
}

TEST_F(DispatcherCreateJobTest, ConcurrentFailingCreatesAllFail) {
  WriteData({50});
  constexpr int kThreads = 4;
  v1::JobSpec spec = Spec("train", 2, 2);
  spec.set_features("missing:int64");
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = Create(spec, /*exist_ok=*/true).status(); });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("feature 'missing' is not in record 0"));
  }
}

}  // namespace
}  // namespace croupier
