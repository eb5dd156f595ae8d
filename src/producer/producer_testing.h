// Helpers shared by the producer's unit tests: small TFRecord datasets, hand-built JobInfos, an
// Env whose reads can be held back, and batches of ids (what fake records functions make).
#ifndef CROUPIER_SRC_PRODUCER_PRODUCER_TESTING_H_
#define CROUPIER_SRC_PRODUCER_PRODUCER_TESTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "croupier/plan.h"
#include "croupier/tfrecord.h"
#include "gtest/gtest.h"
#include "proto/croupier.pb.h"
#include "src/common/env.h"
#include "src/job/batch_key.h"
#include "src/job/job_settings.h"

namespace croupier::testing {

// A deadline that only a failing test reaches: 20 seconds from now.
inline absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

// Polls `done` every 2 ms until it holds, for at most 10 seconds; whether it held.
inline bool WaitFor(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// The key of batch `batch` of epoch `epoch` of job `job`.
inline BatchKey Key(uint64_t batch, uint64_t epoch = 0, const std::string& job = "train") {
  return BatchKey{job, epoch, batch};
}

// A batch of one int64 column "id" holding `ids`: what a fake records function or stream makes.
inline absl::StatusOr<Batch> IdsBatch(const std::vector<int64_t>& ids) {
  const ColumnData column{.name = "id",
                          .dtype = DType::kInt64,
                          .variable_length = false,
                          .dims = {},
                          .num_values = ids.size(),
                          .values = absl::string_view(reinterpret_cast<const char*>(ids.data()),
                                                      ids.size() * sizeof(int64_t)),
                          .offsets = {},
                          .row_splits = {}};
  return Batch::FromColumns(ids.size(), {&column, 1});
}

inline constexpr char kFeatures[] = "id:int64,pair:float32[2],tokens:int64[*],name:bytes";

// The record of global id `id`: every feature is a function of the id.
inline Example RecordOf(int64_t id) {
  const float f = static_cast<float>(id);
  return {{"id", Feature::Ints({id})},
          {"pair", Feature::Floats({f, -f})},
          {"tokens", Feature::Ints(std::vector<int64_t>(id % 4, id))},
          {"name", Feature::Bytes({absl::StrCat("record-", id)})}};
}

// Writes files holding counts[i] records each, numbered globally in file order, and returns their
// paths. Records are RecordOf(id) unless `record` says otherwise.
inline std::vector<std::string> WriteDataset(
    const std::string& dir, const std::vector<int>& counts,
    const std::function<std::string(int64_t)>& record = nullptr) {
  std::vector<std::string> paths;
  int64_t id = 0;
  for (size_t f = 0; f < counts.size(); ++f) {
    paths.push_back(absl::StrCat(dir, "/part-", f, ".tfrecord"));
    auto writer = RecordWriter::Create(paths.back());
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (int r = 0; r < counts[f]; ++r, ++id) {
      const std::string bytes = record ? record(id) : EncodeExample(RecordOf(id));
      EXPECT_TRUE((*writer)->Write(bytes).ok());
    }
    EXPECT_TRUE((*writer)->Close().ok());
  }
  return paths;
}

struct JobOptions {
  std::string name = "train";
  uint32_t batch_size = 4;
  uint32_t num_consumers = 2;
  uint64_t seed = 7;
  std::string shuffle = "global";
  std::string remainder = "drop";
  uint32_t block_size = 0;
  uint32_t window_blocks = 0;
  std::string mode = "dealt";
  std::string features = kFeatures;
};

// A JobInfo as the dispatcher would make it for `paths` holding `counts` records.
inline v1::JobInfo MakeJob(const std::vector<std::string>& paths, const std::vector<int>& counts,
                           const JobOptions& o = {}) {
  v1::JobInfo job;
  v1::JobSpec& spec = *job.mutable_spec();
  spec.set_name(o.name);
  spec.set_features(o.features);
  spec.set_batch_size(o.batch_size);
  spec.set_num_consumers(o.num_consumers);
  spec.set_seed(o.seed);
  EXPECT_TRUE(
      SetSettingsFromText({.mode = o.mode, .shuffle = o.shuffle, .remainder = o.remainder}, spec)
          .ok());
  spec.set_block_size(o.block_size);
  spec.set_window_blocks(o.window_blocks);
  uint64_t total = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    v1::FileInfo* f = job.add_files();
    f->set_path(paths[i]);
    f->set_num_records(counts[i]);
    total += counts[i];
  }
  job.set_num_records(total);
  PlanSpec plan;
  plan.num_records = total;
  plan.batch_size = o.batch_size;
  plan.num_consumers = o.num_consumers;
  plan.remainder = o.remainder == "pad" ? Remainder::kPad : Remainder::kDrop;
  auto epoch = EpochPlan::Create(plan, 0);
  if (epoch.ok()) {
    job.set_batches_per_epoch(epoch->num_batches());
    job.set_steps_per_epoch(epoch->steps_per_consumer());
  }
  return job;
}

inline v1::Task MakeTask(uint64_t id, const std::string& job, uint64_t epoch, uint64_t first,
                         uint64_t num) {
  v1::Task task;
  task.set_task_id(id);
  task.set_job(job);
  task.set_epoch(epoch);
  task.set_first_batch(first);
  task.set_num_batches(num);
  return task;
}

// The values of the "id" column of a batch.
inline std::vector<uint64_t> IdsOf(const Batch& batch) {
  const ColumnView* ids = batch.view().Find("id");
  EXPECT_NE(ids, nullptr);
  if (ids == nullptr) return {};
  std::vector<uint64_t> out;
  for (int64_t v : ids->ints()) out.push_back(static_cast<uint64_t>(v));
  return out;
}

// An Env whose file reads wait while the gate is closed (20 seconds at most, so that a failed test
// cannot hang on a closed gate), counting the reads waiting. A remote one's files say they are an
// object store's (RandomAccessFile::remote(): a TfrecordBatchMaker fetches their records through
// its RecordFetcher), and every range asked of their ReadRanges is logged before it waits.
class GatedEnv : public Env {
 public:
  struct Range {
    std::string path;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  explicit GatedEnv(bool remote = false) : remote_(remote) {}
  // The ranges asked of ReadRanges so far, in order.
  std::vector<Range> ranges() {
    absl::MutexLock lock(&mu_);
    return ranges_;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Waits until `n` reads are held at the gate; false after 10 seconds.
  bool AwaitWaiting(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) override {
    auto file = Env::Default()->OpenForRead(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<RandomAccessFile>(new GatedFile(this, *std::move(file)));
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& path) override {
    return Env::Default()->OpenForWrite(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) override {
    return Env::Default()->OpenForAppend(path);
  }
  absl::Status Truncate(const std::string& path, uint64_t size) override {
    return Env::Default()->Truncate(path, size);
  }
  absl::Status SyncDir(const std::string& path) override { return Env::Default()->SyncDir(path); }
  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    return Env::Default()->Stat(path);
  }
  absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) override {
    return Env::Default()->WriteFileAtomically(path, contents);
  }
  absl::Status CreateDirs(const std::string& path) override {
    return Env::Default()->CreateDirs(path);
  }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override {
    return Env::Default()->Glob(pattern);
  }

 private:
  class GatedFile : public RandomAccessFile {
   public:
    GatedFile(GatedEnv* env, std::unique_ptr<RandomAccessFile> file)
        : env_(env), file_(std::move(file)) {}
    absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* dst) const override {
      env_->Pass();
      return file_->Read(offset, n, dst);
    }
    const std::string& name() const override { return file_->name(); }
    absl::StatusOr<uint64_t> Size() const override { return file_->Size(); }
    bool remote() const override { return env_->remote_; }
    absl::Status ReadRanges(absl::Span<Range> ranges) const override {
      env_->Log(name(), ranges);
      return RandomAccessFile::ReadRanges(ranges);  // each range a Read through the gate
    }

   private:
    GatedEnv* const env_;
    std::unique_ptr<RandomAccessFile> file_;
  };

  void Pass() {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    mu_.AwaitWithTimeout(absl::Condition(&open_), absl::Seconds(20));
    --waiting_;
  }

  void Log(const std::string& path, absl::Span<const RandomAccessFile::Range> ranges) {
    absl::MutexLock lock(&mu_);
    for (const auto& r : ranges) ranges_.push_back({path, r.offset, r.length});
  }

  const bool remote_;
  absl::Mutex mu_;
  std::vector<Range> ranges_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_PRODUCER_PRODUCER_TESTING_H_
