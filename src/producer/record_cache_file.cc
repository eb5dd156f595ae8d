#include "src/producer/record_cache_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/io/tfrecord_format.h"

namespace croupier::record_cache_file {
namespace {

using tfrecord::DecodeU32;
using tfrecord::DecodeU64;
using tfrecord::EncodeU32;
using tfrecord::EncodeU64;

constexpr uint8_t kFile = 1;
constexpr uint8_t kRecord = 2;

std::string Frame(uint8_t kind, absl::string_view meta, uint32_t data_len, uint32_t data_crc) {
  std::string out(kHeaderBytes + meta.size(), '\0');
  char* p = out.data();
  p[4] = static_cast<char>(kind);
  EncodeU32(p + 5, static_cast<uint32_t>(meta.size()));
  EncodeU32(p + 9, data_len);
  EncodeU32(p + 13, data_crc);
  std::memcpy(p + kHeaderBytes, meta.data(), meta.size());
  EncodeU32(p, crc32c::Value(p + 4, out.size() - 4));
  return out;
}

}  // namespace

std::string FileFrame(uint32_t local_id, absl::string_view identity) {
  std::string meta(4, '\0');
  EncodeU32(meta.data(), local_id);
  meta.append(identity.data(), identity.size());
  return Frame(kFile, meta, 0, 0);
}

std::string RecordHeader(uint32_t local_id, uint64_t record, uint32_t data_len,
                         uint32_t data_crc) {
  char meta[12];
  EncodeU32(meta, local_id);
  EncodeU64(meta + 4, record);
  return Frame(kRecord, absl::string_view(meta, sizeof(meta)), data_len, data_crc);
}

absl::StatusOr<Scanned> Scan(const RandomAccessFile& file, uint64_t size) {
  Scanned out;
  std::string buffer;
  uint64_t at = 0;
  auto stop = [&](absl::string_view why) {
    out.stopped = absl::StrCat(file.name(), ": ", why, " at byte ", at);
  };
  while (at < size) {
    if (size - at < kHeaderBytes) {
      stop("a frame cut short");
      break;
    }
    char header[kHeaderBytes];
    absl::StatusOr<size_t> got = file.Read(at, kHeaderBytes, header);
    if (!got.ok()) return got.status();
    if (*got != kHeaderBytes) {
      stop("a frame cut short");
      break;
    }
    const uint8_t kind = static_cast<uint8_t>(header[4]);
    const uint32_t meta_len = DecodeU32(header + 5);
    const uint32_t data_len = DecodeU32(header + 9);
    const uint32_t data_crc = DecodeU32(header + 13);
    const uint64_t left = size - at - kHeaderBytes;
    if (meta_len > kMaxMetaBytes || meta_len > left || data_len > left - meta_len) {
      stop("a frame cut short or a bad header");
      break;
    }
    buffer.resize(kHeaderBytes - 4 + meta_len);
    std::memcpy(buffer.data(), header + 4, kHeaderBytes - 4);
    got = file.Read(at + kHeaderBytes, meta_len, buffer.data() + kHeaderBytes - 4);
    if (!got.ok()) return got.status();
    if (*got != meta_len || crc32c::Value(buffer) != DecodeU32(header)) {
      stop("a frame that fails its checksum");
      break;
    }
    const char* meta = buffer.data() + kHeaderBytes - 4;
    // Only the frames FileFrame and RecordHeader write are kept: a file frame has no data, so
    // its data_len and data_crc are 0.
    if (kind == kFile && meta_len >= 4 && data_len == 0 && data_crc == 0) {
      out.files.push_back({DecodeU32(meta), std::string(meta + 4, meta_len - 4), at});
    } else if (kind == kRecord && meta_len == 12) {
      out.records.push_back({DecodeU32(meta), DecodeU64(meta + 4), at,
                             at + kHeaderBytes + meta_len, data_len, data_crc});
    } else {
      stop(absl::StrCat("a frame the writer does not write (kind ", kind, ", meta_len ", meta_len,
                        ", data_len ", data_len, ", data_crc ", data_crc, ")"));
      break;
    }
    at += kHeaderBytes + meta_len + data_len;
    out.good_bytes = at;
  }
  return out;
}

}  // namespace croupier::record_cache_file
