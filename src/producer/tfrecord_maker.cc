#include "src/producer/tfrecord_maker.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "croupier/tfrecord.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/producer/record_cache.h"

namespace croupier {
namespace {

// Scratch sets kept for reuse: about one per thread that makes batches at once.
constexpr size_t kMaxPooledScratch = 64;
// Runs of consecutive records read with one read: at least this many records, at most this many
// bytes.
constexpr size_t kMinRun = 2;
constexpr uint64_t kMaxRunBytes = uint64_t{4} << 20;

absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// How many batches of `batch_size` records the maker fetches ahead together (fetch_group_).
uint64_t FetchGroupBatches(const Dataset& dataset, uint64_t batch_size) {
  uint64_t bytes = 0;
  for (size_t f = 0; f < dataset.num_files(); ++f) bytes += dataset.index(f).file_size;
  const uint64_t records = std::max<uint64_t>(dataset.num_records(), 1);
  const uint64_t batch_bytes = std::max<uint64_t>(bytes / records * batch_size, 1);
  return std::clamp(TfrecordBatchMaker::kFetchGroupBytes / batch_bytes,
                    TfrecordBatchMaker::kFetchAheadBatches,
                    std::max<uint64_t>(TfrecordBatchMaker::kFetchAheadBytes / 2 / batch_bytes,
                                       TfrecordBatchMaker::kFetchAheadBatches));
}

}  // namespace

struct TfrecordBatchMaker::Scratch {
  std::unique_ptr<BatchBuilder> builder;
  std::vector<Dataset::Location> locs;  // of ids
  std::string buffer;                   // a record read from a file or the cache
  std::string run;                      // consecutive records read together
};

absl::StatusOr<std::unique_ptr<TfrecordBatchMaker>> TfrecordBatchMaker::Create(
    const v1::JobInfo& job, IndexCache& cache, RecordCache* record_cache, Env* env) {
  const std::string& name = job.spec().name();
  const std::string prefix = absl::StrCat("job '", name, "': ");
  if (job.files().empty()) return absl::InvalidArgumentError(prefix + "the job has no files");
  auto features = ParseFeatureSpecs(job.spec().features());
  if (!features.ok()) return Prefixed(features.status(), prefix);
  if (absl::Status s = CheckExampleFeatureSpecs(*features); !s.ok()) return Prefixed(s, prefix);
  ASSIGN_OR_RETURN(JobConfig config, CheckedConfig(job));

  std::vector<std::string> paths;
  for (const v1::FileInfo& f : job.files()) paths.push_back(f.path());
  auto dataset = Dataset::Open(paths, cache);
  if (!dataset.ok()) return Prefixed(dataset.status(), prefix);
  for (int i = 0; i < job.files_size(); ++i) {
    const uint64_t now = (*dataset)->index(i).num_records();
    if (now != job.files(i).num_records()) {
      return absl::FailedPreconditionError(absl::StrCat(
          prefix, job.files(i).path(), " holds ", now, " records but held ",
          job.files(i).num_records(), " when the job was created: the file changed since"));
    }
  }
  if (job.num_records() != (*dataset)->num_records()) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "the job counts ", job.num_records(),
                                                      " records but its files hold ",
                                                      (*dataset)->num_records()));
  }

  return std::unique_ptr<TfrecordBatchMaker>(new TfrecordBatchMaker(
      job, std::move(config), *std::move(dataset), *std::move(features), record_cache, env));
}

TfrecordBatchMaker::TfrecordBatchMaker(v1::JobInfo job, JobConfig config,
                                       std::unique_ptr<Dataset> dataset,
                                       std::vector<FeatureSpec> features, RecordCache* record_cache,
                                       Env* env)
    : BatchMaker(std::move(job), std::move(config)),
      dataset_(std::move(dataset)),
      features_(std::move(features)),
      record_cache_(record_cache),
      env_(env != nullptr ? env : Env::Default()),
      files_(new File[dataset_->num_files()]),
      fetch_group_(FetchGroupBatches(*dataset_, this->config().plan.batch_size)),
      fetcher_(std::make_unique<RecordFetcher>(
          *dataset_,
          [this](size_t file) -> absl::StatusOr<const RandomAccessFile*> {
            ASSIGN_OR_RETURN(const IndexedRecordFile* f, OpenFile(file));
            return &f->file();
          },
          RecordFetcher::Options{kFetchAheadBytes})) {
  if (record_cache_ != nullptr) {
    for (size_t i = 0; i < dataset_->num_files(); ++i) {
      files_[i].cache_id = record_cache_->FileId(dataset_->index(i));
    }
  }
}

TfrecordBatchMaker::~TfrecordBatchMaker() = default;

absl::StatusOr<const IndexedRecordFile*> TfrecordBatchMaker::OpenFile(size_t file) const {
  File& f = files_[file];
  absl::call_once(f.once, [&] {
    f.reader = IndexedRecordFile::Open(dataset_->shared_index(file), env_);
    if (f.reader.ok()) f.remote.store((*f.reader)->file().remote() ? 1 : 0);
  });
  if (!f.reader.ok()) return f.reader.status();
  return f.reader->get();
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
  // first batch does not wait for a whole group.
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
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(c.plan, epoch);
  if (!plan.ok()) return;
  std::vector<uint64_t> ids(c.plan.batch_size);
  std::vector<Dataset::Location> locs(ids.size());
  std::vector<std::pair<RecordFetcher::Key, std::vector<Dataset::Location>>> batches;
  for (uint64_t g = first; g < end; ++g) {
    plan->BatchRecords(g, absl::MakeSpan(ids));
    for (size_t i = 0; i < ids.size(); ++i) locs[i] = dataset_->Locate(ids[i]);
    if (!AnyRemote(locs)) continue;
    batches.emplace_back(RecordFetcher::Key{epoch, g}, ToFetch(locs, nullptr));
  }
  fetcher_->Ahead(std::move(batches));
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

std::unique_ptr<TfrecordBatchMaker::Scratch> TfrecordBatchMaker::GetScratch() const {
  {
    absl::MutexLock lock(&pool_mu_);
    if (!pool_.empty()) {
      std::unique_ptr<Scratch> scratch = std::move(pool_.back());
      pool_.pop_back();
      return scratch;
    }
  }
  auto scratch = std::make_unique<Scratch>();
  // Create checked the specs as BatchBuilder::Create does, so this cannot fail.
  scratch->builder = *BatchBuilder::Create(features_);
  return scratch;
}

void TfrecordBatchMaker::ReturnScratch(std::unique_ptr<Scratch> scratch) const {
  absl::MutexLock lock(&pool_mu_);
  if (pool_.size() < kMaxPooledScratch) pool_.push_back(std::move(scratch));
}

absl::Status TfrecordBatchMaker::RecordError(size_t file, uint64_t record,
                                             const absl::Status& status) const {
  const RecordIndex& index = dataset_->index(file);
  return Prefixed(status, absl::StrCat("record ", record, " of ", index.path, " (byte ",
                                       index.offsets[record], "): "));
}

absl::Status TfrecordBatchMaker::AddData(size_t file, uint64_t record, absl::string_view data,
                                         Scratch& scratch) const {
  absl::Status added = scratch.builder->AddRecord(data);
  if (!added.ok()) return RecordError(file, record, added);
  return absl::OkStatus();
}

absl::Status TfrecordBatchMaker::ReadRecord(const Dataset::Location& loc, Scratch& scratch) const {
  auto file = OpenFile(loc.file);
  if (!file.ok()) return RecordError(loc.file, loc.record, file.status());
  auto read = (*file)->Read(loc.record, scratch.run);
  if (!read.ok()) return RecordError(loc.file, loc.record, read.status());
  if (record_cache_ != nullptr) {
    record_cache_->Insert(files_[loc.file].cache_id, loc.record, *read);
  }
  return AddData(loc.file, loc.record, *read, scratch);
}

TfrecordBatchMaker::Run TfrecordBatchMaker::FindRun(absl::Span<const uint64_t> ids,
                                                    const Dataset::Location& loc,
                                                    Scratch& scratch) const {
  const RecordIndex& index = dataset_->index(loc.file);
  const uint64_t begin = index.offsets[loc.record];
  Run run;
  while (run.length < ids.size() && ids[run.length] == ids[0] + run.length &&
         loc.record + run.length < index.num_records()) {
    const uint64_t r = loc.record + run.length;
    if (index.offsets[r] + index.data_length(r) + kRecordOverheadBytes - begin > kMaxRunBytes) {
      break;
    }
    // Looked up last, so that every record looked up is either read in this run (a miss) or
    // handed back (a hit): each counts once in the cache's stats.
    if (record_cache_ != nullptr) {
      run.next_hit = record_cache_->Lookup(files_[loc.file].cache_id, r, scratch.buffer);
      if (run.next_hit) break;
    }
    ++run.length;
  }
  return run;
}

absl::Status TfrecordBatchMaker::AddRun(const Dataset::Location& loc, size_t count,
                                        Scratch& scratch) const {
  const RecordIndex& index = dataset_->index(loc.file);
  File& f = files_[loc.file];
  absl::call_once(f.run_once, [&] { f.run_reader = env_->OpenForRead(index.path); });
  if (!f.run_reader.ok()) return RecordError(loc.file, loc.record, f.run_reader.status());
  const uint64_t begin = index.offsets[loc.record];
  const uint64_t last = loc.record + count - 1;
  const uint64_t end = index.offsets[last] + index.data_length(last) + kRecordOverheadBytes;
  scratch.run.resize(end - begin);
  auto got = (*f.run_reader)->Read(begin, end - begin, scratch.run.data());
  if (!got.ok()) return RecordError(loc.file, loc.record, got.status());
  const absl::string_view span(scratch.run.data(), *got);
  for (uint64_t r = loc.record; r <= last; ++r) {
    const uint64_t at = index.offsets[r] - begin;
    const uint64_t size = index.data_length(r) + kRecordOverheadBytes;
    const uint64_t got = span.size() - std::min(at, span.size());
    if (got < size) {
      return RecordError(loc.file, r,
                         RecordReadError(index, r, **f.run_reader, got, absl::OkStatus()));
    }
    auto data = CheckRecord(span.substr(at, size), index.path, index.offsets[r]);
    if (!data.ok()) {
      return RecordError(loc.file, r,
                         RecordReadError(index, r, **f.run_reader, got, data.status()));
    }
    if (record_cache_ != nullptr) record_cache_->Insert(f.cache_id, r, *data);
    RETURN_IF_ERROR(AddData(loc.file, r, *data, scratch));
  }
  return absl::OkStatus();
}

absl::Status TfrecordBatchMaker::AddRecords(absl::Span<const uint64_t> ids,
                                            Scratch& scratch) const {
  const std::vector<Dataset::Location>& locs = scratch.locs;  // of ids, set by MakeRecords
  // A cache hit found while extending the previous run: the record at ids[i].
  std::optional<absl::string_view> hit;
  bool looked_up = false;
  // Records read on their own are read at random, each a miss in the CPU's caches (its index
  // entry, then its bytes): ask for both a few records ahead, so that the misses overlap the
  // work on the ones before. (Measured in the end-to-end job: the copy out of the mapping and
  // the index lookup were about half of the producer's CPU.) A record that follows the one
  // before it in its file is read with it, in one sequential read: nothing to ask for.
  auto alone = [&](size_t j) { return j == 0 || ids[j] != ids[j - 1] + 1; };
  size_t entry_ahead = 0, data_ahead = 0;
  for (size_t i = 0; i < ids.size();) {
    for (; entry_ahead < std::min(ids.size(), i + 2 * kReadAhead); ++entry_ahead) {
      if (!alone(entry_ahead)) continue;
      const Dataset::Location& ahead = locs[entry_ahead];
      __builtin_prefetch(&dataset_->index(ahead.file).offsets[ahead.record], 0, 0);
    }
    for (; data_ahead < std::min(ids.size(), i + kReadAhead); ++data_ahead) {
      if (!alone(data_ahead)) continue;
      const Dataset::Location& ahead = locs[data_ahead];
      if (auto file = OpenFile(ahead.file); file.ok()) (*file)->WillRead(ahead.record);
    }
    const Dataset::Location loc = locs[i];
    if (record_cache_ != nullptr && !looked_up) {
      hit = record_cache_->Lookup(files_[loc.file].cache_id, loc.record, scratch.buffer);
    }
    if (hit) {
      RETURN_IF_ERROR(AddData(loc.file, loc.record, *hit, scratch));
      hit.reset();
      looked_up = false;
      ++i;
      continue;
    }
    // Consecutive records of a file (shuffle none, mostly) are read with one read.
    const Run run = FindRun(ids.subspan(i), loc, scratch);
    hit = run.next_hit;
    looked_up = hit.has_value();
    RETURN_IF_ERROR(run.length >= kMinRun ? AddRun(loc, run.length, scratch)
                                          : ReadRecord(loc, scratch));
    i += run.length;
  }
  return absl::OkStatus();
}

absl::StatusOr<Batch> TfrecordBatchMaker::MakeRecords(uint64_t epoch, uint64_t batch,
                                                      absl::Span<const uint64_t> ids) const {
  std::unique_ptr<Scratch> scratch = GetScratch();
  scratch->locs.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) scratch->locs[i] = dataset_->Locate(ids[i]);
  // On an error the builder holds part of a batch: the scratch is dropped rather than pooled.
  RETURN_IF_ERROR(AnyRemote(scratch->locs) ? AddFetchedRecords(epoch, batch, ids, *scratch)
                                           : AddRecords(ids, *scratch));
  absl::StatusOr<Batch> made =
      scratch->builder->Finish([this](size_t size) { return batch_buffers_.Get(size); });
  if (!made.ok()) return made.status();
  ReturnScratch(std::move(scratch));
  return made;
}

}  // namespace croupier
