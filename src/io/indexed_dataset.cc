#include "src/io/indexed_dataset.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/crc32c.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

constexpr char kMegatronMagic[] = "MMIDIDX\0\0";
constexpr size_t kMegatronMagicSize = 9;
constexpr size_t kHeaderSize = kMegatronMagicSize + 8 + 1 + 8 + 8;

template <typename T>
T Load(absl::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

absl::string_view DTypeCodeName(uint8_t code) {
  switch (code) {
    case 1:
      return "uint8";
    case 2:
      return "int8";
    case 3:
      return "int16";
    case 4:
      return "int32";
    case 5:
      return "int64";
    case 6:
      return "float64";
    case 7:
      return "float32";
    case 8:
      return "uint16";
    default:
      return "unknown";
  }
}

}  // namespace

absl::string_view TokenDTypeName(TokenDType dtype) {
  return dtype == TokenDType::kUInt16 ? "uint16" : "int32";
}

size_t TokenDTypeSize(TokenDType dtype) { return dtype == TokenDType::kUInt16 ? 2 : 4; }

absl::StatusOr<TokenIndex> ParseTokenIndex(absl::string_view bytes, uint64_t bin_size,
                                           absl::string_view name) {
  auto loss = [&](uint64_t offset, absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name, " at byte ", offset, ": ", what));
  };
  if (bytes.size() < kHeaderSize) {
    return loss(bytes.size(), absl::StrCat("the index ends within its ", kHeaderSize,
                                           "-byte header (", bytes.size(), " bytes)"));
  }
  if (bytes.substr(0, kMegatronMagicSize) !=
      absl::string_view(kMegatronMagic, kMegatronMagicSize)) {
    return loss(0, "not a Megatron indexed dataset's index (no MMIDIDX magic)");
  }
  const uint64_t version = Load<uint64_t>(bytes, kMegatronMagicSize);
  if (version != 1) {
    return loss(kMegatronMagicSize, absl::StrCat("index version ", version, ", not 1"));
  }
  const uint8_t code = Load<uint8_t>(bytes, kMegatronMagicSize + 8);
  TokenIndex index;
  if (code == static_cast<uint8_t>(TokenDType::kUInt16)) {
    index.dtype = TokenDType::kUInt16;
  } else if (code == static_cast<uint8_t>(TokenDType::kInt32)) {
    index.dtype = TokenDType::kInt32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(name, ": tokens of dtype code ", int{code}, " (",
                                                   DTypeCodeName(code),
                                                   "); token ids are uint16 (8) or int32 (4)"));
  }
  const uint64_t sequences = Load<uint64_t>(bytes, kMegatronMagicSize + 9);
  const uint64_t documents = Load<uint64_t>(bytes, kMegatronMagicSize + 17);
  // The arrays' size, checked before it is computed in full (a count near 2^64 must not wrap).
  const uint64_t most = std::numeric_limits<uint64_t>::max() / 32;
  if (sequences > most || documents > most) {
    return loss(kMegatronMagicSize + 9, absl::StrCat("counts of ", sequences, " sequences and ",
                                                     documents, " documents cannot fit any file"));
  }
  const uint64_t lengths_at = kHeaderSize;
  const uint64_t pointers_at = lengths_at + 4 * sequences;
  const uint64_t boundaries_at = pointers_at + 8 * sequences;
  const uint64_t end = boundaries_at + 8 * documents;
  if (bytes.size() != end && bytes.size() != end + sequences) {
    return loss(
        std::min<uint64_t>(bytes.size(), end),
        absl::StrCat("the index is ", bytes.size(), " bytes; ", sequences, " sequences and ",
                     documents, " documents take ", end, " (or ", end + sequences, " with modes)"));
  }
  const size_t size = TokenDTypeSize(index.dtype);
  index.lengths.resize(sequences);
  index.pointers.resize(sequences);
  for (uint64_t s = 0; s < sequences; ++s) {
    const int32_t length = Load<int32_t>(bytes, lengths_at + 4 * s);
    const int64_t pointer = Load<int64_t>(bytes, pointers_at + 8 * s);
    if (length < 0) {
      return loss(lengths_at + 4 * s, absl::StrCat("document ", s, " has length ", length));
    }
    if (pointer < 0 || static_cast<uint64_t>(pointer) > bin_size ||
        static_cast<uint64_t>(length) * size > bin_size - static_cast<uint64_t>(pointer)) {
      return loss(pointers_at + 8 * s,
                  absl::StrCat("document ", s, " (", length, " tokens at byte ", pointer,
                               ") lies past the end of the .bin (", bin_size, " bytes)"));
    }
    index.lengths[s] = static_cast<uint32_t>(length);
    index.pointers[s] = static_cast<uint64_t>(pointer);
  }
  int64_t previous = 0;
  for (uint64_t d = 0; d < documents; ++d) {
    const int64_t boundary = Load<int64_t>(bytes, boundaries_at + 8 * d);
    if (boundary < previous || static_cast<uint64_t>(boundary) > sequences) {
      return loss(boundaries_at + 8 * d,
                  absl::StrCat("document boundary ", d, " is ", boundary, ", not in [", previous,
                               ", ", sequences, "]"));
    }
    previous = boundary;
  }
  return index;
}

std::string EncodeTokenIndex(const TokenIndex& index) {
  std::string out(kMegatronMagic, kMegatronMagicSize);
  Put<uint64_t>(out, 1);
  Put<uint8_t>(out, static_cast<uint8_t>(index.dtype));
  Put<uint64_t>(out, index.lengths.size());
  Put<uint64_t>(out, index.lengths.size() + 1);  // a boundary before each document, and the end
  for (uint32_t v : index.lengths) Put<int32_t>(out, static_cast<int32_t>(v));
  for (uint64_t v : index.pointers) Put<int64_t>(out, static_cast<int64_t>(v));
  for (uint64_t d = 0; d <= index.lengths.size(); ++d) Put<int64_t>(out, static_cast<int64_t>(d));
  return out;
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(const std::string& prefix,
                                                                     Env* env) {
  if (env == nullptr) env = Env::Default();
  const std::string idx = prefix + ".idx", bin_path = prefix + ".bin";
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> bin, env->OpenForRandomRead(bin_path));
  ASSIGN_OR_RETURN(uint64_t bin_size, bin->Size());
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(*env, idx));
  ASSIGN_OR_RETURN(TokenIndex index, ParseTokenIndex(bytes, bin_size, idx));
  IndexedDatasetFingerprint fingerprint{bytes.size(), bin_size, crc32c::Value(bytes)};
  return std::unique_ptr<IndexedDataset>(
      new IndexedDataset(prefix, std::move(index), std::move(bin), fingerprint));
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::OpenLengths(
    const std::string& prefix, Env* env) {
  if (env == nullptr) env = Env::Default();
  const std::string idx = prefix + ".idx";
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(*env, idx));
  // No .bin bounds the pointers: only the lengths are used.
  ASSIGN_OR_RETURN(TokenIndex index,
                   ParseTokenIndex(bytes, std::numeric_limits<uint64_t>::max(), idx));
  IndexedDatasetFingerprint fingerprint{bytes.size(), 0, crc32c::Value(bytes)};
  return std::unique_ptr<IndexedDataset>(
      new IndexedDataset(prefix, std::move(index), nullptr, fingerprint));
}

namespace {
uint64_t Sum(const std::vector<uint32_t>& lengths) {
  uint64_t total = 0;
  for (uint32_t n : lengths) total += n;
  return total;
}
}  // namespace

IndexedDataset::IndexedDataset(std::string prefix, TokenIndex index,
                               std::unique_ptr<RandomAccessFile> bin,
                               IndexedDatasetFingerprint fingerprint)
    : prefix_(std::move(prefix)),
      index_(std::move(index)),
      fingerprint_(fingerprint),
      num_tokens_(Sum(index_.lengths)),
      bin_(std::move(bin)) {}

absl::Status IndexedDataset::CheckRange(uint64_t document, uint32_t offset, size_t count) const {
  if (document >= index_.lengths.size() || offset > index_.lengths[document] ||
      count > index_.lengths[document] - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        prefix_, ": tokens [", offset, ", ", offset + count, ") of document ", document,
        document < index_.lengths.size() ? absl::StrCat(", which has ", index_.lengths[document])
                                         : absl::StrCat(" of ", index_.lengths.size())));
  }
  if (count > 0 && bin_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        prefix_, ".idx is a text source's lengths: its tokens are made by tokenizing its text"));
  }
  return absl::OkStatus();
}

absl::Status IndexedDataset::ReadMany(absl::Span<const TokenRange> ranges) const {
  const size_t size = TokenDTypeSize(index_.dtype);
  std::vector<RandomAccessFile::Range> reads;
  reads.reserve(ranges.size());
  // uint16 tokens land in a buffer of their own first, and are widened into `out` after.
  size_t staged = 0;
  for (const TokenRange& r : ranges) {
    RETURN_IF_ERROR(CheckRange(r.document, r.offset, r.out.size()));
    if (index_.dtype != TokenDType::kInt32) staged += r.out.size();
  }
  std::vector<uint16_t> stage(staged);
  size_t next = 0;
  for (const TokenRange& r : ranges) {
    if (r.out.empty()) continue;
    RandomAccessFile::Range read;
    read.offset = index_.pointers[r.document] + uint64_t{r.offset} * size;
    read.length = r.out.size() * size;
    if (index_.dtype == TokenDType::kInt32) {
      read.dst = reinterpret_cast<char*>(r.out.data());
    } else {
      read.dst = reinterpret_cast<char*>(stage.data() + next);
      next += r.out.size();
    }
    reads.push_back(read);
  }
  if (reads.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(bin_->ReadRanges(absl::MakeSpan(reads)));
  size_t k = 0;
  next = 0;
  for (const TokenRange& r : ranges) {
    if (r.out.empty()) continue;
    const RandomAccessFile::Range& read = reads[k++];
    if (read.got != read.length) {
      return absl::DataLossError(absl::StrCat(bin_->name(), " at byte ", read.offset + read.got,
                                              ": the file ends within document ", r.document));
    }
    if (index_.dtype != TokenDType::kInt32) {
      const uint16_t* from = stage.data() + next;
      int32_t* to = r.out.data();
      for (size_t t = 0; t < r.out.size(); ++t) to[t] = from[t];
      next += r.out.size();
    }
  }
  return absl::OkStatus();
}

absl::Status IndexedDataset::Read(uint64_t document, uint32_t offset,
                                  absl::Span<int32_t> out) const {
  RETURN_IF_ERROR(CheckRange(document, offset, out.size()));
  if (out.empty()) return absl::OkStatus();  // nothing to read (an empty span may be null)
  const size_t size = TokenDTypeSize(index_.dtype);
  const uint64_t at = index_.pointers[document] + uint64_t{offset} * size;
  const size_t bytes = out.size() * size;
  if (index_.dtype == TokenDType::kInt32) {
    ASSIGN_OR_RETURN(size_t got, bin_->Read(at, bytes, reinterpret_cast<char*>(out.data())));
    if (got != bytes) {
      return absl::DataLossError(absl::StrCat(bin_->name(), " at byte ", at + got,
                                              ": the file ends within document ", document));
    }
    return absl::OkStatus();
  }
  // uint16: read a chunk at a time into a buffer of its own, then widen it into `out` (two
  // distinct arrays, so that the widening runs on vector lanes).
  constexpr size_t kChunk = 4096;
  uint16_t chunk[kChunk];
  for (size_t done = 0; done < out.size();) {
    const size_t n = std::min(kChunk, out.size() - done);
    const uint64_t from = at + done * 2;
    ASSIGN_OR_RETURN(size_t got, bin_->Read(from, n * 2, reinterpret_cast<char*>(chunk)));
    if (got != n * 2) {
      return absl::DataLossError(absl::StrCat(bin_->name(), " at byte ", from + got,
                                              ": the file ends within document ", document));
    }
    int32_t* dst = out.data() + done;
    for (size_t t = 0; t < n; ++t) dst[t] = chunk[t];
    done += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    const std::string& prefix, TokenDType dtype, Env* env) {
  if (env == nullptr) env = Env::Default();
  // An old index beside a new .bin would describe other documents: empty it first.
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> old_index, env->OpenForWrite(prefix + ".idx"));
  RETURN_IF_ERROR(old_index->Close());
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> bin, env->OpenForWrite(prefix + ".bin"));
  return std::unique_ptr<IndexedDatasetWriter>(
      new IndexedDatasetWriter(prefix, dtype, env, std::move(bin)));
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype, Env* env,
                                           std::unique_ptr<WritableFile> bin)
    : prefix_(std::move(prefix)), env_(env), bin_(std::move(bin)) {
  index_.dtype = dtype;
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

absl::Status IndexedDatasetWriter::Add(absl::Span<const int32_t> document) {
  if (finished_) return absl::FailedPreconditionError(prefix_ + ": the dataset is finished");
  const uint64_t d = index_.lengths.size();
  if (document.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::OutOfRangeError(absl::StrCat("document ", d, " has ", document.size(),
                                              " tokens; an index holds at most 2^31 - 1"));
  }
  buffer_.clear();
  for (size_t t = 0; t < document.size(); ++t) {
    const int32_t v = document[t];
    if (index_.dtype == TokenDType::kUInt16) {
      if (v < 0 || v > 0xFFFF) {
        return absl::InvalidArgumentError(
            absl::StrCat("document ", d, " token ", t, " is ", v, ", which uint16 cannot hold"));
      }
      Put<uint16_t>(buffer_, static_cast<uint16_t>(v));
    } else {
      Put<int32_t>(buffer_, v);
    }
  }
  RETURN_IF_ERROR(bin_->Append(buffer_));
  index_.lengths.push_back(static_cast<uint32_t>(document.size()));
  index_.pointers.push_back(bin_bytes_);
  bin_bytes_ += buffer_.size();
  tokens_ += document.size();
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError(prefix_ + ": the dataset is finished");
  finished_ = true;
  RETURN_IF_ERROR(bin_->Sync());
  RETURN_IF_ERROR(bin_->Close());
  return env_->WriteFileAtomically(prefix_ + ".idx", EncodeTokenIndex(index_));
}

absl::Status WriteIndexedDataset(const std::string& prefix, TokenDType dtype,
                                 const std::vector<std::vector<int32_t>>& documents, Env* env) {
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> writer,
                   IndexedDatasetWriter::Create(prefix, dtype, env));
  for (const std::vector<int32_t>& document : documents) RETURN_IF_ERROR(writer->Add(document));
  return writer->Finish();
}

}  // namespace croupier
