// TFRecord files: reading and writing, byte-compatible with TensorFlow.
//
// A file is a sequence of records, each laid out as
//   uint64 length            little-endian, the number of data bytes
//   uint32 masked_crc(length bytes)
//   byte   data[length]
//   uint32 masked_crc(data)
// where masked_crc is CRC-32C, rotated right by 15 bits, plus 0xa282ead8 (docs/formats.md).
#ifndef CROUPIER_INCLUDE_CROUPIER_TFRECORD_H_
#define CROUPIER_INCLUDE_CROUPIER_TFRECORD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

class Env;
class RandomAccessFile;
class WritableFile;

inline constexpr size_t kRecordHeaderBytes = 12;  // length + its CRC
inline constexpr size_t kRecordFooterBytes = 4;   // CRC of the data
inline constexpr size_t kRecordOverheadBytes = kRecordHeaderBytes + kRecordFooterBytes;

struct RecordReaderOptions {
  // Bytes read from the file per system call. A record larger than this grows the buffer.
  size_t buffer_bytes = 4 << 20;
  // The data CRC is the expensive half of checking; the record index turns it off because reads
  // check it later anyway.
  bool verify_data_crc = true;
  Env* env = nullptr;  // nullptr: Env::Default()
};

// Reads a TFRecord file from start to end. Not thread-safe: one reader per thread.
class RecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path,
                                                            RecordReaderOptions options = {});
  // Reads a file opened already (options.env is not used).
  static std::unique_ptr<RecordReader> Open(std::unique_ptr<RandomAccessFile> file,
                                            RecordReaderOptions options = {});
  ~RecordReader();

  // Returns the next record's data, or nullopt at the clean end of the file. The view stays valid
  // until the next call. Errors: DATA_LOSS for a CRC mismatch, a length running past the end of
  // the file or a partial record at the end, naming the file and the record's byte offset. After
  // an error the reader stays failed.
  absl::StatusOr<std::optional<absl::string_view>> Next();

  // Byte offset of the record that Next() returned last.
  uint64_t record_offset() const { return record_offset_; }
  // Bytes consumed so far: the offset of the next record.
  uint64_t offset() const { return offset_; }
  const std::string& path() const;

 private:
  RecordReader(std::unique_ptr<RandomAccessFile> file, RecordReaderOptions options);
  // Makes at least `n` bytes from offset_ available in the buffer; returns how many are.
  absl::StatusOr<size_t> Fill(size_t n);

  std::unique_ptr<RandomAccessFile> file_;
  RecordReaderOptions options_;
  std::vector<char> buffer_;
  size_t begin_ = 0;  // buffer_[begin_, end_) holds the file's bytes from offset_ on
  size_t end_ = 0;
  uint64_t offset_ = 0;
  uint64_t record_offset_ = 0;
  bool eof_ = false;
  absl::Status failed_;
};

// Writes a TFRecord file. Thread-compatible.
class RecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Create(const std::string& path,
                                                              Env* env = nullptr);
  ~RecordWriter();  // closes, ignoring errors: call Close() to see them

  absl::Status Write(absl::string_view record);
  // Flushes and closes the file.
  absl::Status Close();
  // Bytes written so far, which is the offset of the next record.
  uint64_t offset() const { return offset_; }

 private:
  explicit RecordWriter(std::unique_ptr<WritableFile> file);
  absl::Status Flush();

  std::unique_ptr<WritableFile> file_;
  std::string pending_;
  uint64_t offset_ = 0;
};

// Checks one record's framing and CRCs, given the whole record's bytes (header, data, footer)
// read from `offset` of `file`, and returns a view of its data. Used by random access.
absl::StatusOr<absl::string_view> CheckRecord(absl::string_view framed, absl::string_view file,
                                             uint64_t offset);

}  // namespace croupier

#endif  // CROUPIER_INCLUDE_CROUPIER_TFRECORD_H_
