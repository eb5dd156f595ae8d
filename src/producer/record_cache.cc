#include "src/producer/record_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/producer/record_cache_file.h"

namespace croupier {
namespace {

constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 20;
constexpr uint64_t kMinChunkBytes = uint64_t{4} << 10;

// Locks a kept cache directory for this process: the lock file's descriptor, or -1 when another
// process holds it. Errors for a directory that cannot be made or a lock file that cannot be
// opened.
absl::StatusOr<int> LockKeptDir(Env& env, const std::string& dir) {
  RETURN_IF_ERROR(env.CreateDirs(dir));
  const std::string lock = dir + "/lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "opening the record cache's lock", lock);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) return -1;
    return ErrnoToStatus(error, "locking the record cache", lock);
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordCache>> RecordCache::Create(Options options) {
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("record cache: capacity_bytes must be at least 1");
  }
  if (options.env == nullptr) options.env = Env::Default();
  std::string path;
  int lock_fd = -1;
  if (!options.dir.empty() && options.keep) {
    const std::string kept = options.dir + "/croupier-record-cache";
    ASSIGN_OR_RETURN(lock_fd, LockKeptDir(*options.env, kept));
    if (lock_fd >= 0) {
      path = kept;
    } else {
      Log(LogLevel::kWarning, "record_cache",
          absl::StrCat("the kept record cache ", kept,
                       " is in use by another producer; this one caches in a fresh directory "
                       "beside it, removed when it stops"));
    }
  }
  if (!options.dir.empty() && path.empty()) {
    RETURN_IF_ERROR(options.env->CreateDirs(options.dir));
    // A fresh directory of our own, so that removing it on destruction removes only our files.
    std::string tmpl = options.dir + "/croupier-record-cache.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return ErrnoToStatus(errno, "creating a record cache directory in", options.dir);
    }
    path = std::move(tmpl);
  }
  std::unique_ptr<RecordCache> cache(new RecordCache(std::move(options), std::move(path), lock_fd));
  if (!cache->path_.empty()) RETURN_IF_ERROR(cache->OpenFiles());
  return cache;
}

RecordCache::RecordCache(Options options, std::string path, int lock_fd)
    : capacity_(options.capacity_bytes),
      chunk_bytes_(std::clamp(capacity_ / (4 * kShards), kMinChunkBytes, kMaxChunkBytes)),
      env_(options.env),
      path_(std::move(path)),
      lock_fd_(lock_fd) {}

absl::Status RecordCache::OpenFiles() {
  bool reopened = false;
  for (int i = 0; i < kShards; ++i) {
    Shard& shard = shards_[i];
    const std::string file = absl::StrCat(path_, "/shard-", i, ".records");
    if (kept()) {
      absl::StatusOr<FileStat> stat = env_->Stat(file);
      if (stat.ok()) {
        RETURN_IF_ERROR(Reopen(shard, file, stat->size));
        reopened = true;
        continue;
      }
      if (!absl::IsNotFound(stat.status())) return stat.status();
    }
    absl::MutexLock lock(&shard.write_mu);
    ASSIGN_OR_RETURN(shard.writer, env_->OpenForWrite(file));
    ASSIGN_OR_RETURN(shard.reader, env_->OpenForRead(file));
  }
  changed_.clear();  // CheckSources's answers hold only while the cache is made
  if (reopened) {
    Log(LogLevel::kInfo, "record_cache",
        absl::StrCat("the kept record cache ", path_, " holds ", loaded_.load(), " records (",
                     used_.load(), " bytes) from before"));
  }
  return absl::OkStatus();
}

bool RecordCache::CheckSource(const std::string& identity) {
  // path \n size \n mtime (FileId).
  const size_t b = identity.rfind('\n');
  const size_t a = b == std::string::npos || b == 0 ? std::string::npos : identity.rfind('\n', b - 1);
  if (a == std::string::npos) return true;
  const std::string path = identity.substr(0, a);
  absl::StatusOr<FileStat> stat = env_->Stat(path);
  if (absl::IsNotFound(stat.status())) return true;
  if (!stat.ok()) {
    // Not known to have changed: its records stay. One that did change is never served all the
    // same, since its identity is not the one a job's index of it gives.
    Log(LogLevel::kWarning, "record_cache",
        absl::StrCat("the kept record cache could not check its source ", path,
                     " (its records stay): ", stat.status().ToString()));
    return false;
  }
  return absl::StrCat(stat->size) != identity.substr(a + 1, b - a - 1) ||
         absl::StrCat(stat->mtime_ns) != identity.substr(b + 1);
}

void RecordCache::CheckSources(const std::vector<std::string>& identities) {
  std::vector<const std::string*> unknown;
  for (const std::string& identity : identities) {
    if (changed_.emplace(identity, false).second) unknown.push_back(&identity);
  }
  // A request each for objects in a store: several at once, so that a cache of thousands of
  // objects is checked in seconds.
  std::vector<char> answers(unknown.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < unknown.size();) answers[i] = CheckSource(*unknown[i]);
  };
  std::vector<std::thread> threads;
  const size_t n = std::min<size_t>(kParallelChecks, unknown.size());
  for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < unknown.size(); ++i) changed_[*unknown[i]] = answers[i] != 0;
}

absl::Status RecordCache::Reopen(Shard& shard, const std::string& file, uint64_t size) {
  namespace rcf = record_cache_file;
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> reader, env_->OpenForRead(file));
  ASSIGN_OR_RETURN(rcf::Scanned scanned, rcf::Scan(*reader, size));
  std::vector<std::string> identities;
  for (const auto& f : scanned.files) identities.push_back(f.identity);
  CheckSources(identities);
  // The records kept, in file order: up to the first bad frame or a record of no named file, as
  // many as the capacity holds, none of a source file or object that changed since (its records
  // would never be served again).
  struct Kept {
    const rcf::Scanned::Record* record;
    uint32_t file;  // FileId
  };
  std::vector<Kept> kept;
  absl::flat_hash_map<uint32_t, std::pair<uint32_t, bool>> file_of_local;  // -> FileId, changed
  uint64_t cut = scanned.good_bytes;
  uint64_t dropped = 0;  // records of changed source files
  size_t next_file = 0;
  for (const rcf::Scanned::Record& r : scanned.records) {
    // The file frames before this record name its file.
    for (; next_file < scanned.files.size() &&
           scanned.files[next_file].frame_offset < r.frame_offset;
         ++next_file) {
      const auto& f = scanned.files[next_file];
      file_of_local[f.local_id] = {FileIdOf(f.identity, /*opened=*/false), changed_.at(f.identity)};
    }
    auto it = file_of_local.find(r.local_id);
    if (it == file_of_local.end()) {
      cut = r.frame_offset;  // a record of no named file: the file is cut here
      break;
    }
    if (it->second.second) {
      ++dropped;
      continue;
    }
    if (!Charge(r.size)) {
      cut = r.frame_offset;  // past the capacity: cut here
      break;
    }
    kept.push_back({&r, it->second.first});
  }
  std::vector<uint64_t> offsets;  // of each kept record's bytes in the file as it stays
  absl::flat_hash_map<uint32_t, uint32_t> local_ids;  // FileId -> its number in the file
  uint64_t end = cut;
  if (dropped == 0) {
    for (const Kept& k : kept) offsets.push_back(k.record->data_offset);
    for (const auto& f : scanned.files) {
      if (f.frame_offset < cut) local_ids[FileIdOf(f.identity, /*opened=*/false)] = f.local_id;
    }
    if (cut < size) {
      Log(LogLevel::kWarning, "record_cache",
          absl::StrCat(scanned.stopped.empty() || cut < scanned.good_bytes
                           ? absl::StrCat(file, ": the capacity is reached at byte ", cut)
                           : scanned.stopped,
                       "; the file is cut there (", size - cut, " bytes dropped)"));
      RETURN_IF_ERROR(env_->Truncate(file, cut));
    }
  } else {
    // The records of changed files take room no record will use: the file is written again
    // with the records kept only, then takes the old one's place.
    std::vector<Moved> moved;
    for (const Kept& k : kept) {
      const rcf::Scanned::Record& r = *k.record;
      moved.push_back({Key{k.file, r.record}, r.data_offset, r.size, r.crc});
    }
    ASSIGN_OR_RETURN(offsets, Rewrite(file, *reader, moved, local_ids));
    end = offsets.empty() ? 0 : offsets.back() + moved.back().size;
    ASSIGN_OR_RETURN(reader, env_->OpenForRead(file));
    Log(LogLevel::kInfo, "record_cache",
        absl::StrCat(file, ": ", dropped, " records of source files that changed since dropped; ",
                     "the file is written again (", size, " bytes to ", end, ")"));
  }
  const uint32_t home = static_cast<uint32_t>(&shard - shards_.data());
  uint64_t loaded = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    Slot slot;
    slot.offset = offsets[i];
    slot.size = kept[i].record->size;
    slot.crc = kept[i].record->crc;
    slot.home = home;
    const Key key{kept[i].file, kept[i].record->record};
    Shard& keyed = ShardOf(key);
    absl::MutexLock lock(&keyed.mu);
    if (keyed.slots.emplace(key, slot).second) ++loaded;
  }
  records_.fetch_add(loaded, std::memory_order_relaxed);
  loaded_.fetch_add(loaded, std::memory_order_relaxed);
  if (loaded > 0) unopened_.store(true);  // no job has opened any file yet
  absl::MutexLock lock(&shard.write_mu);
  shard.local_ids = std::move(local_ids);
  shard.file_size = end;
  ASSIGN_OR_RETURN(shard.writer, env_->OpenForAppend(file));
  shard.reader = std::move(reader);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> RecordCache::Rewrite(
    const std::string& file, const RandomAccessFile& from, const std::vector<Moved>& records,
    absl::flat_hash_map<uint32_t, uint32_t>& local_ids) {
  namespace rcf = record_cache_file;
  local_ids.clear();
  const std::string compacted = file + ".compacting";
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out, env_->OpenForWrite(compacted));
  // A copy that does not take the file's place is not left on the disk.
  bool renamed = false;
  const absl::Cleanup remove_copy = [&] {
    if (!renamed) env_->RemoveFile(compacted).IgnoreError();
  };
  std::vector<uint64_t> offsets;
  std::string data;
  uint64_t end = 0;
  for (const Moved& r : records) {
    std::string frames;
    auto [local, added] = local_ids.emplace(r.key.file, static_cast<uint32_t>(local_ids.size()));
    if (added) frames = rcf::FileFrame(local->second, IdentityOf(r.key.file));
    frames += rcf::RecordHeader(local->second, r.key.record, r.size, r.crc);
    data.resize(r.size);
    ASSIGN_OR_RETURN(const size_t got, from.Read(r.offset, r.size, data.data()));
    if (got != r.size) {
      return absl::DataLossError(absl::StrCat(file, ": a record cut short at byte ", r.offset,
                                              " while the file was written again"));
    }
    RETURN_IF_ERROR(out->Append(frames));
    RETURN_IF_ERROR(out->Append(data));
    offsets.push_back(end + frames.size());
    end += frames.size() + r.size;
  }
  RETURN_IF_ERROR(out->Sync());
  RETURN_IF_ERROR(out->Close());
  RETURN_IF_ERROR(env_->Rename(compacted, file));
  renamed = true;
  return offsets;
}

uint64_t RecordCache::EvictUnopened() {
  absl::WriterMutexLock exclusive(&rewrite_mu_);
  if (!unopened_.load()) return 0;  // another thread evicted them meanwhile
  std::vector<bool> opened;
  {
    absl::MutexLock lock(&files_mu_);
    opened = opened_;
  }
  // Out of the index first, each shard file's loss counted.
  std::array<uint64_t, kShards> dropped_from{}, bytes_from{};
  uint64_t records = 0, bytes = 0;
  absl::flat_hash_set<uint32_t> files;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    absl::erase_if(shard.slots, [&](const auto& entry) {
      const auto& [key, slot] = entry;
      if (key.file < opened.size() && opened[key.file]) return false;
      ++dropped_from[slot.home];
      bytes_from[slot.home] += slot.size;
      ++records;
      bytes += slot.size;
      files.insert(key.file);
      return true;
    });
  }
  // Then the shard files that held them, written again with the records that stay: their bytes
  // go back to the budget. One that cannot be written admits nothing more (the records it holds
  // are still served), and the dropped records' bytes stay on the disk and in the budget.
  uint64_t freed = 0;
  for (uint32_t home = 0; home < kShards; ++home) {
    if (dropped_from[home] == 0) continue;
    const absl::Status rewritten = RewriteShard(shards_[home], home);
    if (rewritten.ok()) {
      freed += bytes_from[home];
    } else {
      Log(LogLevel::kWarning, "record_cache",
          absl::StrCat("writing the record cache's shard ", home, " again: ",
                       rewritten.message(), "; this shard of the cache admits nothing more"));
      absl::MutexLock lock(&shards_[home].write_mu);
      shards_[home].writer.reset();
    }
  }
  // Only now, with every file written again: a reader that sees false reads without the lock.
  unopened_.store(false);
  used_.fetch_sub(freed, std::memory_order_relaxed);
  records_.fetch_sub(records, std::memory_order_relaxed);
  evicted_.fetch_add(records, std::memory_order_relaxed);
  if (records == 0) return 0;  // every record read back is of a file a job here opened
  Log(LogLevel::kInfo, "record_cache",
      absl::StrCat("the kept record cache ", path_, " is full: ", records, " records (", bytes,
                   " bytes) of ", files.size(), files.size() == 1 ? " source file" : " source files",
                   " that no job of this producer opened are dropped to make room"));
  return records;
}

absl::Status RecordCache::RewriteShard(Shard& shard, uint32_t home) {
  // The records whose bytes this file holds, in file order.
  std::vector<Moved> moved;
  for (Shard& keyed : shards_) {
    absl::ReaderMutexLock lock(&keyed.mu);
    for (const auto& [key, slot] : keyed.slots) {
      if (slot.home == home) moved.push_back({key, slot.offset, slot.size, slot.crc});
    }
  }
  std::sort(moved.begin(), moved.end(),
            [](const Moved& a, const Moved& b) { return a.offset < b.offset; });
  const std::string file = absl::StrCat(path_, "/shard-", home, ".records");
  absl::MutexLock write(&shard.write_mu);
  if (shard.writer != nullptr) RETURN_IF_ERROR(shard.writer->Close());
  shard.writer.reset();
  absl::flat_hash_map<uint32_t, uint32_t> local_ids;
  ASSIGN_OR_RETURN(std::vector<uint64_t> offsets,
                   Rewrite(file, *shard.reader, moved, local_ids));
  // Until the new file is open, the old one (renamed over, still open) serves the old offsets.
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> reader, env_->OpenForRead(file));
  shard.reader = std::move(reader);
  for (size_t i = 0; i < moved.size(); ++i) {
    Shard& keyed = ShardOf(moved[i].key);
    absl::MutexLock lock(&keyed.mu);
    keyed.slots.at(moved[i].key).offset = offsets[i];
  }
  shard.local_ids = std::move(local_ids);
  shard.file_size = offsets.empty() ? 0 : offsets.back() + moved.back().size;
  ASSIGN_OR_RETURN(shard.writer, env_->OpenForAppend(file));
  return absl::OkStatus();
}

RecordCache::~RecordCache() {
  if (path_.empty()) return;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.write_mu);
    if (shard.writer != nullptr) shard.writer->Close().IgnoreError();
    shard.writer.reset();
    shard.reader.reset();
  }
  if (kept()) {
    ::close(lock_fd_);  // the directory stays for the next cache
    return;
  }
  std::error_code error;
  std::filesystem::remove_all(path_, error);
  if (error) {
    Log(LogLevel::kWarning, "record_cache",
        absl::StrCat("could not remove the record cache ", path_, ": ", error.message()));
  }
}

uint32_t RecordCache::FileId(const RecordIndex& index) {
  return FileId(index.path, index.file_size, index.mtime_ns);
}

uint32_t RecordCache::FileId(const std::string& path, uint64_t size, int64_t mtime_ns) {
  return FileIdOf(absl::StrCat(path, "\n", size, "\n", mtime_ns), /*opened=*/true);
}

uint32_t RecordCache::FileIdOf(const std::string& identity, bool opened) {
  absl::MutexLock lock(&files_mu_);
  auto [it, inserted] = file_ids_.emplace(identity, static_cast<uint32_t>(identities_.size()));
  if (inserted) {
    identities_.push_back(identity);
    opened_.push_back(false);
  }
  if (opened) opened_[it->second] = true;
  return it->second;
}

std::string RecordCache::IdentityOf(uint32_t file) {
  absl::MutexLock lock(&files_mu_);
  return file < identities_.size() ? identities_[file] : std::string();
}

bool RecordCache::Charge(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

std::optional<absl::string_view> RecordCache::Lookup(uint32_t file, uint64_t record,
                                                     std::string& buffer) {
  const Key key{file, record};
  Shard& shard = ShardOf(Key{file, record});
  // No eviction moves the record while it is found and read. Once none can come (no records
  // of unopened files, or the one eviction done), reads take no lock.
  std::optional<absl::ReaderMutexLock> no_rewrite;
  if (!path_.empty() && unopened_.load()) no_rewrite.emplace(&rewrite_mu_);
  Slot slot;
  {
    absl::ReaderMutexLock lock(&shard.mu);
    auto it = shard.slots.find(key);
    if (it == shard.slots.end()) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    slot = it->second;
  }
  if (path_.empty()) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return absl::string_view(slot.data, slot.size);
  }
  std::optional<absl::string_view> data = ReadBack(slot, buffer);
  (data ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return data;
}

bool RecordCache::Contains(uint32_t file, uint64_t record) {
  Shard& shard = ShardOf(Key{file, record});
  absl::ReaderMutexLock lock(&shard.mu);
  return shard.slots.contains(Key{file, record});
}

std::optional<absl::string_view> RecordCache::ReadBack(const Slot& slot, std::string& buffer) {
  const Shard& shard = shards_[slot.home];
  buffer.resize(slot.size);
  absl::StatusOr<size_t> got = shard.reader->Read(slot.offset, slot.size, buffer.data());
  absl::Status error;
  if (!got.ok()) {
    error = got.status();
  } else if (*got != slot.size || crc32c::Value(buffer) != slot.crc) {
    error = absl::DataLossError(absl::StrCat("record cache file ", shard.reader->name(),
                                             ": bad record at byte ", slot.offset));
  }
  if (!error.ok()) {
    // Log the first failure only: a broken cache disk would otherwise log every record.
    if (read_errors_.fetch_add(1, std::memory_order_relaxed) == 0) {
      Log(LogLevel::kWarning, "record_cache",
          absl::StrCat(error.message(), "; reading the source files instead"));
    }
    return std::nullopt;
  }
  return absl::string_view(buffer);
}

bool RecordCache::Insert(uint32_t file, uint64_t record, absl::string_view data) {
  if (data.size() > std::numeric_limits<uint32_t>::max()) {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const Key key{file, record};
  Shard& shard = ShardOf(Key{file, record});
  {
    absl::ReaderMutexLock lock(&shard.mu);
    if (shard.slots.contains(key)) return true;
  }
  bool admitted;
  if (path_.empty()) {
    admitted = InsertInMemory(shard, key, data);
  } else {
    Admission a;
    {
      std::optional<absl::ReaderMutexLock> no_rewrite;  // as in Lookup
      if (unopened_.load()) no_rewrite.emplace(&rewrite_mu_);
      a = InsertInFile(shard, key, data);
    }
    // Full, with records of another job's files read back: they make room, once.
    if (a == Admission::kFull && unopened_.load() && EvictUnopened() > 0) {
      absl::ReaderMutexLock lock(&rewrite_mu_);
      a = InsertInFile(shard, key, data);
    }
    admitted = a == Admission::kAdmitted;
  }
  if (!admitted) rejected_.fetch_add(1, std::memory_order_relaxed);
  return admitted;
}

bool RecordCache::InsertInMemory(Shard& shard, const Key& key, absl::string_view data) {
  absl::MutexLock lock(&shard.mu);
  if (shard.slots.contains(key)) return true;
  if (!Charge(kEntryOverheadBytes)) return false;
  if (shard.chunks.empty() || shard.chunk_size - shard.chunk_used < data.size()) {
    // A new chunk: a whole one if the budget allows, else exactly the record.
    uint64_t size = std::max<uint64_t>(chunk_bytes_, data.size());
    if (!Charge(size)) {
      size = data.size();
      if (!Charge(size)) {
        used_.fetch_sub(kEntryOverheadBytes, std::memory_order_relaxed);
        return false;
      }
    }
    shard.chunks.push_back(std::make_unique<char[]>(size));
    shard.chunk_size = size;
    shard.chunk_used = 0;
  }
  char* dst = shard.chunks.back().get() + shard.chunk_used;
  std::memcpy(dst, data.data(), data.size());
  shard.chunk_used += data.size();
  Slot slot;
  slot.data = dst;
  slot.size = static_cast<uint32_t>(data.size());
  shard.slots.emplace(key, slot);
  records_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

RecordCache::Admission RecordCache::InsertInFile(Shard& shard, const Key& key,
                                                 absl::string_view data) {
  const std::string identity = IdentityOf(key.file);
  if (identity.empty() || identity.size() + 4 > record_cache_file::kMaxMetaBytes) {
    return Admission::kRefused;
  }
  if (!Charge(data.size())) return Admission::kFull;
  auto refund = [&] { used_.fetch_sub(data.size(), std::memory_order_relaxed); };
  Slot slot;
  slot.size = static_cast<uint32_t>(data.size());
  slot.crc = crc32c::Value(data);
  slot.home = static_cast<uint32_t>(&shard - shards_.data());
  // Under write_mu from the check to the slot's insertion, so that two threads inserting the
  // same record write it once and charge it once (`shard` is ShardOf(key): both take its lock).
  absl::MutexLock lock(&shard.write_mu);
  {
    absl::ReaderMutexLock held(&shard.mu);
    if (shard.slots.contains(key)) {
      refund();
      return Admission::kAdmitted;
    }
  }
  if (shard.writer == nullptr) {  // the file failed earlier
    refund();
    return Admission::kRefused;
  }
  // A frame naming the source file the first time this shard's file holds one of its records,
  // then the record's frame: its header, then its bytes.
  std::string frames;
  auto local = shard.local_ids.find(key.file);
  const bool named = local != shard.local_ids.end();
  const uint32_t local_id = named ? local->second : static_cast<uint32_t>(shard.local_ids.size());
  if (!named) frames = record_cache_file::FileFrame(local_id, identity);
  frames += record_cache_file::RecordHeader(local_id, key.record, slot.size, slot.crc);
  absl::Status written = shard.writer->Append(frames);
  if (written.ok()) written = shard.writer->Append(data);
  if (!written.ok()) {
    Log(LogLevel::kWarning, "record_cache",
        absl::StrCat("writing the record cache: ", written.message(),
                     "; this shard of the cache admits nothing more"));
    shard.writer.reset();
    refund();
    return Admission::kRefused;
  }
  if (!named) shard.local_ids.emplace(key.file, local_id);
  slot.offset = shard.file_size + frames.size();
  shard.file_size += frames.size() + data.size();
  absl::MutexLock slots(&shard.mu);
  shard.slots.emplace(key, slot);
  records_.fetch_add(1, std::memory_order_relaxed);
  return Admission::kAdmitted;
}

RecordCache::Stats RecordCache::stats() const {
  Stats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.records = records_.load(std::memory_order_relaxed);
  s.bytes = used_.load(std::memory_order_relaxed);
  s.capacity_bytes = capacity_;
  s.rejected = rejected_.load(std::memory_order_relaxed);
  s.read_errors = read_errors_.load(std::memory_order_relaxed);
  s.loaded = loaded_.load(std::memory_order_relaxed);
  s.evicted = evicted_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace croupier
