// TfrecordBatchMaker's reads of remote files (an object store): a batch's records in one
// ReadRanges call per file through the RecordFetcher, the first groups of a task fetched as its
// producer is given it, and the next batches of a task fetched ahead in groups as it is made.
// The rest of the maker is in tfrecord_maker.cc.
#include <algorithm>
#include <utility>
#include <vector>

#include "croupier/tfrecord.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/io/tfrecord_format.h"
#include "src/producer/record_cache.h"
#include "src/producer/tfrecord_maker.h"

namespace croupier {

uint64_t TfrecordBatchMaker::FetchGroupBatches(const Dataset& dataset, const v1::JobInfo& job,
                                               uint64_t batch_size, uint64_t ahead_bytes) {
  uint64_t bytes = 0;
  for (size_t f = 0; f < dataset.num_files(); ++f) {
    bytes += dataset.loaded(f) ? dataset.index(f).file_size
                               : job.files(static_cast<int>(f)).size_bytes();
  }
  const uint64_t records = std::max<uint64_t>(dataset.num_records(), 1);
  const uint64_t batch_bytes = std::max<uint64_t>(bytes / records * batch_size, 1);
  return std::clamp(kFetchGroupBytes / batch_bytes, kFetchAheadBatches,
                    std::max<uint64_t>(ahead_bytes / 2 / batch_bytes, kFetchAheadBatches));
}

bool TfrecordBatchMaker::AnyRemote(absl::Span<const Dataset::Location> locs) const {
  // Every file is opened (not only up to the first remote one), so that ToFetch, which reads
  // the flags, names the same records for a batch whenever it is asked.
  bool any = false;
  for (const Dataset::Location& loc : locs) {
    int remote = files_[loc.file].remote.load(std::memory_order_acquire);
    if (remote < 0) {
      if (!OpenFile(loc.file).ok()) continue;  // the read reports it
      remote = files_[loc.file].remote.load(std::memory_order_acquire);
    }
    any = any || remote == 1;
  }
  return any;
}

std::vector<Dataset::Location> TfrecordBatchMaker::ToFetch(absl::Span<const Dataset::Location> locs,
                                                           std::vector<size_t>* positions) const {
  std::vector<Dataset::Location> out;
  for (size_t i = 0; i < locs.size(); ++i) {
    const Dataset::Location& loc = locs[i];
    const File& f = files_[loc.file];
    if (f.remote.load(std::memory_order_acquire) != 1) continue;
    if (record_cache_ != nullptr && record_cache_->Contains(f.cache_id, loc.record)) continue;
    out.push_back(loc);
    if (positions != nullptr) positions->push_back(i);
  }
  return out;
}

void TfrecordBatchMaker::FetchAhead(uint64_t epoch, uint64_t batch) const {
  // The task's batches are fetched ahead in groups of fetch_group_ batches, a group at a time: the
  // rest of the group of `batch`, and the next group whole. So a group is asked for once, as
  // its predecessor starts, and fetched in one go (its records' neighbours merged), while
  // between fetch_group_ - 1 and 2 fetch_group_ - 1 batches are ahead of the maker.
  // A batch the fetcher does not know yet (the first made of a task) is fetched with the
  // batches after it, rather than alone, when its records have neighbours among theirs (shuffle
  // none or blocks): alone, they would cut holes in those batches' ranges. Under a global
  // shuffle records have no neighbours to merge with, and it is fetched alone, at once: the
  // first batch does not wait for a whole group. These are the next batches made, so they are
  // fetched before the groups of the tasks held and not started (Priority::kNext).
  const JobConfig& c = config();
  const uint64_t start = c.TaskStart(epoch, batch);
  const uint64_t group_end = start + ((batch - start) / fetch_group_ + 1) * fetch_group_;
  const uint64_t end = std::min(c.TaskEnd(epoch, start), group_end + fetch_group_);
  const bool known = c.plan.shuffle == ShuffleMode::kGlobal || fetcher_->Known({epoch, batch});
  // Mostly there is nothing new to ask for: the plan is looked at at a group's start, or when
  // this batch or the next is unknown to the fetcher.
  if (known && (batch - start) % fetch_group_ != 0 && fetcher_->Known({epoch, batch + 1})) {
    return;
  }
  const uint64_t first = known ? batch + 1 : batch;
  if (first >= end) return;
  fetcher_->Ahead(RemoteBatches(epoch, first, end), RecordFetcher::Priority::kNext);
}

RecordFetcher::Batches TfrecordBatchMaker::RemoteBatches(uint64_t epoch, uint64_t first,
                                                         uint64_t end) const {
  RecordFetcher::Batches batches;
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(config().plan, epoch);
  if (!plan.ok()) return batches;  // Make reports it
  const size_t size = config().plan.batch_size;
  std::vector<uint64_t> ids(size);
  std::vector<Dataset::Location> locs((end - first) * size);
  for (uint64_t g = first; g < end; ++g) {
    plan->BatchRecords(g, absl::MakeSpan(ids));
    for (size_t i = 0; i < size; ++i) locs[(g - first) * size + i] = dataset_->Locate(ids[i]);
  }
  // The objects' indexes of all the batches at once (at most 16 requests at a time), rather
  // than one batch's after another's.
  const bool loaded = LoadFiles(locs).ok();
  for (uint64_t g = first; g < end; ++g) {
    const absl::Span<const Dataset::Location> batch =
        absl::MakeConstSpan(locs).subspan((g - first) * size, size);
    // A file that cannot be loaded: Make reports it.
    if ((!loaded && !LoadFiles(batch).ok()) || !AnyRemote(batch)) continue;
    batches.emplace_back(RecordFetcher::Key{epoch, g}, ToFetch(batch, nullptr));
  }
  return batches;
}

void TfrecordBatchMaker::WillMake(const v1::Task& task) const {
  // The task's first two groups, as FetchAhead asks for them at its first batch: that call then
  // finds them known, and asks for the third group at the second group's start. Under a global
  // shuffle, whose records have no neighbours to merge with, the first batch is a fetch of its
  // own, named first, so that it does not wait for the group's requests. Worked out on a fetch
  // thread: locating the records is CPU only, but the files may need opening.
  const uint64_t epoch = task.epoch();
  const uint64_t first = task.first_batch();
  const uint64_t end = first + task.num_batches();
  const uint64_t ahead_end = std::min(end, first + 2 * fetch_group_);
  uint64_t from = first;
  if (config().plan.shuffle == ShuffleMode::kGlobal) {
    fetcher_->AheadLater({epoch, first, end},
                         [this, epoch, first] { return RemoteBatches(epoch, first, first + 1); });
    from = first + 1;
  }
  if (from >= ahead_end) return;
  fetcher_->AheadLater({epoch, first, end}, [this, epoch, from, ahead_end] {
    return RemoteBatches(epoch, from, ahead_end);
  });
}

void TfrecordBatchMaker::WontMake(const v1::Task& task) const {
  fetcher_->Forget({task.epoch(), task.first_batch(), task.first_batch() + task.num_batches()});
}

absl::Status TfrecordBatchMaker::AddFetched(const Dataset::Location& loc,
                                            const FetchedRecords& fetched, size_t j,
                                            Scratch& scratch) const {
  const RecordIndex& index = dataset_->index(loc.file);
  const uint64_t framed = index.data_length(loc.record) + kRecordOverheadBytes;
  const uint64_t got = fetched.got[j];
  const IndexedRecordFile* file = *OpenFile(loc.file);  // opened to fetch it
  if (got < framed) {
    return RecordError(loc.file, loc.record,
                       RecordReadError(index, loc.record, file->file(), got, absl::OkStatus()));
  }
  auto data = CheckRecord(fetched.record(j), index.path, index.offsets[loc.record]);
  if (!data.ok()) {
    return RecordError(loc.file, loc.record,
                       RecordReadError(index, loc.record, file->file(), got, data.status()));
  }
  if (record_cache_ != nullptr) record_cache_->Insert(files_[loc.file].cache_id, loc.record, *data);
  return AddData(loc.file, loc.record, *data, scratch);
}

absl::Status TfrecordBatchMaker::AddFetchedRecords(uint64_t epoch, uint64_t batch,
                                                   absl::Span<const uint64_t> ids,
                                                   Scratch& scratch) const {
  std::vector<size_t> positions;
  const std::vector<Dataset::Location> wanted = ToFetch(scratch.locs, &positions);
  // The next batches are asked for first (with this one, if it was not asked for yet), so that
  // their fetch overlaps this one's or includes it.
  FetchAhead(epoch, batch);
  std::shared_ptr<const FetchedRecords> fetched;
  if (!wanted.empty()) {
    absl::StatusOr<std::shared_ptr<const FetchedRecords>> got =
        fetcher_->Take({epoch, batch}, wanted);
    if (!got.ok()) {
      const Dataset::Location& first = wanted.front();
      return RecordError(first.file, first.record, got.status());
    }
    fetched = *std::move(got);
  }
  size_t j = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Dataset::Location& loc = scratch.locs[i];
    if (j < positions.size() && positions[j] == i) {
      RETURN_IF_ERROR(AddFetched(loc, *fetched, j, scratch));
      ++j;
      continue;
    }
    if (record_cache_ != nullptr) {
      if (auto hit = record_cache_->Lookup(files_[loc.file].cache_id, loc.record, scratch.buffer)) {
        RETURN_IF_ERROR(AddData(loc.file, loc.record, *hit, scratch));
        continue;
      }
    }
    RETURN_IF_ERROR(ReadRecord(loc, scratch));  // a local file's record, or a cache miss
  }
  return absl::OkStatus();
}

}  // namespace croupier
