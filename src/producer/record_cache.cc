#include "src/producer/record_cache.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 20;
constexpr uint64_t kMinChunkBytes = uint64_t{4} << 10;

}  // namespace

absl::StatusOr<std::unique_ptr<RecordCache>> RecordCache::Create(Options options) {
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("record cache: capacity_bytes must be at least 1");
  }
  if (options.env == nullptr) options.env = Env::Default();
  std::string path;
  if (!options.dir.empty()) {
    RETURN_IF_ERROR(options.env->CreateDirs(options.dir));
    // A fresh directory of our own, so that removing it on destruction removes only our files.
    std::string tmpl = options.dir + "/croupier-record-cache.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return ErrnoToStatus(errno, "creating a record cache directory in", options.dir);
    }
    path = std::move(tmpl);
  }
  std::unique_ptr<RecordCache> cache(new RecordCache(std::move(options), std::move(path)));
  if (!cache->path_.empty()) RETURN_IF_ERROR(cache->OpenFiles());
  return cache;
}

RecordCache::RecordCache(Options options, std::string path)
    : capacity_(options.capacity_bytes),
      chunk_bytes_(std::clamp(capacity_ / (4 * kShards), kMinChunkBytes, kMaxChunkBytes)),
      env_(options.env),
      path_(std::move(path)) {}

absl::Status RecordCache::OpenFiles() {
  for (int i = 0; i < kShards; ++i) {
    Shard& shard = shards_[i];
    const std::string file = absl::StrCat(path_, "/shard-", i, ".records");
    absl::MutexLock lock(&shard.write_mu);
    ASSIGN_OR_RETURN(shard.writer, env_->OpenForWrite(file));
    ASSIGN_OR_RETURN(shard.reader, env_->OpenForRead(file));
  }
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
  std::error_code error;
  std::filesystem::remove_all(path_, error);
  if (error) {
    Log(LogLevel::kWarning, "record_cache",
        absl::StrCat("could not remove the record cache ", path_, ": ", error.message()));
  }
}

uint32_t RecordCache::FileId(const RecordIndex& index) {
  const std::string identity =
      absl::StrCat(index.path, "\n", index.file_size, "\n", index.mtime_ns);
  absl::MutexLock lock(&files_mu_);
  auto [it, inserted] = file_ids_.emplace(identity, static_cast<uint32_t>(file_ids_.size()));
  return it->second;
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
  Shard& shard = shards_[((record >> 6) ^ file) % kShards];
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
  std::optional<absl::string_view> data = ReadBack(slot, shard, buffer);
  (data ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return data;
}

bool RecordCache::Contains(uint32_t file, uint64_t record) {
  Shard& shard = shards_[((record >> 6) ^ file) % kShards];
  absl::ReaderMutexLock lock(&shard.mu);
  return shard.slots.contains(Key{file, record});
}

std::optional<absl::string_view> RecordCache::ReadBack(const Slot& slot, Shard& shard,
                                                       std::string& buffer) {
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
  Shard& shard = shards_[((record >> 6) ^ file) % kShards];
  {
    absl::ReaderMutexLock lock(&shard.mu);
    if (shard.slots.contains(key)) return true;
  }
  const bool admitted =
      path_.empty() ? InsertInMemory(shard, key, data) : InsertInFile(shard, key, data);
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

bool RecordCache::InsertInFile(Shard& shard, const Key& key, absl::string_view data) {
  if (!Charge(data.size())) return false;
  Slot slot;
  slot.size = static_cast<uint32_t>(data.size());
  slot.crc = crc32c::Value(data);
  {
    absl::MutexLock lock(&shard.write_mu);
    if (shard.writer == nullptr) return false;  // the file failed earlier
    absl::Status written = shard.writer->Append(data);
    if (!written.ok()) {
      Log(LogLevel::kWarning, "record_cache",
          absl::StrCat("writing the record cache: ", written.message(),
                       "; this shard of the cache admits nothing more"));
      shard.writer.reset();
      return false;
    }
    slot.offset = shard.file_size;
    shard.file_size += data.size();
  }
  absl::MutexLock lock(&shard.mu);
  if (shard.slots.emplace(key, slot).second) records_.fetch_add(1, std::memory_order_relaxed);
  return true;
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
  return s;
}

}  // namespace croupier
