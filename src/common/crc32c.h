// CRC-32C (Castagnoli), the checksum of the TFRecord format.
//
// Debian 12 ships no C++ CRC-32C library and abseil 20220623 predates absl::crc, so this is ours:
// the SSE4.2 instruction with three interleaved streams where the CPU has it, and a portable
// slice-by-8 table otherwise. Both give identical results; tests compare them.
#ifndef CROUPIER_SRC_COMMON_CRC32C_H_
#define CROUPIER_SRC_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace croupier::crc32c {

// Returns the CRC-32C of `data` appended to data whose CRC-32C was `crc` (0 for a fresh start).
uint32_t Extend(uint32_t crc, const char* data, size_t n);
inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(absl::string_view s) { return Extend(0, s.data(), s.size()); }

// TFRecord stores checksums masked, because a CRC of data that itself contains CRCs is weak.
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

// The implementations, exposed for tests and benchmarks. ExtendHardware must only be called when
// HasHardware() is true.
uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n);
uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n);
bool HasHardware();

}  // namespace croupier::crc32c

#endif  // CROUPIER_SRC_COMMON_CRC32C_H_
