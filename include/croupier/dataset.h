// A dataset: an ordered list of indexed TFRecord files, whose records are numbered globally in
// that order. Global record id r is record (r - first_id(f)) of file f. Plans deal global ids;
// this maps them back to files.
#ifndef CROUPIER_INCLUDE_CROUPIER_DATASET_H_
#define CROUPIER_INCLUDE_CROUPIER_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "croupier/record_index.h"

namespace croupier {

// Immutable after Open, so thread-safe.
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

  uint64_t num_records() const { return first_ids_.back(); }
  size_t num_files() const { return indexes_.size(); }
  const RecordIndex& index(size_t file) const { return *indexes_[file]; }
  std::shared_ptr<const RecordIndex> shared_index(size_t file) const { return indexes_[file]; }
  uint64_t first_id(size_t file) const { return first_ids_[file]; }

  // Where global record `id` lives. Precondition: id < num_records().
  Location Locate(uint64_t id) const;

 private:
  explicit Dataset(std::vector<std::shared_ptr<const RecordIndex>> indexes);

  std::vector<std::shared_ptr<const RecordIndex>> indexes_;
  std::vector<uint64_t> first_ids_;  // size num_files() + 1; the last is num_records()
};

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_DATASET_H_
