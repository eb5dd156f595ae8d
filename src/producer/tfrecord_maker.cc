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

}  // namespace

absl::StatusOr<std::unique_ptr<TfrecordBatchMaker>> TfrecordBatchMaker::Create(
    const v1::JobInfo& job, IndexCache& cache, RecordCache* record_cache, Env* env,
    std::shared_ptr<FetchBudget> budget) {
  const std::string& name = job.spec().name();
  const std::string prefix = absl::StrCat("job '", name, "': ");
  if (job.files().empty()) return absl::InvalidArgumentError(prefix + "the job has no files");
  auto features = ParseFeatureSpecs(job.spec().features());
  if (!features.ok()) return Prefixed(features.status(), prefix);
  if (absl::Status s = CheckExampleFeatureSpecs(*features); !s.ok()) return Prefixed(s, prefix);
  ASSIGN_OR_RETURN(JobConfig config, CheckedConfig(job));

  std::vector<std::string> paths;
  std::vector<FileStat> known;
  std::vector<uint64_t> counts;
  uint64_t records = 0;
  for (const v1::FileInfo& f : job.files()) {
    paths.push_back(f.path());
    known.push_back(FileStat{f.size_bytes(), f.mtime_ns(), f.etag()});
    counts.push_back(f.num_records());
    records += f.num_records();
  }
  if (job.num_records() != records) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "the job counts ", job.num_records(),
                                                      " records but its files hold ", records));
  }
  // The objects' indexes are loaded as batches need them (MakeRecords, RemoteBatches).
  auto dataset = Dataset::OpenKnown(paths, known, counts, cache);
  if (!dataset.ok()) return Prefixed(dataset.status(), prefix);

  if (budget == nullptr) budget = std::make_shared<FetchBudget>(kFetchAheadBytes);
  return std::unique_ptr<TfrecordBatchMaker>(
      new TfrecordBatchMaker(job, std::move(config), *std::move(dataset), *std::move(features),
                             record_cache, env, std::move(budget)));
}

TfrecordBatchMaker::TfrecordBatchMaker(v1::JobInfo job, JobConfig config,
                                       std::unique_ptr<Dataset> dataset,
                                       std::vector<FeatureSpec> features, RecordCache* record_cache,
                                       Env* env, std::shared_ptr<FetchBudget> budget)
    : BatchMaker(std::move(job), std::move(config)),
      dataset_(std::move(dataset)),
      features_(std::move(features)),
      record_cache_(record_cache),
      env_(env != nullptr ? env : Env::Default()),
      files_(new File[dataset_->num_files()]),
      fetch_group_(
          FetchGroupBatches(*dataset_, this->job(), this->config().plan.batch_size,
                            budget->capacity())),
      fetcher_(std::make_unique<RecordFetcher>(
          *dataset_,
          [this](size_t file) -> absl::StatusOr<const RandomAccessFile*> {
            ASSIGN_OR_RETURN(const IndexedRecordFile* f, OpenFile(file));
            return &f->file();
          },
          RecordFetcher::Options{.budget = budget, .fetch_threads = kFetchThreads})) {
  if (record_cache_ != nullptr) {
    // An object not loaded yet is named as its index will name it (the job's size and
    // modification time of it), so that its records kept from before count as this job's now.
    for (size_t i = 0; i < dataset_->num_files(); ++i) {
      const v1::FileInfo& f = this->job().files(static_cast<int>(i));
      files_[i].cache_id =
          dataset_->loaded(i)
              ? record_cache_->FileId(dataset_->index(i))
              : record_cache_->FileId(dataset_->path(i), f.size_bytes(), f.mtime_ns());
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

absl::Status TfrecordBatchMaker::LoadFiles(absl::Span<const Dataset::Location> locs) const {
  // Mostly every file is loaded already: nothing to gather.
  if (std::all_of(locs.begin(), locs.end(),
                  [this](const Dataset::Location& loc) { return dataset_->loaded(loc.file); })) {
    return absl::OkStatus();
  }
  std::vector<size_t> files;
  for (const Dataset::Location& loc : locs) {
    if (files.empty() || files.back() != loc.file) files.push_back(loc.file);
  }
  absl::Status loaded = dataset_->Load(files);
  if (!loaded.ok()) return Prefixed(loaded, absl::StrCat("job '", job().spec().name(), "': "));
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
  RETURN_IF_ERROR(LoadFiles(scratch->locs));
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
