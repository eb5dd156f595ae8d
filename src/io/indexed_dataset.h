// Megatron-LM's indexed dataset of token documents: PREFIX.idx, the index, and PREFIX.bin, the
// tokens (docs/protocol.md §7.5). The index is, little-endian:
//
//   "MMIDIDX\0\0"                 9 bytes
//   version                       uint64, 1
//   dtype code                    uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//                                 7 float32, 8 uint16 (tokens are uint16 or int32 here)
//   sequence count S              uint64
//   document count D              uint64
//   lengths                       int32[S], tokens per sequence
//   pointers                      int64[S], the byte offset of each sequence in the .bin
//   document boundaries           int64[D], over the sequences
//   (modes                        int8[S], multimodal datasets only; ignored)
//
// croupier's document is the index's sequence entry, as Megatron's GPT dataset reads it; the
// document boundaries are checked and not used.
#ifndef CROUPIER_SRC_IO_INDEXED_DATASET_H_
#define CROUPIER_SRC_IO_INDEXED_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/common/env.h"

namespace croupier {

enum class TokenDType : uint8_t { kUInt16 = 8, kInt32 = 4 };
absl::string_view TokenDTypeName(TokenDType dtype);  // "uint16", "int32"
size_t TokenDTypeSize(TokenDType dtype);

// A parsed index: one entry per document.
struct TokenIndex {
  TokenDType dtype = TokenDType::kInt32;
  std::vector<uint32_t> lengths;   // tokens
  std::vector<uint64_t> pointers;  // bytes into the .bin
};

// Parses the bytes of an index. `bin_size` is the .bin's size: every document must lie inside
// it. DATA_LOSS naming `name` and the byte offset for a bad magic, a version other than 1, a
// truncated or oversized file, a negative length, or a document past the .bin's end;
// INVALID_ARGUMENT naming the dtype for a dtype that is not token ids (uint16, int32).
absl::StatusOr<TokenIndex> ParseTokenIndex(absl::string_view bytes, uint64_t bin_size,
                                           absl::string_view name);

// The encoded index of `index` (a writer's half; tests and croupier tokenize).
std::string EncodeTokenIndex(const TokenIndex& index);

// What identifies a dataset's files cheaply: a tokens job keeps it (JobInfo.token_sources), and a
// producer whose files differ refuses the job. The .idx holds every length and pointer, so its
// checksum covers the plan; the .bin is identified by its size.
struct IndexedDatasetFingerprint {
  uint64_t idx_bytes = 0;
  uint64_t bin_bytes = 0;
  uint32_t idx_crc32c = 0;  // CRC-32C of the whole .idx
  bool operator==(const IndexedDatasetFingerprint&) const = default;
};

// An open dataset. Thread-safe: immutable after Open.
class IndexedDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin through `env` (nullptr: Env::Default()). The file errors
  // name the file (NOT_FOUND for a missing one); ParseTokenIndex's otherwise.
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> Open(const std::string& prefix,
                                                              Env* env = nullptr);
  // Opens PREFIX.idx alone: the lengths of a text source's documents (TokenSpec.text), whose
  // tokens its producers make by tokenizing. Such a dataset has lengths and no tokens: Read is
  // FAILED_PRECONDITION, and its fingerprint's bin_bytes is 0.
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> OpenLengths(const std::string& prefix,
                                                                     Env* env = nullptr);

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return index_.dtype; }
  uint64_t num_documents() const { return index_.lengths.size(); }
  absl::Span<const uint32_t> lengths() const { return index_.lengths; }
  uint64_t num_tokens() const { return num_tokens_; }
  const IndexedDatasetFingerprint& fingerprint() const { return fingerprint_; }

  bool has_tokens() const { return bin_ != nullptr; }  // false: opened by OpenLengths

  // Tokens [offset, offset + out.size()) of document `document`, as int32. OUT_OF_RANGE for a
  // range past the document's end; DATA_LOSS naming the .bin and the byte offset for a file
  // that no longer holds them (cut short since it was opened); FAILED_PRECONDITION for a
  // lengths index.
  absl::Status Read(uint64_t document, uint32_t offset, absl::Span<int32_t> out) const;

  // Whether the tokens are read from another machine (an object store), each Read a request: a
  // reader that knows the tokens it needs asks for them together, with ReadMany.
  bool remote() const { return bin_ != nullptr && bin_->remote(); }
  // One range of ReadMany: tokens [offset, offset + out.size()) of `document`.
  struct TokenRange {
    uint64_t document = 0;
    uint32_t offset = 0;
    absl::Span<int32_t> out;
  };
  // Reads every range with one ReadRanges call on the .bin (which an object store's file merges
  // into few requests run at once). Errors as Read's, for the first bad range.
  absl::Status ReadMany(absl::Span<const TokenRange> ranges) const;

 private:
  IndexedDataset(std::string prefix, TokenIndex index, std::unique_ptr<RandomAccessFile> bin,
                 IndexedDatasetFingerprint fingerprint);
  // OUT_OF_RANGE or FAILED_PRECONDITION, as Read's, for a range Read would refuse.
  absl::Status CheckRange(uint64_t document, uint32_t offset, size_t count) const;

  const std::string prefix_;
  const TokenIndex index_;
  const IndexedDatasetFingerprint fingerprint_;
  const uint64_t num_tokens_;
  const std::unique_ptr<RandomAccessFile> bin_;
};

// Writes an indexed dataset a document at a time, so a corpus of any size can be converted
// (croupier tokenize): the .bin as documents come, the .idx at Finish. Create empties PREFIX.idx
// first, so until Finish succeeds the pair is refused by IndexedDataset::Open (a truncated
// index), never read as a dataset of other documents. Thread-compatible.
class IndexedDatasetWriter {
 public:
  // Errors name the file that cannot be written.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix,
                                                                      TokenDType dtype,
                                                                      Env* env = nullptr);
  ~IndexedDatasetWriter();

  // Appends one document. INVALID_ARGUMENT for a token the dtype cannot hold, naming the
  // document and position (nothing of it is written); OUT_OF_RANGE for a document of 2^31 tokens
  // or more; the file's errors.
  absl::Status Add(absl::Span<const int32_t> document);
  // Flushes the .bin and writes the .idx (atomically). Once only; Add fails after it.
  absl::Status Finish();

  uint64_t num_documents() const { return index_.lengths.size(); }
  uint64_t num_tokens() const { return tokens_; }

 private:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype, Env* env,
                       std::unique_ptr<WritableFile> bin);
  const std::string prefix_;
  Env* const env_;
  std::unique_ptr<WritableFile> bin_;
  TokenIndex index_;
  uint64_t bin_bytes_ = 0;
  uint64_t tokens_ = 0;
  std::string buffer_;  // one document's bytes
  bool finished_ = false;
};

// Writes PREFIX.bin and PREFIX.idx with `documents` as tokens of `dtype` (one document per
// sequence entry, each its own document boundary, as Megatron's preprocessing writes them).
// INVALID_ARGUMENT for a token that does not fit the dtype, naming the document and position.
absl::Status WriteIndexedDataset(const std::string& prefix, TokenDType dtype,
                                 const std::vector<std::vector<int32_t>>& documents,
                                 Env* env = nullptr);

}  // namespace croupier

#endif  // CROUPIER_SRC_IO_INDEXED_DATASET_H_
