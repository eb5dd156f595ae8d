#include "croupier/record_index.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "croupier/tfrecord.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/io/tfrecord_format.h"

namespace croupier {
namespace {

// Cache file layout, version 1 (docs/formats.md):
//   0  char[8] magic "CRPRIDX1"     8  u32 version    12 u32 path length P
//   16 u64 file size                24 i64 mtime (ns) 32 u64 record count n
//   40 char[P] path, then u64[n] record offsets, then u32 masked CRC-32C of all that precedes.
constexpr char kMagic[8] = {'C', 'R', 'P', 'R', 'I', 'D', 'X', '1'};
constexpr uint32_t kIndexVersion = 1;
constexpr size_t kFixedBytes = 40;
constexpr uint32_t kMaxPathBytes = 1 << 16;
constexpr uint64_t kProgressEveryBytes = 64 << 20;

}  // namespace

uint64_t RecordIndex::data_length(uint64_t i) const {
  uint64_t end = i + 1 < offsets.size() ? offsets[i + 1] : file_size;
  return end - offsets[i] - kRecordOverheadBytes;
}

absl::StatusOr<RecordIndex> BuildRecordIndex(Env& env, const std::string& path,
                                             const IndexProgress& progress) {
  ASSIGN_OR_RETURN(FileStat before, env.Stat(path));
  return BuildRecordIndex(env, path, before, progress);
}

absl::StatusOr<RecordIndex> BuildRecordIndex(Env& env, const std::string& path,
                                             const FileStat& before,
                                             const IndexProgress& progress) {
  RecordReaderOptions options;
  options.verify_data_crc = false;
  ASSIGN_OR_RETURN(auto file, env.OpenKnown(path, before, Env::ReadPattern::kSequential));
  auto reader = RecordReader::Open(std::move(file), options);
  RecordIndex index;
  index.path = path;
  uint64_t next_report = kProgressEveryBytes;
  while (true) {
    ASSIGN_OR_RETURN(auto record, reader->Next());
    if (!record.has_value()) break;
    index.offsets.push_back(reader->record_offset());
    if (progress && reader->offset() >= next_report) {
      progress(reader->offset(), before.size);
      next_report = reader->offset() + kProgressEveryBytes;
    }
  }
  ASSIGN_OR_RETURN(FileStat after, env.Stat(path));
  if (after.size != before.size || after.mtime_ns != before.mtime_ns ||
      after.etag != before.etag || reader->offset() != after.size) {
    return absl::AbortedError(absl::StrCat(path, " changed while it was being indexed (",
                                           before.size, " bytes before, ", after.size,
                                           " after); index it again once it is complete"));
  }
  index.file_size = after.size;
  index.mtime_ns = after.mtime_ns;
  index.etag = after.etag;
  if (progress) progress(after.size, after.size);
  return index;
}

std::string SerializeRecordIndex(const RecordIndex& index) {
  std::string out(kFixedBytes, '\0');
  std::memcpy(out.data(), kMagic, 8);
  tfrecord::EncodeU32(out.data() + 8, kIndexVersion);
  tfrecord::EncodeU32(out.data() + 12, static_cast<uint32_t>(index.path.size()));
  tfrecord::EncodeU64(out.data() + 16, index.file_size);
  tfrecord::EncodeU64(out.data() + 24, static_cast<uint64_t>(index.mtime_ns));
  tfrecord::EncodeU64(out.data() + 32, index.offsets.size());
  out.append(index.path);
  size_t at = out.size();
  out.resize(at + 8 * index.offsets.size() + 4);
  // memcpy from the null data() of an empty vector is undefined even for 0 bytes (UBSan).
  if (!index.offsets.empty()) {
    std::memcpy(out.data() + at, index.offsets.data(), 8 * index.offsets.size());
  }
  size_t body = out.size() - 4;
  tfrecord::EncodeU32(out.data() + body, crc32c::Mask(crc32c::Value(out.data(), body)));
  return out;
}

absl::StatusOr<RecordIndex> ParseRecordIndex(absl::string_view bytes, absl::string_view source) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("index file ", source, " is invalid: ", why));
  };
  if (bytes.size() < kFixedBytes + 4) return bad("shorter than its fixed header");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return bad("wrong magic bytes");
  uint32_t version = tfrecord::DecodeU32(bytes.data() + 8);
  if (version != kIndexVersion) {
    return bad(absl::StrCat("format version ", version, ", this build reads ", kIndexVersion));
  }
  uint32_t path_bytes = tfrecord::DecodeU32(bytes.data() + 12);
  uint64_t n = tfrecord::DecodeU64(bytes.data() + 32);
  if (path_bytes > kMaxPathBytes) return bad("path length out of range");
  if (n > (bytes.size() - kFixedBytes) / 8) return bad("record count larger than the file");
  if (bytes.size() != kFixedBytes + path_bytes + 8 * n + 4) return bad("size does not match");
  size_t body = bytes.size() - 4;
  if (crc32c::Unmask(tfrecord::DecodeU32(bytes.data() + body)) !=
      crc32c::Value(bytes.data(), body)) {
    return bad("checksum mismatch");
  }
  RecordIndex index;
  index.file_size = tfrecord::DecodeU64(bytes.data() + 16);
  index.mtime_ns = static_cast<int64_t>(tfrecord::DecodeU64(bytes.data() + 24));
  index.path.assign(bytes.data() + kFixedBytes, path_bytes);
  index.offsets.resize(n);
  if (n > 0) std::memcpy(index.offsets.data(), bytes.data() + kFixedBytes + path_bytes, 8 * n);
  // Every record must fit between its offset and the next one, the last one before the end.
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t end = i + 1 < n ? index.offsets[i + 1] : index.file_size;
    if (index.offsets[i] > end || end - index.offsets[i] < kRecordOverheadBytes ||
        (i == 0 && index.offsets[0] != 0)) {
      return bad(absl::StrCat("record ", i, " has an impossible offset"));
    }
  }
  return index;
}

IndexCache::IndexCache(std::string dir, Env* env)
    : dir_(dir.empty() ? DefaultDir() : std::move(dir)), env_(env ? env : Env::Default()) {}

std::string IndexCache::DefaultDir() {
  if (const char* d = std::getenv("CROUPIER_INDEX_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    return absl::StrCat(x, "/croupier/index");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home && *home ? home : "/tmp", "/.cache/croupier/index");
}

std::string IndexCache::CachePath(const std::string& path) const {
  // The name keeps the data file's base name for people and a checksum of the full path for
  // uniqueness; the path stored inside settles any collision.
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return absl::StrFormat("%s/%s.%08x.crindex", dir_, base, crc32c::Value(path));
}

absl::StatusOr<std::shared_ptr<const RecordIndex>> IndexCache::Get(const std::string& path,
                                                                   const IndexProgress& progress,
                                                                   bool* rebuilt,
                                                                   const FileStat* known) {
  FileStat st;
  if (known != nullptr) {
    st = *known;
  } else {
    ASSIGN_OR_RETURN(st, env_->Stat(path));
  }
  const std::string cache_path = CachePath(path);
  if (auto cached = ReadFileToString(*env_, cache_path); cached.ok()) {
    auto index = ParseRecordIndex(*cached, cache_path);
    if (index.ok() && index->path == path && index->file_size == st.size &&
        index->mtime_ns == st.mtime_ns) {
      if (rebuilt) *rebuilt = false;
      index->etag = st.etag;
      return std::make_shared<const RecordIndex>(*std::move(index));
    }
    if (!index.ok()) Log(LogLevel::kWarning, "index", index.status().message());
  }
  // An object's index may have been built already by another process (the dispatcher, as it
  // created the job) and kept beside it for everyone: one small GET instead of a whole scan.
  const std::string shared_path = env_->SharedDerivedPath(path, kSharedIndexSuffix);
  if (!shared_path.empty()) {
    absl::StatusOr<std::string> shared = ReadFileToString(*env_, shared_path);
    if (shared.ok()) {
      auto index = ParseRecordIndex(*shared, shared_path);
      if (index.ok() && index->path == path && index->file_size == st.size &&
          index->mtime_ns == st.mtime_ns) {
        if (rebuilt) *rebuilt = false;
        Store(cache_path, *shared, path);
        index->etag = st.etag;
        return std::make_shared<const RecordIndex>(*std::move(index));
      }
      if (!index.ok()) Log(LogLevel::kWarning, "index", index.status().message());
    } else if (!absl::IsNotFound(shared.status())) {
      Log(LogLevel::kWarning, "index",
          absl::StrCat("could not read the shared index of ", path, ": ", shared.status().message(),
                       "; indexing it here"));
    }
  }
  ASSIGN_OR_RETURN(RecordIndex index, BuildRecordIndex(*env_, path, st, progress));
  if (rebuilt) *rebuilt = true;
  const std::string bytes = SerializeRecordIndex(index);
  Store(cache_path, bytes, path);
  if (!shared_path.empty()) {
    if (absl::Status put = env_->WriteFileAtomically(shared_path, bytes); !put.ok()) {
      Log(LogLevel::kWarning, "index",
          absl::StrCat("could not share the index of ", path,
                       " (each producer will index it itself): ", put.message()));
    }
  }
  return std::make_shared<const RecordIndex>(std::move(index));
}

void IndexCache::Store(const std::string& cache_path, absl::string_view bytes,
                       const std::string& path) const {
  absl::Status stored = env_->CreateDirs(dir_);
  if (stored.ok()) stored = env_->WriteFileAtomically(cache_path, bytes);
  if (!stored.ok()) {
    Log(LogLevel::kWarning, "index",
        absl::StrCat("could not cache the index of ", path, ": ", stored.message()));
  }
}

absl::StatusOr<std::unique_ptr<IndexedRecordFile>> IndexedRecordFile::Open(
    std::shared_ptr<const RecordIndex> index, Env* env) {
  if (env == nullptr) env = Env::Default();
  // Records are read one at a time, at random; the index was checked against the file's size.
  ASSIGN_OR_RETURN(
      auto file,
      env->OpenKnown(index->path, FileStat{index->file_size, index->mtime_ns, index->etag},
                     Env::ReadPattern::kRandom));
  return std::unique_ptr<IndexedRecordFile>(
      new IndexedRecordFile(std::move(index), std::move(file)));
}

IndexedRecordFile::IndexedRecordFile(std::shared_ptr<const RecordIndex> index,
                                     std::unique_ptr<RandomAccessFile> file)
    : index_(std::move(index)), file_(std::move(file)) {}

IndexedRecordFile::~IndexedRecordFile() = default;

absl::StatusOr<absl::string_view> IndexedRecordFile::Read(uint64_t i, std::string& buffer) const {
  if (i >= index_->num_records()) {
    return absl::OutOfRangeError(absl::StrCat("record ", i, " of ", index_->path, ": the file has ",
                                              index_->num_records(), " records"));
  }
  const uint64_t offset = index_->offsets[i];
  const uint64_t framed = index_->data_length(i) + kRecordOverheadBytes;
  buffer.resize(framed);
  ASSIGN_OR_RETURN(size_t got, file_->Read(offset, framed, buffer.data()));
  if (got != framed) return RecordReadError(*index_, i, *file_, got, absl::OkStatus());
  absl::StatusOr<absl::string_view> data = CheckRecord(buffer, index_->path, offset);
  if (!data.ok()) return RecordReadError(*index_, i, *file_, got, data.status());
  return data;
}

void IndexedRecordFile::WillRead(uint64_t i) const {
  if (i >= index_->num_records()) return;
  file_->WillRead(index_->offsets[i], index_->data_length(i) + kRecordOverheadBytes);
}

absl::Status RecordReadError(const RecordIndex& index, uint64_t i, const RandomAccessFile& file,
                             uint64_t got, absl::Status bad) {
  const uint64_t offset = index.offsets[i];
  const uint64_t framed = index.data_length(i) + kRecordOverheadBytes;
  if (got >= framed) {
    // All of it was read, and was bad: a file cut short reads as zeros past its new end through
    // a mapping, so only its size tells that from a corrupt record.
    absl::StatusOr<uint64_t> size = file.Size();
    if (!size.ok() || *size >= offset + framed) return bad;
    got = *size > offset ? *size - offset : 0;
  }
  return absl::DataLossError(absl::StrCat("record ", i, " at byte ", offset, " of ", index.path,
                                          " is cut short: the file ends ", got, " bytes into its ",
                                          framed, " bytes; the file changed since it was indexed"));
}

}  // namespace croupier
