// A dataset: an ordered list of indexed TFRecord files, whose records are numbered globally in
// that order. Global record id r is record (r - first_id(f)) of file f. Plans deal global ids;
// this maps them back to files.
#ifndef CROUPIER_INCLUDE_CROUPIER_DATASET_H_
#define CROUPIER_INCLUDE_CROUPIER_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "croupier/record_index.h"

namespace croupier {

// Thread-safe. A dataset opened by Open has every index loaded and is immutable; one opened by
// OpenKnown loads an object's index when a batch first needs it (Load), once.
class Dataset {
 public:
  struct Location {
    size_t file = 0;      // position in files()
    uint64_t record = 0;  // record number inside that file
  };

  // Indexes `files` (in the given order) through `cache`, up to kMaxFilesIndexedAtOnce of them at
  // once (an object store answers each in tens of milliseconds, and a job may list thousands).
  // Errors as IndexCache::Get, the first failing file's in `files` order; a file with no records
  // is allowed and holds no ids. `progress` gets (bytes done, bytes in all files), from one
  // thread at a time.
  static constexpr size_t kMaxFilesIndexedAtOnce = 16;
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::vector<std::string>& files,
                                                       IndexCache& cache,
                                                       const IndexProgress& progress = nullptr);
  // The same for files the caller knows already, known[i] for files[i] (a producer, from its
  // job's FileInfo; the dispatcher, from the store's listing of a glob): a file whose known ETag
  // is set (an object in a store) is taken as it was then, without asking the store
  // (IndexCache::Get's `known`); the others are asked (a Stat). `known` is empty or as long as
  // `files`.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::vector<std::string>& files,
                                                       const std::vector<FileStat>& known,
                                                       IndexCache& cache,
                                                       const IndexProgress& progress = nullptr);
  // A dataset whose files' record counts are known as well (a producer's, from its job's
  // FileInfo: num_records[i] records in files[i]; both as long as `files`): the files whose known
  // ETag is set (objects) are not read until Load asks for them, so that a producer asks the
  // store for the indexes of the objects its batches need, when they need them; the others are
  // indexed now, as Open does. Every index loaded must hold its known count: FAILED_PRECONDITION
  // naming the file otherwise ("... holds N records but held M when the job was created: the
  // file changed since"). `cache` must outlive the dataset.
  static absl::StatusOr<std::unique_ptr<Dataset>> OpenKnown(
      const std::vector<std::string>& files, const std::vector<FileStat>& known,
      const std::vector<uint64_t>& num_records, IndexCache& cache);

  // Loads the indexes of `files` (positions in files(); repeats allowed) that are not loaded
  // yet, up to kMaxFilesIndexedAtOnce at once on this thread and helpers, and waits for those
  // that another call is loading. OK once all are loaded; otherwise the error of the first file
  // in the given order that failed (the call stops loading at its first failure), which every
  // later Load of that file returns too. Once every file is loaded a call costs an atomic load
  // per file.
  absl::Status Load(absl::Span<const size_t> files) const;
  // Whether Load of `file` succeeded already.
  bool loaded(size_t file) const;

  uint64_t num_records() const { return first_ids_.back(); }
  size_t num_files() const { return num_files_; }
  const std::string& path(size_t file) const;
  // Preconditions for these two: Load of `file` returned OK on this thread, or on one this
  // thread synchronized with since (always true of a dataset opened by Open).
  const RecordIndex& index(size_t file) const;
  std::shared_ptr<const RecordIndex> shared_index(size_t file) const;
  uint64_t first_id(size_t file) const { return first_ids_[file]; }

  // Where global record `id` lives. Precondition: id < num_records().
  Location Locate(uint64_t id) const;

  ~Dataset();

 private:
  struct Slot;
  Dataset(const std::vector<std::string>& files, const std::vector<FileStat>& known,
          const std::vector<uint64_t>* num_records, IndexCache& cache);
  // Loads `files` as Load does, each file's progress (if any) reported through `progress_of`.
  absl::Status LoadFiles(absl::Span<const size_t> files,
                         const std::function<IndexProgress(size_t)>& progress_of) const;
  // Claims the slot of `file` for loading: false if it is loading or loaded already.
  bool Claim(size_t file) const;
  void LoadOne(size_t file, const IndexProgress& progress) const;

  size_t num_files_ = 0;
  IndexCache* const cache_;
  // One slot per distinct path: slot_of_[i] is files[i]'s (two loads of one path would race on
  // its cache file).
  std::vector<size_t> slot_of_;
  size_t num_slots_ = 0;
  std::unique_ptr<Slot[]> slots_;
  std::vector<uint64_t> first_ids_;  // size num_files() + 1; the last is num_records()
  mutable absl::Mutex mu_;           // held to claim a slot or wait for its load
  mutable absl::CondVar loaded_;     // signalled as each load ends
};

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_DATASET_H_
