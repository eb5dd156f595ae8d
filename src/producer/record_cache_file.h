// The on-disk form of the producer's record cache (record_cache.h, directory mode): one file per
// shard, a sequence of frames, each checked by a CRC-32C of its header. A frame names a source file
// (its identity: path, size, modification time) by a number local to the shard, or holds one
// record's bytes under such a number and its record index:
//
//   u32 header_crc   CRC-32C of every byte after it up to the end of `meta`
//   u8  kind         1: a source file, 2: a record
//   u32 meta_len
//   u32 data_len     0 for a source file
//   u32 data_crc     CRC-32C of the data (checked when the record is read back)
//   meta             a source file: u32 local id, then its identity; a record: u32 local id, u64
//                    record index
//   data             a record's bytes
//
// Integers are little-endian. A kept cache (RecordCache::Options::keep) is scanned when a
// producer starts again: the frames up to the first one that is cut short or fails its check are
// the cache's, and the file is cut there, so that a producer killed in the middle of a write
// leaves a cache that the next one reads.
#ifndef CROUPIER_SRC_PRODUCER_RECORD_CACHE_FILE_H_
#define CROUPIER_SRC_PRODUCER_RECORD_CACHE_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

class RandomAccessFile;

namespace record_cache_file {

inline constexpr size_t kHeaderBytes = 17;
// A source file's identity longer than this is not cached (no path is this long).
inline constexpr size_t kMaxMetaBytes = 64 << 10;

// The frame that names source file `identity` as `local_id` in its shard's file.
std::string FileFrame(uint32_t local_id, absl::string_view identity);
// The header and meta of a record frame; the record's `data_len` bytes follow it in the file.
std::string RecordHeader(uint32_t local_id, uint64_t record, uint32_t data_len, uint32_t data_crc);

// What a shard's file holds, up to its first bad frame.
struct Scanned {
  struct File {
    uint32_t local_id;
    std::string identity;
    uint64_t frame_offset;
  };
  struct Record {
    uint32_t local_id;
    uint64_t record;
    uint64_t frame_offset;  // where its frame starts
    uint64_t data_offset;   // where its bytes start
    uint32_t size;
    uint32_t crc;
  };
  std::vector<File> files;
  std::vector<Record> records;  // in file order
  uint64_t good_bytes = 0;      // the length of the good frames
  std::string stopped;          // why the scan stopped before `size` (empty: it did not)
};

// Scans the first `size` bytes of `file`. Errors only for a read that fails; a frame cut short or
// failing its check ends the scan (Scanned::stopped says which, with its byte offset).
absl::StatusOr<Scanned> Scan(const RandomAccessFile& file, uint64_t size);

}  // namespace record_cache_file
}  // namespace croupier

#endif  // CROUPIER_SRC_PRODUCER_RECORD_CACHE_FILE_H_
