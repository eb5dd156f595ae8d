// Helpers shared by the dispatcher's tests: journal updates in one line, small TFRecord datasets,
// and a DispatcherImpl on a FakeClock.
#ifndef CROUPIER_SRC_DISPATCHER_TEST_UTIL_H_
#define CROUPIER_SRC_DISPATCHER_TEST_UTIL_H_

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "croupier/example.h"
#include "croupier/plan.h"
#include "croupier/tfrecord.h"
#include "gtest/gtest.h"
#include "proto/croupier.pb.h"
#include "proto/journal.pb.h"
#include "src/common/clock.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/common/testing.h"
#include "src/dispatcher/dispatcher_impl.h"
#include "src/job/job_settings.h"

namespace croupier::testing {

// A JobInfo without files, for state tests.
inline v1::JobInfo FakeJob(const std::string& name, uint64_t batches_per_epoch,
                           uint32_t num_consumers, uint64_t batches_per_task,
                           uint64_t num_epochs = 0, const std::string& mode = "dealt") {
  v1::JobInfo info;
  v1::JobSpec* spec = info.mutable_spec();
  spec->set_name(name);
  spec->add_files("/nowhere/*.tfrecord");
  spec->set_features("idx:int64");
  spec->set_batch_size(2);
  spec->set_num_consumers(num_consumers);
  spec->set_num_epochs(num_epochs);
  EXPECT_TRUE(
      SetSettingsFromText({.mode = mode, .shuffle = "global", .remainder = "drop"}, *spec).ok());
  info.set_num_records(batches_per_epoch * 2);
  info.set_batches_per_epoch(batches_per_epoch);
  info.set_steps_per_epoch(num_consumers == 0 ? 0 : batches_per_epoch / num_consumers);
  info.set_batches_per_task(batches_per_task);
  return info;
}

inline journal::Update JobCreated(const v1::JobInfo& info, uint32_t plan_version = kPlanVersion) {
  journal::Update u;
  *u.mutable_job_created()->mutable_job() = info;
  u.mutable_job_created()->set_plan_version(plan_version);
  return u;
}
inline journal::Update ProducerRegistered(uint64_t id, const std::string& address,
                                          const std::string& source_job = "",
                                          uint32_t source_index = 0) {
  journal::Update u;
  u.mutable_producer_registered()->set_producer_id(id);
  u.mutable_producer_registered()->set_data_address(address);
  u.mutable_producer_registered()->set_source_job(source_job);
  u.mutable_producer_registered()->set_source_index(source_index);
  return u;
}
// A Python-source job (croupier.serve) of the same shape as FakeJob.
inline v1::JobInfo FakePythonJob(const std::string& name, uint64_t batches_per_epoch,
                                 uint32_t num_consumers, uint64_t batches_per_task,
                                 uint64_t num_epochs = 0) {
  v1::JobInfo info = FakeJob(name, batches_per_epoch, num_consumers, batches_per_task, num_epochs);
  info.mutable_spec()->clear_files();
  info.mutable_spec()->set_source(v1::SOURCE_KIND_PYTHON);
  info.mutable_spec()->set_shuffle(v1::SHUFFLE_NONE);
  info.mutable_spec()->set_source_batches_per_epoch(batches_per_epoch);
  return info;
}
inline journal::Update ProducerDraining(uint64_t id, std::vector<uint64_t> kept) {
  journal::Update u;
  u.mutable_producer_draining()->set_producer_id(id);
  for (uint64_t t : kept) u.mutable_producer_draining()->add_kept_tasks(t);
  return u;
}
inline journal::Update ProducerRemoved(uint64_t id) {
  journal::Update u;
  u.mutable_producer_removed()->set_producer_id(id);
  return u;
}
inline v1::Task MakeTask(uint64_t id, const std::string& job, uint64_t epoch, uint64_t first,
                         uint64_t num) {
  v1::Task t;
  t.set_task_id(id);
  t.set_job(job);
  t.set_epoch(epoch);
  t.set_first_batch(first);
  t.set_num_batches(num);
  return t;
}
inline journal::Update TaskAssigned(const v1::Task& task, uint64_t producer) {
  journal::Update u;
  *u.mutable_task_assigned()->mutable_task() = task;
  u.mutable_task_assigned()->set_producer_id(producer);
  return u;
}
inline journal::Update TaskRemade(const std::string& job, uint64_t epoch, uint64_t first_batch) {
  journal::Update u;
  u.mutable_task_remade()->set_job(job);
  u.mutable_task_remade()->set_epoch(epoch);
  u.mutable_task_remade()->set_first_batch(first_batch);
  return u;
}

inline journal::Update TaskFinished(uint64_t task, uint64_t producer) {
  journal::Update u;
  u.mutable_task_finished()->set_task_id(task);
  u.mutable_task_finished()->set_producer_id(producer);
  return u;
}
inline journal::Update ConsumerRegistered(uint64_t id, const std::string& job, uint32_t rank,
                                          uint64_t epoch = 0, uint64_t step = 0) {
  journal::Update u;
  auto* c = u.mutable_consumer_registered();
  c->set_consumer_id(id);
  c->set_job(job);
  c->set_rank(rank);
  c->set_epoch(epoch);
  c->set_step(step);
  return u;
}
inline journal::Update ConsumerAcknowledged(uint64_t id, uint64_t epoch, uint64_t step) {
  journal::Update u;
  auto* c = u.mutable_consumer_acknowledged();
  c->set_consumer_id(id);
  c->set_epoch(epoch);
  c->set_step(step);
  return u;
}
inline journal::Update TasksDelivered(const std::string& job, uint64_t epoch, uint64_t step) {
  journal::Update u;
  auto* d = u.mutable_tasks_delivered();
  d->set_job(job);
  d->set_epoch(epoch);
  d->set_step(step);
  return u;
}
inline journal::Update ConsumerRemoved(uint64_t id) {
  journal::Update u;
  u.mutable_consumer_removed()->set_consumer_id(id);
  return u;
}

// The record every test file holds at index i: idx (int64 scalar), x (float32[2]), name (bytes).
inline std::string TestRecord(int64_t i) {
  Example e = {{"idx", Feature::Ints({i})},
               {"x", Feature::Floats({0.5f * i, 1.0f})},
               {"name", Feature::Bytes({absl::StrCat("r", i)})}};
  return EncodeExample(e);
}

// Writes `records` (already serialized) to a TFRecord file.
inline void WriteFile(const std::string& path, const std::vector<std::string>& records) {
  auto writer = RecordWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const std::string& r : records) ASSERT_TRUE((*writer)->Write(r).ok());
  ASSERT_TRUE((*writer)->Close().ok());
}

// Writes `count` test records numbered from `first`.
inline void WriteTestFile(const std::string& path, int64_t first, int64_t count) {
  std::vector<std::string> records;
  for (int64_t i = first; i < first + count; ++i) records.push_back(TestRecord(i));
  WriteFile(path, records);
}

inline constexpr char kTestFeatures[] = "idx:int64,x:float32[2],name:bytes";

// An Env whose appended files fail on demand: a write that stores only part of its data (a full
// disk), a failing sync, a failing truncate.
class FaultyEnv : public Env {
 public:
  bool fail_append = false;
  bool fail_sync = false;
  bool fail_truncate = false;

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    return Env::Default()->OpenForRead(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& p) override {
    return Env::Default()->OpenForWrite(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& p) override {
    ASSIGN_OR_RETURN(auto file, Env::Default()->OpenForAppend(p));
    return std::unique_ptr<WritableFile>(new File(this, std::move(file)));
  }
  absl::Status Truncate(const std::string& p, uint64_t size) override {
    if (fail_truncate) return ErrnoToStatus(EIO, "truncating", p);
    return Env::Default()->Truncate(p, size);
  }
  absl::Status SyncDir(const std::string& p) override { return Env::Default()->SyncDir(p); }
  absl::StatusOr<FileStat> Stat(const std::string& p) override { return Env::Default()->Stat(p); }
  absl::Status WriteFileAtomically(const std::string& p, absl::string_view c) override {
    return Env::Default()->WriteFileAtomically(p, c);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return Env::Default()->Rename(from, to);
  }
  absl::Status RemoveFile(const std::string& p) override { return Env::Default()->RemoveFile(p); }
  absl::Status CreateDirs(const std::string& p) override { return Env::Default()->CreateDirs(p); }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& p) override {
    return Env::Default()->Glob(p);
  }

 private:
  class File : public WritableFile {
   public:
    File(FaultyEnv* env, std::unique_ptr<WritableFile> file) : env_(env), file_(std::move(file)) {}
    absl::Status Append(absl::string_view data) override {
      if (!env_->fail_append) return file_->Append(data);
      file_->Append(data.substr(0, data.size() / 2)).IgnoreError();
      return ErrnoToStatus(ENOSPC, "writing", name());
    }
    absl::Status Sync() override {
      if (env_->fail_sync) return ErrnoToStatus(EIO, "syncing", name());
      return file_->Sync();
    }
    absl::Status Close() override { return file_->Close(); }
    const std::string& name() const override { return file_->name(); }

   private:
    FaultyEnv* const env_;
    std::unique_ptr<WritableFile> file_;
  };
};

// An Env that keeps what a machine crash would leave of the files written through it, and counts
// the syncs: a file's durable image is its contents as of the start of its last successful Sync
// (what that fdatasync surely covers), or what WriteFileAtomically wrote (synced and renamed).
// Truncating changes the image only at the next sync. A rename moves the images only once the
// directory is synced (SyncDir); until then a crash leaves the names as they were. Each sync takes
// `sync_delay` (a disk's fdatasync); with fail_sync it fails (EIO); while hold_syncs is set it
// waits to be released. Thread-safe.
class CrashEnv : public Env {
 public:
  explicit CrashEnv(absl::Duration sync_delay = absl::ZeroDuration()) : sync_delay_(sync_delay) {}

  void set_fail_sync(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_sync_ = fail;
  }
  void set_hold_syncs(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_syncs_ = hold;
  }
  // Syncs begun (held ones included) and finished successfully.
  uint64_t syncs_started() const {
    absl::MutexLock lock(&mu_);
    return syncs_started_;
  }
  uint64_t syncs() const {
    absl::MutexLock lock(&mu_);
    return syncs_;
  }
  // The durable image of `path` (empty if none), and its size.
  std::string Durable(const std::string& path) const {
    absl::MutexLock lock(&mu_);
    auto it = durable_.find(path);
    return it == durable_.end() ? "" : it->second;
  }
  uint64_t DurableBytes(const std::string& path) const { return Durable(path).size(); }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    return Env::Default()->OpenForRead(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& p) override {
    ASSIGN_OR_RETURN(auto file, Env::Default()->OpenForWrite(p));
    return std::unique_ptr<WritableFile>(new File(this, p, std::move(file)));
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& p) override {
    ASSIGN_OR_RETURN(auto file, Env::Default()->OpenForAppend(p));
    return std::unique_ptr<WritableFile>(new File(this, p, std::move(file)));
  }
  absl::Status Truncate(const std::string& p, uint64_t size) override {
    return Env::Default()->Truncate(p, size);
  }
  absl::Status SyncDir(const std::string& p) override {
    RETURN_IF_ERROR(Env::Default()->SyncDir(p));
    absl::MutexLock lock(&mu_);
    for (const auto& [from, to] : renames_) {
      auto it = durable_.find(from);
      durable_[to] = it == durable_.end() ? "" : it->second;
      if (it != durable_.end()) durable_.erase(from);
    }
    renames_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<FileStat> Stat(const std::string& p) override { return Env::Default()->Stat(p); }
  absl::Status WriteFileAtomically(const std::string& p, absl::string_view c) override {
    RETURN_IF_ERROR(Env::Default()->WriteFileAtomically(p, c));
    absl::MutexLock lock(&mu_);
    durable_[p] = std::string(c);
    return absl::OkStatus();
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    RETURN_IF_ERROR(Env::Default()->Rename(from, to));
    absl::MutexLock lock(&mu_);
    renames_.emplace_back(from, to);
    return absl::OkStatus();
  }
  absl::Status RemoveFile(const std::string& p) override { return Env::Default()->RemoveFile(p); }
  absl::Status CreateDirs(const std::string& p) override { return Env::Default()->CreateDirs(p); }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& p) override {
    return Env::Default()->Glob(p);
  }

 private:
  absl::Status Sync(const std::string& path, WritableFile& file) {
    {
      absl::MutexLock lock(&mu_);
      ++syncs_started_;
      mu_.Await(absl::Condition(
          +[](bool* hold) { return !*hold; }, &hold_syncs_));
    }
    // Read before the fdatasync: what was written before the sync began is what it covers.
    ASSIGN_OR_RETURN(std::string contents, ReadFileToString(*Env::Default(), path));
    if (sync_delay_ > absl::ZeroDuration()) absl::SleepFor(sync_delay_);
    absl::MutexLock lock(&mu_);
    if (fail_sync_) return ErrnoToStatus(EIO, "syncing", path);
    RETURN_IF_ERROR(file.Sync());
    ++syncs_;
    durable_[path] = std::move(contents);
    return absl::OkStatus();
  }

  class File : public WritableFile {
   public:
    File(CrashEnv* env, std::string path, std::unique_ptr<WritableFile> file)
        : env_(env), path_(std::move(path)), file_(std::move(file)) {}
    absl::Status Append(absl::string_view data) override { return file_->Append(data); }
    absl::Status Sync() override { return env_->Sync(path_, *file_); }
    absl::Status Close() override { return file_->Close(); }
    const std::string& name() const override { return file_->name(); }

   private:
    CrashEnv* const env_;
    const std::string path_;
    std::unique_ptr<WritableFile> file_;
  };

  const absl::Duration sync_delay_;
  mutable absl::Mutex mu_;
  bool fail_sync_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_syncs_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t syncs_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> durable_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> renames_ ABSL_GUARDED_BY(mu_);  // not durable
};

// A DispatcherImpl on a FakeClock, with a temporary directory for data and index cache.
class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leases_.clear();
    clock_ = std::make_unique<FakeClock>();
    Recreate(DispatcherOptions{});
  }

  void Recreate(DispatcherOptions options) {
    options.clock = clock_.get();
    options.index_cache_dir = dir_.Join("index");
    auto impl = DispatcherImpl::Create(options);
    ASSERT_TRUE(impl.ok()) << impl.status();
    impl_ = std::move(*impl);
  }

  // A valid spec over `path_pattern` (default: data/*.tfrecord in the temp dir).
  v1::JobSpec Spec(const std::string& name, uint32_t batch_size, uint32_t num_consumers,
                   uint64_t num_epochs = 0) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.add_files(dir_.Join("data/*.tfrecord"));
    spec.set_features(kTestFeatures);
    spec.set_batch_size(batch_size);
    spec.set_num_consumers(num_consumers);
    spec.set_num_epochs(num_epochs);
    spec.set_seed(7);
    return spec;
  }

  // Writes data/part-<k>.tfrecord files holding `sizes[k]` records each.
  void WriteData(const std::vector<int64_t>& sizes) {
    std::filesystem::create_directories(dir_.Join("data"));
    int64_t next = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      WriteTestFile(dir_.Join(absl::StrCat("data/part-", k, ".tfrecord")), next, sizes[k]);
      next += sizes[k];
    }
  }

  absl::StatusOr<v1::JobInfo> Create(const v1::JobSpec& spec, bool exist_ok = false) {
    v1::CreateJobRequest request;
    *request.mutable_spec() = spec;
    request.set_exist_ok(exist_ok);
    absl::StatusOr<v1::CreateJobResponse> response = impl_->CreateJob(request);
    if (!response.ok()) return response.status();
    return response->job();
  }

  absl::StatusOr<v1::ProducerHeartbeatResponse> Producer(uint64_t id, const std::string& address,
                                                         uint32_t slots,
                                                         std::vector<uint64_t> finished = {}) {
    v1::ProducerHeartbeatRequest request;
    request.set_producer_id(id);
    request.set_data_address(address);
    request.set_free_task_slots(slots);
    for (uint64_t t : finished) request.add_finished_tasks(t);
    return impl_->ProducerHeartbeat(request);
  }

  absl::StatusOr<v1::ConsumerHeartbeatResponse> Consumer(uint64_t id, const std::string& job,
                                                         uint32_t rank, uint32_t world,
                                                         uint64_t epoch = 0, uint64_t step = 0) {
    v1::ConsumerHeartbeatRequest request;
    request.set_consumer_id(id);
    request.set_job(job);
    request.set_rank(rank);
    request.set_world(world);
    request.set_epoch(epoch);
    request.set_step(step);
    if (id != 0) request.set_lease(Lease(id));
    auto response = impl_->ConsumerHeartbeat(request);
    if (id == 0 && response.ok()) leases_[response->consumer_id()] = response->lease();
    return response;
  }

  // The lease the registration of consumer `id` through Consumer() returned ("" if none did).
  std::string Lease(uint64_t id) const {
    auto it = leases_.find(id);
    return it == leases_.end() ? "" : it->second;
  }

  absl::StatusOr<v1::LocateResponse> Locate(const std::string& job, uint64_t epoch, uint64_t first,
                                            uint64_t num) {
    v1::LocateRequest request;
    request.set_job(job);
    request.set_epoch(epoch);
    request.set_first_batch(first);
    request.set_num_batches(num);
    return impl_->Locate(request);
  }

  ScopedTempDir dir_;
  std::unique_ptr<FakeClock> clock_;
  std::unique_ptr<DispatcherImpl> impl_;
  // Consumer id -> the lease its registration returned (Consumer() sends it).
  std::map<uint64_t, std::string> leases_;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_DISPATCHER_TEST_UTIL_H_
