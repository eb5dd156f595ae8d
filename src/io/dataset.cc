#include "croupier/dataset.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::vector<std::string>& files,
                                                       IndexCache& cache,
                                                       const IndexProgress& progress) {
  return Open(files, {}, cache, progress);
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::vector<std::string>& files,
                                                       const std::vector<FileStat>& known,
                                                       IndexCache& cache,
                                                       const IndexProgress& progress) {
  if (!known.empty() && known.size() != files.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Dataset::Open: ", known.size(),
                                                   " known files for ", files.size(), " paths"));
  }
  auto known_of = [&](size_t i) -> const FileStat* {
    return !known.empty() && !known[i].etag.empty() ? &known[i] : nullptr;
  };
  // Each distinct path is indexed once, by one thread: two writers of one cache file would race.
  absl::flat_hash_map<std::string, size_t> first_of;
  std::vector<size_t> distinct;
  for (size_t i = 0; i < files.size(); ++i) {
    if (first_of.try_emplace(files[i], i).second) distinct.push_back(i);
  }
  std::vector<uint64_t> sizes(files.size(), 0);
  uint64_t total = 0;
  if (progress) {
    for (size_t i : distinct) {
      if (const FileStat* k = known_of(i); k != nullptr) {
        sizes[i] = k->size;
      } else {
        ASSIGN_OR_RETURN(FileStat st, Env::Default()->Stat(files[i]));
        sizes[i] = st.size;
      }
      total += sizes[i];
    }
  }
  std::vector<absl::StatusOr<std::shared_ptr<const RecordIndex>>> got(
      files.size(), absl::InternalError("not indexed"));
  std::vector<uint64_t> done(files.size(), 0);  // bytes of each file reported
  uint64_t done_sum = 0;                            // and of all of them
  absl::Mutex progress_mu;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto index_files = [&] {
    // Files are claimed in order, so every file before one that fails has been claimed and is
    // finished when the threads are: the error returned is the first in order, as one thread's.
    for (size_t k = next++; k < distinct.size() && !failed.load(); k = next++) {
      const size_t i = distinct[k];
      auto report = [&, i](uint64_t d, uint64_t) {
        absl::MutexLock lock(&progress_mu);
        done_sum = done_sum - done[i] + d;
        done[i] = d;
        progress(done_sum, total);
      };
      got[i] =
          cache.Get(files[i], progress ? IndexProgress(report) : nullptr, nullptr, known_of(i));
      if (!got[i].ok()) failed.store(true);
      if (got[i].ok() && progress) report(sizes[i], sizes[i]);  // a cached index scans nothing
    }
  };
  // This thread indexes too: one file needs no other.
  const size_t at_once = std::min(kMaxFilesIndexedAtOnce, distinct.size());
  const size_t helpers = at_once > 0 ? at_once - 1 : 0;
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  for (size_t t = 0; t < helpers; ++t) threads.emplace_back(index_files);
  index_files();
  for (std::thread& t : threads) t.join();

  std::vector<std::shared_ptr<const RecordIndex>> indexes;
  indexes.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& index = got[first_of.at(files[i])];
    if (!index.ok()) return index.status();
    indexes.push_back(*index);
  }
  return std::unique_ptr<Dataset>(new Dataset(std::move(indexes)));
}

Dataset::Dataset(std::vector<std::shared_ptr<const RecordIndex>> indexes)
    : indexes_(std::move(indexes)) {
  first_ids_.reserve(indexes_.size() + 1);
  uint64_t next = 0;
  for (const auto& index : indexes_) {
    first_ids_.push_back(next);
    next += index->num_records();
  }
  first_ids_.push_back(next);
}

Dataset::Location Dataset::Locate(uint64_t id) const {
  // The last file whose first id is <= id; empty files share their first id with the next file,
  // and upper_bound skips past them.
  auto it = std::upper_bound(first_ids_.begin(), first_ids_.end() - 1, id);
  size_t file = static_cast<size_t>(it - first_ids_.begin()) - 1;
  return {file, id - first_ids_[file]};
}

}  // namespace croupier
