#include "croupier/dataset.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"

namespace croupier {

// A distinct path's index. `state` goes kNotStarted -> kLoading (claimed under mu_) -> kDone
// (with `index` or `status` set before, released to the readers that acquire it).
struct Dataset::Slot {
  enum State : int { kNotStarted, kLoading, kDone };
  std::string path;
  std::optional<FileStat> known;    // an object's, taken without asking the store
  std::optional<uint64_t> records;  // the count it must hold (OpenKnown)
  std::atomic<int> state{kNotStarted};
  absl::Status status;
  std::shared_ptr<const RecordIndex> index;
};

Dataset::Dataset(const std::vector<std::string>& files, const std::vector<FileStat>& known,
                 const std::vector<uint64_t>* num_records, IndexCache& cache)
    : num_files_(files.size()), cache_(&cache), slot_of_(files.size()) {
  absl::flat_hash_map<std::string, size_t> slot_of_path;
  for (size_t i = 0; i < files.size(); ++i) {
    slot_of_[i] = slot_of_path.try_emplace(files[i], slot_of_path.size()).first->second;
  }
  num_slots_ = slot_of_path.size();
  slots_ = std::make_unique<Slot[]>(num_slots_);
  for (size_t i = 0; i < files.size(); ++i) {
    Slot& slot = slots_[slot_of_[i]];
    slot.path = files[i];
    if (!known.empty() && !known[i].etag.empty()) slot.known = known[i];
    if (num_records != nullptr) slot.records = (*num_records)[i];
  }
}

Dataset::~Dataset() = default;

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
    return absl::InvalidArgumentError(
        absl::StrCat("Dataset::Open: ", known.size(), " known files for ", files.size(), " paths"));
  }
  std::unique_ptr<Dataset> dataset(new Dataset(files, known, nullptr, cache));
  const size_t slots = dataset->num_slots_;
  // The bytes of each file (a slot's) reported, for the progress of all of them.
  std::vector<uint64_t> done(slots, 0);
  uint64_t total = 0, done_sum = 0;
  absl::Mutex progress_mu;
  if (progress) {
    for (size_t s = 0; s < slots; ++s) {
      const Slot& slot = dataset->slots_[s];
      if (slot.known.has_value()) {
        total += slot.known->size;
      } else {
        ASSIGN_OR_RETURN(FileStat st, Env::Default()->Stat(slot.path));
        total += st.size;
      }
    }
  }
  auto progress_of = [&](size_t s) -> IndexProgress {
    if (!progress) return nullptr;
    return [&, s](uint64_t d, uint64_t) {
      absl::MutexLock lock(&progress_mu);
      done_sum = done_sum - done[s] + d;
      done[s] = d;
      progress(done_sum, total);
    };
  };
  std::vector<size_t> all(files.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  RETURN_IF_ERROR(dataset->LoadFiles(all, progress_of));
  dataset->first_ids_.reserve(files.size() + 1);
  uint64_t next = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    dataset->first_ids_.push_back(next);
    next += dataset->index(i).num_records();
  }
  dataset->first_ids_.push_back(next);
  return dataset;
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::OpenKnown(
    const std::vector<std::string>& files, const std::vector<FileStat>& known,
    const std::vector<uint64_t>& num_records, IndexCache& cache) {
  if (known.size() != files.size() || num_records.size() != files.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Dataset::OpenKnown: ", known.size(),
                                                   " known files and ", num_records.size(),
                                                   " record counts for ", files.size(), " paths"));
  }
  std::unique_ptr<Dataset> dataset(new Dataset(files, known, &num_records, cache));
  dataset->first_ids_.reserve(files.size() + 1);
  uint64_t next = 0;
  std::vector<size_t> now;  // the files that are not objects, indexed now
  for (size_t i = 0; i < files.size(); ++i) {
    dataset->first_ids_.push_back(next);
    next += num_records[i];
    if (!dataset->slots_[dataset->slot_of_[i]].known.has_value()) now.push_back(i);
  }
  dataset->first_ids_.push_back(next);
  RETURN_IF_ERROR(dataset->Load(now));
  return dataset;
}

absl::Status Dataset::Load(absl::Span<const size_t> files) const {
  bool all_done = true;
  for (size_t f : files) {
    if (slots_[slot_of_[f]].state.load(std::memory_order_acquire) != Slot::kDone) {
      all_done = false;
      break;
    }
  }
  if (all_done) {
    for (size_t f : files) {
      if (const Slot& slot = slots_[slot_of_[f]]; !slot.status.ok()) return slot.status;
    }
    return absl::OkStatus();
  }
  return LoadFiles(files, [](size_t) -> IndexProgress { return nullptr; });
}

bool Dataset::Claim(size_t file) const {
  Slot& slot = slots_[slot_of_[file]];
  if (slot.state.load(std::memory_order_acquire) != Slot::kNotStarted) return false;
  absl::MutexLock lock(&mu_);
  if (slot.state.load(std::memory_order_relaxed) != Slot::kNotStarted) return false;
  slot.state.store(Slot::kLoading, std::memory_order_relaxed);
  return true;
}

void Dataset::LoadOne(size_t file, const IndexProgress& progress) const {
  Slot& slot = slots_[slot_of_[file]];
  absl::StatusOr<std::shared_ptr<const RecordIndex>> got =
      cache_->Get(slot.path, progress, nullptr, slot.known ? &*slot.known : nullptr);
  if (got.ok() && slot.records.has_value() && (*got)->num_records() != *slot.records) {
    got = absl::FailedPreconditionError(
        absl::StrCat(slot.path, " holds ", (*got)->num_records(), " records but held ",
                     *slot.records, " when the job was created: the file changed since"));
  }
  absl::MutexLock lock(&mu_);
  if (got.ok()) {
    slot.index = *std::move(got);
  } else {
    slot.status = got.status();
  }
  slot.state.store(Slot::kDone, std::memory_order_release);
  loaded_.SignalAll();
}

absl::Status Dataset::LoadFiles(absl::Span<const size_t> files,
                                const std::function<IndexProgress(size_t)>& progress_of) const {
  // Files are claimed in order, and this call stops claiming at its first failure: the error
  // returned is the first in order of the files loaded (a file skipped by a thread that saw the
  // failure before claiming it is left for a later call).
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto load = [&] {
    for (size_t k = next++; k < files.size() && !failed.load(); k = next++) {
      if (!Claim(files[k])) continue;
      const Slot& slot = slots_[slot_of_[files[k]]];
      const IndexProgress progress = progress_of(slot_of_[files[k]]);
      LoadOne(files[k], progress);
      if (!slot.status.ok()) {
        failed.store(true);
      } else if (progress) {
        progress(slot.index->file_size, slot.index->file_size);  // a cached index scans nothing
      }
    }
  };
  size_t to_load = 0;
  for (size_t f : files) {
    if (slots_[slot_of_[f]].state.load(std::memory_order_acquire) == Slot::kNotStarted) ++to_load;
  }
  // This thread loads too: one file needs no other.
  const size_t helpers = std::min(kMaxFilesIndexedAtOnce, to_load);
  std::vector<std::thread> threads;
  for (size_t t = 1; t < helpers; ++t) threads.emplace_back(load);
  load();
  for (std::thread& t : threads) t.join();

  absl::MutexLock lock(&mu_);
  for (size_t f : files) {
    const Slot& slot = slots_[slot_of_[f]];
    // Not started: skipped after a failure, which this loop meets further on.
    if (slot.state.load(std::memory_order_relaxed) == Slot::kNotStarted) continue;
    while (slot.state.load(std::memory_order_relaxed) != Slot::kDone) loaded_.Wait(&mu_);
    if (!slot.status.ok()) return slot.status;
  }
  // Only a failure leaves a file not started, and the loop returned its error.
  return absl::OkStatus();
}

bool Dataset::loaded(size_t file) const {
  const Slot& slot = slots_[slot_of_[file]];
  return slot.state.load(std::memory_order_acquire) == Slot::kDone && slot.status.ok();
}

const std::string& Dataset::path(size_t file) const { return slots_[slot_of_[file]].path; }

const RecordIndex& Dataset::index(size_t file) const { return *slots_[slot_of_[file]].index; }

std::shared_ptr<const RecordIndex> Dataset::shared_index(size_t file) const {
  return slots_[slot_of_[file]].index;
}

Dataset::Location Dataset::Locate(uint64_t id) const {
  // The last file whose first id is <= id; empty files share their first id with the next file,
  // and upper_bound skips past them.
  auto it = std::upper_bound(first_ids_.begin(), first_ids_.end() - 1, id);
  size_t file = static_cast<size_t>(it - first_ids_.begin()) - 1;
  return {file, id - first_ids_[file]};
}

}  // namespace croupier
