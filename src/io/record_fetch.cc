#include "src/io/record_fetch.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>

#include "absl/time/clock.h"
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

// The counters of every fetcher of the process (RecordFetcher::ProcessStats).
struct Totals {
  std::atomic<uint64_t> ahead_started{0}, ahead_used{0}, ahead_ready{0}, ahead_by_maker{0},
      fetched_now{0}, ahead_fetches{0}, forgotten{0}, wait_ns{0};
};
Totals& ProcessTotals() {
  static Totals* totals = new Totals;
  return *totals;
}
void Count(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace

RecordFetcher::Stats RecordFetcher::ProcessStats() {
  const Totals& t = ProcessTotals();
  Stats s;
  s.ahead_started = t.ahead_started.load(std::memory_order_relaxed);
  s.ahead_used = t.ahead_used.load(std::memory_order_relaxed);
  s.ahead_ready = t.ahead_ready.load(std::memory_order_relaxed);
  s.ahead_by_maker = t.ahead_by_maker.load(std::memory_order_relaxed);
  s.fetched_now = t.fetched_now.load(std::memory_order_relaxed);
  s.ahead_fetches = t.ahead_fetches.load(std::memory_order_relaxed);
  s.forgotten = t.forgotten.load(std::memory_order_relaxed);
  s.wait_seconds = static_cast<double>(t.wait_ns.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

bool FetchBudget::TryTake(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

void FetchBudget::Give(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

RecordFetcher::RecordFetcher(const Dataset& dataset, Opener open, Options options)
    : dataset_(dataset),
      open_(std::move(open)),
      options_(options),
      budget_(options.budget != nullptr ? options.budget
                                        : std::make_shared<FetchBudget>(options.max_ahead_bytes)) {}

RecordFetcher::~RecordFetcher() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  // What is still held ahead goes back to a budget that other fetchers may share.
  absl::MutexLock lock(&mu_);
  budget_->Give(ahead_bytes_);
  ahead_bytes_ = 0;
}

void RecordFetcher::ReleaseLocked(Entry& entry) {
  budget_->Give(entry.bytes);
  ahead_bytes_ -= entry.bytes;
  entry.bytes = 0;
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
  auto storage = std::make_shared<std::string>(total, '\0');
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
                        storage->data() + out->starts[j], 0});
    }
    ASSIGN_OR_RETURN(const RandomAccessFile* f, open_(file));
    RETURN_IF_ERROR(f->ReadRanges(absl::MakeSpan(ranges)));
    for (size_t k = 0; k < ranges.size(); ++k) out->got[order[at + k]] = ranges[k].got;
    at = end;
  }
  out->storage = std::move(storage);
  return std::shared_ptr<const FetchedRecords>(std::move(out));
}

absl::StatusOr<std::shared_ptr<const FetchedRecords>> RecordFetcher::Take(
    const Key& key, absl::Span<const Dataset::Location> records) {
  std::shared_ptr<Entry> entry;
  // The fetch of `entry`'s call when no fetch thread has started it: run on this thread.
  std::vector<std::shared_ptr<Entry>> here;
  bool ready = false;
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
      // Fetched, being fetched, or still queued; fetched with the batches asked for with it (their
      // neighbouring records merged) in each case.
      entry = it->second;
      ahead_.erase(it);
      ready = entry->done;
      if (!entry->started) here = UnqueueLocked(entry->call);
    }
    // Drop what was fetched ahead for batches long passed.
    for (auto it = ahead_.begin(); it != ahead_.end();) {
      const Key& k = it->first;
      const bool stale =
          k.first < key.first || (k.first == key.first && k.second + kStaleBatches < key.second);
      if (stale && it->second->done) {
        ReleaseLocked(*it->second);
        ahead_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  const absl::Time start = absl::Now();
  if (!here.empty()) FetchTogether(here);
  {
    absl::MutexLock lock(&mu_);
    if (entry != nullptr) {
      mu_.Await(absl::Condition(&entry->done));
      WaitedLocked(absl::Now() - start);
      ReleaseLocked(*entry);
      // The records asked for now are those asked ahead, unless the caller's view changed in
      // between (a record cached meanwhile, say): then they are read now.
      const bool same =
          std::equal(records.begin(), records.end(), entry->records.begin(), entry->records.end(),
                     [](const Dataset::Location& a, const Dataset::Location& b) {
                       return a.file == b.file && a.record == b.record;
                     });
      if (entry->fetched.ok() && same) {
        ++stats_.ahead_used;
        Count(ProcessTotals().ahead_used);
        if (ready) {
          ++stats_.ahead_ready;
          Count(ProcessTotals().ahead_ready);
        }
        if (!here.empty()) {
          ++stats_.ahead_by_maker;
          Count(ProcessTotals().ahead_by_maker);
        }
        return entry->fetched;
      }
    }
    ++stats_.fetched_now;
    Count(ProcessTotals().fetched_now);
  }
  const absl::Time now = absl::Now();
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> fetched = Fetch(records);
  absl::MutexLock lock(&mu_);
  WaitedLocked(absl::Now() - now);
  return fetched;
}

void RecordFetcher::WaitedLocked(absl::Duration waited) {
  stats_.wait_seconds += absl::ToDoubleSeconds(waited);
  Count(ProcessTotals().wait_ns, static_cast<uint64_t>(absl::ToInt64Nanoseconds(waited)));
}

void RecordFetcher::Ahead(const Key& key, std::vector<Dataset::Location> records,
                          Priority priority) {
  std::vector<std::pair<Key, std::vector<Dataset::Location>>> batches;
  batches.emplace_back(key, std::move(records));
  Ahead(std::move(batches), priority);
}

void RecordFetcher::Ahead(Batches batches, Priority priority) {
  std::vector<uint64_t> bytes(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    for (const Dataset::Location& loc : batches[i].second) bytes[i] += FramedBytes(loc);
  }
  absl::MutexLock lock(&mu_);
  AheadLocked(std::move(batches), bytes, priority);
}

void RecordFetcher::AheadLocked(Batches batches, const std::vector<uint64_t>& bytes,
                                Priority priority) {
  if (stopping_) return;
  std::deque<std::shared_ptr<Entry>>& queue = priority == Priority::kNext ? next_ : queue_;
  const uint64_t call = ++calls_;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Key& key = batches[i].first;
    if (taken_.contains(key) || ahead_.contains(key)) continue;
    if (!budget_->TryTake(bytes[i])) break;
    auto entry = std::make_shared<Entry>();
    entry->records = std::move(batches[i].second);
    entry->bytes = bytes[i];
    entry->call = call;
    ahead_bytes_ += bytes[i];
    stats_.peak_ahead_bytes = std::max(stats_.peak_ahead_bytes, ahead_bytes_);
    queue.push_back(entry);
    ahead_.emplace(key, std::move(entry));
    ++stats_.ahead_started;
    Count(ProcessTotals().ahead_started);
  }
  if (!queue.empty()) MaybeStartThreadLocked();
}

std::vector<std::shared_ptr<RecordFetcher::Entry>> RecordFetcher::UnqueueLocked(
    std::optional<uint64_t> call) {
  std::vector<std::shared_ptr<Entry>> entries;
  for (std::deque<std::shared_ptr<Entry>>* queue : {&next_, &queue_}) {
    if (queue->empty()) continue;
    const uint64_t wanted = call.value_or(queue->front()->call);
    // A call's entries are one run of one queue.
    auto first = std::find_if(queue->begin(), queue->end(),
                              [&](const std::shared_ptr<Entry>& e) { return e->call == wanted; });
    auto last = std::find_if(first, queue->end(),
                             [&](const std::shared_ptr<Entry>& e) { return e->call != wanted; });
    for (auto it = first; it != last; ++it) {
      (*it)->started = true;
      entries.push_back(std::move(*it));
    }
    queue->erase(first, last);
    if (!entries.empty()) break;
  }
  return entries;
}

void RecordFetcher::AheadLater(BatchRange range, std::function<Batches()> list) {
  auto later = std::make_shared<Later>();
  later->range = range;
  later->list = std::move(list);
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  later_.push_back(std::move(later));
  MaybeStartThreadLocked();
}

void RecordFetcher::Forget(BatchRange range) {
  absl::MutexLock lock(&mu_);
  for (auto& later : later_) later->cancelled = later->cancelled || later->range.Overlaps(range);
  std::erase_if(later_, [](const std::shared_ptr<Later>& l) { return l->cancelled; });
  for (auto& later : running_later_) {
    later->cancelled = later->cancelled || later->range.Overlaps(range);
  }
  std::vector<Entry*> dropped;
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    if (!range.Contains(it->first)) {
      ++it;
      continue;
    }
    Entry& entry = *it->second;
    ++stats_.forgotten;
    Count(ProcessTotals().forgotten);
    if (!entry.started || entry.done) {
      // Not started: it leaves the queue (below). Done: its records are dropped here, and its
      // storage with them once no batch fetched with it holds it.
      ReleaseLocked(entry);
      entry.fetched = absl::CancelledError("forgotten");
      if (!entry.started) dropped.push_back(&entry);
    } else {
      entry.forgotten = true;  // its fetch gives its bytes back as it ends
    }
    ahead_.erase(it++);
  }
  if (!dropped.empty()) {
    for (std::deque<std::shared_ptr<Entry>>* queue : {&next_, &queue_}) {
      std::erase_if(*queue, [&](const std::shared_ptr<Entry>& e) {
        return std::find(dropped.begin(), dropped.end(), e.get()) != dropped.end();
      });
    }
  }
  for (auto it = taken_.begin(); it != taken_.end();) {
    if (range.Contains(*it)) {
      taken_.erase(it++);
    } else {
      ++it;
    }
  }
}

void RecordFetcher::MaybeStartThreadLocked() {
  if (idle_threads_ > 0) return;  // it wakes to the work
  if (static_cast<int>(threads_.size()) >= std::max(1, options_.fetch_threads)) return;
  threads_.emplace_back([this] { Loop(); });
}

void RecordFetcher::Loop() {
  mu_.Lock();
  while (true) {
    ++idle_threads_;
    mu_.Await(absl::Condition(this, &RecordFetcher::HasWorkLocked));
    --idle_threads_;
    if (stopping_) break;  // no Take waits: the destructor runs alone
    if (next_.empty() && queue_.empty()) {
      // A list to make: outside the lock, since making it may open files (a request each).
      std::shared_ptr<Later> later = std::move(later_.front());
      later_.pop_front();
      running_later_.push_back(later);
      mu_.Unlock();
      Batches batches = later->list();
      std::vector<uint64_t> bytes(batches.size());
      for (size_t i = 0; i < batches.size(); ++i) {
        for (const Dataset::Location& loc : batches[i].second) bytes[i] += FramedBytes(loc);
      }
      mu_.Lock();
      std::erase(running_later_, later);
      if (!later->cancelled) AheadLocked(std::move(batches), bytes, Priority::kLater);
      continue;
    }
    // The batches of the first call waiting, the next of the task being made first, fetched
    // together (their bytes are within the budget already); those of later calls are other
    // fetches, which other threads run meanwhile.
    std::vector<std::shared_ptr<Entry>> entries = UnqueueLocked();
    // Another thread takes what else is waiting, or named meanwhile.
    if (!next_.empty() || !queue_.empty() || !later_.empty()) MaybeStartThreadLocked();
    mu_.Unlock();
    FetchTogether(entries);
    mu_.Lock();
  }
  mu_.Unlock();
}

void RecordFetcher::FetchTogether(const std::vector<std::shared_ptr<Entry>>& entries) {
  std::vector<Dataset::Location> all;
  for (const auto& entry : entries) {
    all.insert(all.end(), entry->records.begin(), entry->records.end());
  }
  absl::StatusOr<std::shared_ptr<const FetchedRecords>> fetched = Fetch(all);
  std::vector<absl::StatusOr<std::shared_ptr<const FetchedRecords>>> parts;
  size_t at = 0;
  for (const auto& entry : entries) {
    if (!fetched.ok()) {
      parts.push_back(fetched.status());
      continue;
    }
    auto part = std::make_shared<FetchedRecords>();
    part->storage = (*fetched)->storage;
    const size_t n = entry->records.size();
    part->starts.assign((*fetched)->starts.begin() + at, (*fetched)->starts.begin() + at + n);
    part->got.assign((*fetched)->got.begin() + at, (*fetched)->got.begin() + at + n);
    at += n;
    parts.push_back(std::shared_ptr<const FetchedRecords>(std::move(part)));
  }
  absl::MutexLock lock(&mu_);
  ++stats_.ahead_fetches;
  Count(ProcessTotals().ahead_fetches);
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& entry = *entries[i];
    entry.done = true;
    if (entry.forgotten) {
      ReleaseLocked(entry);  // its task was taken away during the fetch: nobody takes it
      continue;
    }
    entry.fetched = std::move(parts[i]);
  }
}

bool RecordFetcher::Known(const Key& key) const {
  absl::MutexLock lock(&mu_);
  return taken_.contains(key) || ahead_.contains(key);
}

RecordFetcher::Stats RecordFetcher::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.ahead_bytes = ahead_bytes_;
  return s;
}

}  // namespace croupier
