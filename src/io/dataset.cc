#include "croupier/dataset.h"

#include <algorithm>

#include "src/common/env.h"
#include "src/common/status_macros.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::vector<std::string>& files,
                                                       IndexCache& cache,
                                                       const IndexProgress& progress) {
  uint64_t total = 0;
  if (progress) {
    for (const auto& f : files) {
      ASSIGN_OR_RETURN(FileStat st, Env::Default()->Stat(f));
      total += st.size;
    }
  }
  std::vector<std::shared_ptr<const RecordIndex>> indexes;
  uint64_t done = 0;
  for (const auto& f : files) {
    IndexProgress file_progress = nullptr;
    if (progress) file_progress = [&](uint64_t d, uint64_t) { progress(done + d, total); };
    ASSIGN_OR_RETURN(auto index, cache.Get(f, file_progress));
    done += index->file_size;
    indexes.push_back(std::move(index));
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
