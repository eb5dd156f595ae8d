#include "src/io/record_fetch.h"

#include <algorithm>

#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/io/tfrecord_format.h"

namespace croupier {
namespace {

// Taken batches remembered (so not fetched ahead again).
constexpr size_t kRememberTaken = 1024;
// A batch fetched ahead and not taken while the maker is this many batches past it (its task
// was taken away, say) is dropped.
constexpr uint64_t kStaleBatches = 64;

}  // namespace

RecordFetcher::RecordFetcher(const Dataset& dataset, Opener open, Options options)
    : dataset_(dataset), open_(std::move(open)), options_(options) {}

RecordFetcher::~RecordFetcher() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    thread.swap(thread_);
  }
  if (thread.joinable()) thread.join();
}

uint64_t RecordFetcher::FramedBytes(const Dataset::Location& loc) const {
  return dataset_.index(loc.file).data_length(loc.record) + kRecordOverheadBytes;
}

absl::StatusOr<std::shared_ptr<const FetchedRecords>> RecordFetcher::Fetch(
    absl::Span<const Dataset::Location> records) const {
  auto out = std::make_shared<FetchedRecords>();
  out->starts.resize(records.size());
  out->got.resize(records.size());
  uint64_t total = 0;
  for (size_t j = 0; j < records.size(); ++j) {
    out->starts[j] = total;
    total += FramedBytes(records[j]);
  }
  out->bytes.resize(total);
  // The ranges of each file, laid out in the order asked: records consecutive in a file and in
  // the batch (shuffle none, blocks) are end to end in memory too, so a merged request lands in
  // place.
  std::vector<size_t> order(records.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return records[a].file < records[b].file; });
  std::vector<RandomAccessFile::Range> ranges;
  for (size_t at = 0; at < order.size();) {
    const size_t file = records[order[at]].file;
    size_t end = at;
    ranges.clear();
    for (; end < order.size() && records[order[end]].file == file; ++end) {
      const size_t j = order[end];
      ranges.push_back({dataset_.index(file).offsets[records[j].record], FramedBytes(records[j]),
                        out->bytes.data() + out->starts[j], 0});
    }
    ASSIGN_OR_RETURN(const RandomAccessFile* f, open_(file));
    RETURN_IF_ERROR(f->ReadRanges(absl::MakeSpan(ranges)));
    for (size_t k = 0; k < ranges.size(); ++k) out->got[order[at + k]] = ranges[k].got;
    at = end;
  }
  return std::shared_ptr<const FetchedRecords>(std::move(out));
}

absl::StatusOr<std::shared_ptr<const FetchedRecords>> RecordFetcher::Take(
    const Key& key, absl::Span<const Dataset::Location> records) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    if (taken_.insert(key).second) {
      taken_order_.push_back(key);
      if (taken_order_.size() > kRememberTaken) {
        taken_.erase(taken_order_.front());
        taken_order_.pop_front();
      }
    }
    if (auto it = ahead_.find(key); it != ahead_.end()) {
      entry = it->second;
      ahead_.erase(it);
      if (!entry->done) {
        // Not started: no longer anyone's to start.
        auto q = std::find(queue_.begin(), queue_.end(), key);
        if (q != queue_.end()) {
          queue_.erase(q);
          ahead_bytes_ -= entry->bytes;
          entry.reset();
        }
      }
    }
    // Drop what was fetched ahead for batches long passed.
    for (auto it = ahead_.begin(); it != ahead_.end();) {
      const Key& k = it->first;
      const bool stale =
          k.first < key.first || (k.first == key.first && k.second + kStaleBatches < key.second);
      if (stale && it->second->done) {
        ahead_bytes_ -= it->second->bytes;
        ahead_.erase(it++);
      } else {
        ++it;
      }
    }
    if (entry != nullptr) {
      mu_.Await(absl::Condition(&entry->done));
      ahead_bytes_ -= entry->bytes;
      // The records asked for now are those asked ahead, unless the caller's view changed in
      // between (a record cached meanwhile, say): then they are read now.
      const bool same =
          std::equal(records.begin(), records.end(), entry->records.begin(), entry->records.end(),
                     [](const Dataset::Location& a, const Dataset::Location& b) {
                       return a.file == b.file && a.record == b.record;
                     });
      if (entry->fetched.ok() && same) {
        ++stats_.ahead_used;
        return entry->fetched;
      }
    }
    ++stats_.fetched_now;
  }
  return Fetch(records);
}

void RecordFetcher::Ahead(const Key& key, std::vector<Dataset::Location> records) {
  uint64_t bytes = 0;
  for (const Dataset::Location& loc : records) bytes += FramedBytes(loc);
  absl::MutexLock lock(&mu_);
  if (stopping_ || taken_.contains(key) || ahead_.contains(key)) return;
  if (ahead_bytes_ + bytes > options_.max_ahead_bytes) return;
  auto entry = std::make_shared<Entry>();
  entry->records = std::move(records);
  entry->bytes = bytes;
  ahead_bytes_ += bytes;
  ahead_.emplace(key, std::move(entry));
  queue_.push_back(key);
  ++stats_.ahead_started;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void RecordFetcher::Loop() {
  while (true) {
    std::shared_ptr<Entry> entry;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RecordFetcher* f)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) { return f->stopping_ || !f->queue_.empty(); },
          this));
      if (stopping_) return;
      entry = ahead_.at(queue_.front());
      queue_.pop_front();
    }
    absl::StatusOr<std::shared_ptr<const FetchedRecords>> fetched = Fetch(entry->records);
    absl::MutexLock lock(&mu_);
    entry->fetched = std::move(fetched);
    entry->done = true;
  }
}

RecordFetcher::Stats RecordFetcher::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace croupier
