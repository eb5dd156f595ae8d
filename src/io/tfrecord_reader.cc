#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "croupier/tfrecord.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/io/tfrecord_format.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path,
                                                                 RecordReaderOptions options) {
  Env* env = options.env ? options.env : Env::Default();
  ASSIGN_OR_RETURN(auto file, env->OpenForRead(path));
  return Open(std::move(file), options);
}

std::unique_ptr<RecordReader> RecordReader::Open(std::unique_ptr<RandomAccessFile> file,
                                                 RecordReaderOptions options) {
  options.buffer_bytes = std::max<size_t>(options.buffer_bytes, 4096);
  return std::unique_ptr<RecordReader>(new RecordReader(std::move(file), options));
}

RecordReader::RecordReader(std::unique_ptr<RandomAccessFile> file, RecordReaderOptions options)
    : file_(std::move(file)), options_(options), buffer_(options.buffer_bytes) {}

RecordReader::~RecordReader() = default;

const std::string& RecordReader::path() const { return file_->name(); }

absl::StatusOr<size_t> RecordReader::Fill(size_t n) {
  size_t have = end_ - begin_;
  if (have >= n || eof_) return have;
  // Slide what is left (less than one record) to the front.
  std::memmove(buffer_.data(), buffer_.data() + begin_, have);
  begin_ = 0;
  end_ = have;
  while (end_ < n && !eof_) {
    // Grow only for a record larger than the buffer, and only as its bytes arrive: `n` comes
    // from a length field that a corrupt file can set to terabytes, so memory follows the file.
    if (end_ == buffer_.size()) buffer_.resize(std::min(n, buffer_.size() * 2));
    ASSIGN_OR_RETURN(size_t got,
                     file_->Read(offset_ + end_, buffer_.size() - end_, buffer_.data() + end_));
    if (got == 0) eof_ = true;
    end_ += got;
  }
  return end_ - begin_;
}

absl::StatusOr<std::optional<absl::string_view>> RecordReader::Next() {
  if (!failed_.ok()) return failed_;
  auto fail = [&](absl::Status s) {
    failed_ = s;
    return s;
  };
  const std::string& name = file_->name();
  ASSIGN_OR_RETURN(size_t have, Fill(kRecordHeaderBytes));
  if (have == 0) return std::optional<absl::string_view>();
  if (have < kRecordHeaderBytes) {
    return fail(absl::DataLossError(absl::StrCat(
        "truncated record at byte ", offset_, " of ", name, ": the file ends ", have,
        " bytes into the ", kRecordHeaderBytes, "-byte record header")));
  }
  const char* header = buffer_.data() + begin_;
  if (!tfrecord::HeaderCrcMatches(header)) {
    return fail(absl::DataLossError(absl::StrCat(
        "corrupt record length at byte ", offset_, " of ", name, ": its checksum does not match",
        offset_ == 0 ? " (is this a TFRecord file?)" : "")));
  }
  const uint64_t length = tfrecord::DecodeU64(header);
  const uint64_t framed = length + kRecordOverheadBytes;
  if (length > (uint64_t{1} << 46)) {  // well past any file; keeps the arithmetic below exact
    return fail(absl::DataLossError(absl::StrCat("corrupt record length ", length, " at byte ",
                                                 offset_, " of ", name)));
  }
  ASSIGN_OR_RETURN(have, Fill(framed));
  if (have < framed) {
    return fail(absl::DataLossError(absl::StrCat(
        "truncated record at byte ", offset_, " of ", name, ": the header says ", length,
        " data bytes, but the file ends after ", have, " of the record's ", framed, " bytes")));
  }
  const char* data = buffer_.data() + begin_ + kRecordHeaderBytes;
  if (options_.verify_data_crc) {
    uint32_t expected = crc32c::Unmask(tfrecord::DecodeU32(data + length));
    if (crc32c::Value(data, length) != expected) {
      return fail(absl::DataLossError(absl::StrCat("corrupt record data at byte ", offset_, " of ",
                                                    name, ": the data checksum does not match (",
                                                    length, " data bytes)")));
    }
  }
  record_offset_ = offset_;
  offset_ += framed;
  begin_ += framed;
  return std::optional<absl::string_view>(absl::string_view(data, length));
}

absl::StatusOr<absl::string_view> CheckRecord(absl::string_view framed, absl::string_view file,
                                             uint64_t offset) {
  if (framed.size() < kRecordOverheadBytes) {
    return absl::DataLossError(
        absl::StrCat("truncated record at byte ", offset, " of ", file, ": only ", framed.size(),
                     " bytes could be read"));
  }
  if (!tfrecord::HeaderCrcMatches(framed.data())) {
    return absl::DataLossError(absl::StrCat("corrupt record length at byte ", offset, " of ", file,
                                            ": its checksum does not match"));
  }
  uint64_t length = tfrecord::DecodeU64(framed.data());
  if (length != framed.size() - kRecordOverheadBytes) {
    return absl::DataLossError(absl::StrCat(
        "record at byte ", offset, " of ", file, " holds ", length,
        " data bytes where its index says ", framed.size() - kRecordOverheadBytes,
        ": the file changed since it was indexed"));
  }
  const char* data = framed.data() + kRecordHeaderBytes;
  if (crc32c::Value(data, length) != crc32c::Unmask(tfrecord::DecodeU32(data + length))) {
    return absl::DataLossError(absl::StrCat("corrupt record data at byte ", offset, " of ", file,
                                            ": the data checksum does not match"));
  }
  return absl::string_view(data, length);
}

}  // namespace croupier
