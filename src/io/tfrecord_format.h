// Encoding of the 12-byte TFRecord header and 4-byte footer, shared by the reader, the writer and
// random access. docs/formats.md describes the layout.
#ifndef CROUPIER_SRC_IO_TFRECORD_FORMAT_H_
#define CROUPIER_SRC_IO_TFRECORD_FORMAT_H_

#include <bit>
#include <cstdint>
#include <cstring>

#include "croupier/tfrecord.h"
#include "src/common/crc32c.h"

namespace croupier::tfrecord {

// The format is little-endian and so are the targets we build for; memcpy is the decoding.
static_assert(std::endian::native == std::endian::little, "croupier assumes a little-endian CPU");

inline uint64_t DecodeU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t DecodeU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void EncodeU64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline void EncodeU32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }

inline void EncodeHeader(char* header, uint64_t length) {
  EncodeU64(header, length);
  EncodeU32(header + 8, crc32c::Mask(crc32c::Value(header, 8)));
}
inline bool HeaderCrcMatches(const char* header) {
  return crc32c::Unmask(DecodeU32(header + 8)) == crc32c::Value(header, 8);
}

}  // namespace croupier::tfrecord

#endif  // CROUPIER_SRC_IO_TFRECORD_FORMAT_H_
