// Makes any batch of a job's epoch plan from the job's TFRecord files: the producer's input
// pipeline for the native source (a BatchMaker, batch_maker.h).
#ifndef CROUPIER_SRC_PRODUCER_TFRECORD_MAKER_H_
#define CROUPIER_SRC_PRODUCER_TFRECORD_MAKER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "croupier/batch.h"
#include "croupier/dataset.h"
#include "croupier/example.h"
#include "croupier/plan.h"
#include "croupier/record_index.h"
#include "proto/croupier.pb.h"
#include "src/io/record_fetch.h"
#include "src/producer/batch_maker.h"
#include "src/producer/memfd_buffers.h"

namespace croupier {

class Env;
class RandomAccessFile;
class RecordCache;

// Makes the batches of one TFRecord job: the records of each batch (BatchMaker::Make), read from
// the files (or the RecordCache) and decoded in order by a BatchBuilder. The bytes are the same
// whether or not the records came from a cache.
//
// Each file is opened on first use and stays open until destruction (one descriptor per file, and
// a second one once consecutive records of the file are read together: see AddRun).
//
// Records in remote files (an object store: RandomAccessFile::remote()) are read per batch, with
// one ReadRanges call per file (merged into few requests by the store's Env), and fetched ahead of
// use by the RecordFetcher, a group of batches at a time (about kFetchGroupBytes of records, at
// least kFetchAheadBatches batches):
// - a task's first two groups as soon as its producer is given it (WillMake), while the tasks
//   before it are made, so that its first batch need not wait for its records;
// - the next group of a task as its batches are made (FetchAhead);
// - what was fetched for a task taken away (WontMake) is forgotten: its queued fetches dropped,
//   its bytes freed.
// The bytes fetched ahead and not yet made into batches are at most the FetchBudget's capacity
// (one budget for every job of a producer: CROUPIER_S3_PREFETCH_BYTES, default kFetchAheadBytes;
// what does not fit is fetched when its batch is made); at most kFetchThreads fetches run at once
// per job, their requests within the store client's own bound (CROUPIER_S3_MAX_IN_FLIGHT).
//
// Batches of 64 KiB and more are laid out in recycled memfds (MemfdBufferPool: a same-host consumer
// maps them without a copy): at most kFreeBatchBytes of those whose batches are gone are kept for
// the next ones.
//
// Thread-safe: Make may run on many threads at once.
class TfrecordBatchMaker final : public BatchMaker {
 public:
  static constexpr size_t kFreeBatchBytes = size_t{16} << 20;
  static constexpr size_t kMinPooledBatchBytes = size_t{64} << 10;
  static constexpr uint64_t kFetchAheadBatches = 8;
  static constexpr uint64_t kFetchGroupBytes = uint64_t{8} << 20;
  static constexpr uint64_t kFetchAheadBytes = uint64_t{64} << 20;
  static constexpr int kFetchThreads = 4;

  // Opens the job's files (JobInfo.files: expanded paths, in global record order) as a Dataset
  // through `cache` (Dataset::OpenKnown), and checks that they still hold the record counts the
  // job was created with. An object's index (a file whose FileInfo has an ETag) is loaded when
  // a batch first needs it, so that a producer's first batch waits for its own objects' indexes
  // only: its errors are that batch's. Errors: FAILED_PRECONDITION naming the file whose record
  // count changed (or a plan that disagrees with JobInfo.batches_per_epoch); INVALID_ARGUMENT
  // for a bad feature or plan spec; errors of IndexCache::Get (NOT_FOUND for a missing file,
  // DATA_LOSS for a corrupt one). `cache` must outlive the maker. A task's objects' indexes are
  // loaded together (16 at a time) as its producer is given it (WillMake), with its reads ahead;
  // an object no batch or task of the producer's needs is never asked for its index. `record_cache` may be null;
  // otherwise it must outlive the maker. The records are read
  // through `env` (nullptr: Env::Default()), which must outlive the maker. The bytes fetched
  // ahead are taken from `budget` (nullptr: one of the maker's own, of kFetchAheadBytes).
  static absl::StatusOr<std::unique_ptr<TfrecordBatchMaker>> Create(
      const v1::JobInfo& job, IndexCache& cache, RecordCache* record_cache = nullptr,
      Env* env = nullptr, std::shared_ptr<FetchBudget> budget = nullptr);
  ~TfrecordBatchMaker() override;

  // Fetching ahead (see above): names the task's first groups to the fetcher's threads, which
  // work out their records (opening files, a request each for an object) and fetch them.
  void WillMake(const v1::Task& task) const override;
  // Forgets what was fetched or queued for the task's batches.
  void WontMake(const v1::Task& task) const override;

  const Dataset& dataset() const { return *dataset_; }
  // What the read-ahead of remote records did.
  RecordFetcher::Stats fetch_stats() const { return fetcher_->stats(); }

 private:
  // One file of the dataset, opened on first use: an IndexedRecordFile for single records, and a
  // second descriptor for runs of consecutive records read together.
  struct File {
    absl::once_flag once;
    absl::StatusOr<std::unique_ptr<IndexedRecordFile>> reader;
    absl::once_flag run_once;
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> run_reader;
    uint32_t cache_id = 0;  // the file's id in the record cache
    // Whether `reader` is remote: -1 until it is open.
    std::atomic<int> remote{-1};
  };
  // What one Make call needs besides the plan, pooled so that buffers keep their capacity.
  struct Scratch {
    std::unique_ptr<BatchBuilder> builder;
    std::vector<Dataset::Location> locs;  // of the batch's ids, in order
    std::string buffer;                   // a record read from a file or the cache
    std::string run;                      // consecutive records read together
  };

  TfrecordBatchMaker(v1::JobInfo job, JobConfig config, std::unique_ptr<Dataset> dataset,
                     std::vector<FeatureSpec> features, RecordCache* record_cache, Env* env,
                     std::shared_ptr<FetchBudget> budget);
  // Errors name the record's file, number and byte offset, and for a decoding error the
  // feature, e.g. "record 7 of /data/a.tfrecord (byte 1234): feature 'label': expected int64,
  // found float_list". Codes: DATA_LOSS for corrupt or truncated records, INVALID_ARGUMENT for
  // a record that does not match the feature specs, and I/O errors of reading the files.
  absl::StatusOr<Batch> MakeRecords(uint64_t epoch, uint64_t batch,
                                    absl::Span<const uint64_t> ids) const override;
  // Loads the indexes of the files of `locs` not loaded yet (objects'): Dataset::Load's error,
  // prefixed with the job's name.
  absl::Status LoadFiles(absl::Span<const Dataset::Location> locs) const;
  // Precondition: the file's index is loaded.
  absl::StatusOr<const IndexedRecordFile*> OpenFile(size_t file) const;
  // `status` prefixed with the record's place: "record 7 of /data/a.tfrecord (byte 1234): ".
  absl::Status RecordError(size_t file, uint64_t record, const absl::Status& status) const;
  // Decodes a record's data into the batch being built.
  absl::Status AddData(size_t file, uint64_t record, absl::string_view data,
                       Scratch& scratch) const;
  // Reads one record (into the record cache too, if any) and adds it.
  absl::Status ReadRecord(const Dataset::Location& loc, Scratch& scratch) const;
  // How many records ahead AddRecords asks for the next records' bytes (and twice that, their
  // index entries).
  static constexpr size_t kReadAhead = 4;
  // Reads the records `ids`, in order, into scratch.builder.
  absl::Status AddRecords(absl::Span<const uint64_t> ids, Scratch& scratch) const;
  // Records to read with one read.
  struct Run {
    size_t length = 1;
    // The record cache hit that ended the run, if any: the record after it (data in
    // scratch.buffer).
    std::optional<absl::string_view> next_hit;
  };
  // The first of `ids` (at `loc`, not cached) and those following it that are the next records
  // of the same file, fit one read, and are not in the record cache.
  Run FindRun(absl::Span<const uint64_t> ids, const Dataset::Location& loc, Scratch& scratch) const;
  // Reads records [loc.record, loc.record + count) of a file with one read and adds them.
  absl::Status AddRun(const Dataset::Location& loc, size_t count, Scratch& scratch) const;
  // The remote path (tfrecord_maker_fetch.cc).
  // fetch_group_ for a job's dataset, batch size and bytes that may be fetched ahead (the sizes
  // of objects not loaded yet from the job's FileInfo).
  static uint64_t FetchGroupBatches(const Dataset& dataset, const v1::JobInfo& job,
                                    uint64_t batch_size, uint64_t ahead_bytes);
  // Whether any of the records at `locs` is in a remote file (opening the files not yet open).
  bool AnyRemote(absl::Span<const Dataset::Location> locs) const;
  // Of the records at `locs`, those to fetch from remote files: not in the record cache. Their
  // positions in `locs` go to `positions` when given.
  std::vector<Dataset::Location> ToFetch(absl::Span<const Dataset::Location> locs,
                                         std::vector<size_t>* positions) const;
  // Asks the fetcher for the records of the next batches of the task holding `batch`.
  void FetchAhead(uint64_t epoch, uint64_t batch) const;
  // The records to fetch of batches [first, end) of `epoch` that are in remote files.
  RecordFetcher::Batches RemoteBatches(uint64_t epoch, uint64_t first, uint64_t end) const;
  // Reads the records `ids` of batch (epoch, batch), some of them in remote files, through the
  // fetcher, and adds them in order to scratch.builder.
  absl::Status AddFetchedRecords(uint64_t epoch, uint64_t batch, absl::Span<const uint64_t> ids,
                                 Scratch& scratch) const;
  // Checks record `loc` of `fetched` at position j and adds it.
  absl::Status AddFetched(const Dataset::Location& loc, const FetchedRecords& fetched, size_t j,
                          Scratch& scratch) const;
  std::unique_ptr<Scratch> GetScratch() const;
  void ReturnScratch(std::unique_ptr<Scratch> scratch) const;

  // Constant after construction.
  const std::unique_ptr<Dataset> dataset_;
  const std::vector<FeatureSpec> features_;
  RecordCache* const record_cache_;  // may be null
  Env* const env_;
  const std::unique_ptr<File[]> files_;
  // Batches fetched ahead together (FetchAhead): kFetchGroupBytes of the dataset's average
  // records, at least kFetchAheadBatches, and at most half of the budget's bytes.
  const uint64_t fetch_group_;
  mutable MemfdBufferPool batch_buffers_{kFreeBatchBytes, kMinPooledBatchBytes};  // thread-safe
  const std::unique_ptr<RecordFetcher> fetcher_;  // thread-safe

  mutable absl::Mutex pool_mu_;
  mutable std::vector<std::unique_ptr<Scratch>> pool_ ABSL_GUARDED_BY(pool_mu_);
};

}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_TFRECORD_MAKER_H_
