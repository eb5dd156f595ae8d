#include "src/common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace croupier::crc32c {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // Castagnoli, reflected.

// tables[k][b]: the CRC state after byte b followed by k zero bytes (slice-by-8).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  constexpr Tables() : t() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][b] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
  }
};
constexpr Tables kTables;

inline uint64_t LoadLE64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // x86-64 and aarch64 Linux are little-endian; the build checks.
}

// Raw state update (no pre/post inversion) for the portable path.
uint32_t RawPortable(uint32_t s, const char* p, size_t n) {
  const auto& t = kTables.t;
  while (n >= 8) {
    uint64_t v = LoadLE64(p) ^ s;
    s = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
        t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^
        t[0][(v >> 56)];
    p += 8;
    n -= 8;
  }
  while (n--) s = (s >> 8) ^ t[0][(s ^ static_cast<uint8_t>(*p++)) & 0xff];
  return s;
}

#if defined(__x86_64__)
// Shifting a raw CRC state over `len` zero bytes is linear in the state, so it is four table
// look-ups once the images of every byte of the state are known. Used to combine the three
// independent streams of the hardware path.
struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> t;
  explicit ZeroShift(size_t len) {
    std::array<uint32_t, 32> basis;
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t s = 1u << bit;
      for (size_t i = 0; i < len; ++i) s = (s >> 8) ^ kTables.t[0][s & 0xff];
      basis[bit] = s;
    }
    for (int byte = 0; byte < 4; ++byte) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (v & (1u << bit)) r ^= basis[byte * 8 + bit];
        }
        t[byte][v] = r;
      }
    }
  }
  uint32_t operator()(uint32_t s) const {
    return t[0][s & 0xff] ^ t[1][(s >> 8) & 0xff] ^ t[2][(s >> 16) & 0xff] ^ t[3][s >> 24];
  }
};

// Stream lengths for the interleaved path: long runs amortize the combine, shorter ones give
// records of a few hundred bytes three-way parallelism too, leaving a single-stream tail of
// less than 192 bytes.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;
constexpr size_t kTiny = 64;

__attribute__((target("sse4.2"))) uint32_t RawHw1(uint32_t s, const char* p, size_t n) {
  uint64_t s64 = s;
  while (n >= 8) {
    s64 = _mm_crc32_u64(s64, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  s = static_cast<uint32_t>(s64);
  while (n--) s = _mm_crc32_u8(s, static_cast<uint8_t>(*p++));
  return s;
}

// Three streams of `block` bytes each, run side by side to hide the instruction's latency, then
// combined: state(A||B||C) = shift(state(A), 2*block) ^ shift(state0(B), block) ^ state0(C).
__attribute__((target("sse4.2"))) uint32_t RawHw3(uint32_t s, const char*& p, size_t& n,
                                                    size_t block, const ZeroShift& one,
                                                    const ZeroShift& two) {
  while (n >= 3 * block) {
    uint64_t a = s, b = 0, c = 0;
    const char* pa = p;
    const char* pb = p + block;
    const char* pc = p + 2 * block;
    for (size_t i = 0; i < block; i += 8) {
      a = _mm_crc32_u64(a, LoadLE64(pa + i));
      b = _mm_crc32_u64(b, LoadLE64(pb + i));
      c = _mm_crc32_u64(c, LoadLE64(pc + i));
    }
    s = two(static_cast<uint32_t>(a)) ^ one(static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(c);
    p += 3 * block;
    n -= 3 * block;
  }
  return s;
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const char* data, size_t n) {
  return ~RawPortable(~crc, data, n);
}

#if defined(__x86_64__)
bool HasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n) {
  uint32_t s = ~crc;
  // Short inputs (record headers, small records) skip the interleaved path and its set-up.
  if (n >= 3 * kTiny) {
    static const ZeroShift long1(kLong), long2(2 * kLong), short1(kShort), short2(2 * kShort),
        tiny1(kTiny), tiny2(2 * kTiny);
    s = RawHw3(s, data, n, kLong, long1, long2);
    s = RawHw3(s, data, n, kShort, short1, short2);
    s = RawHw3(s, data, n, kTiny, tiny1, tiny2);
  }
  return ~RawHw1(s, data, n);
}
#else
bool HasHardware() { return false; }
uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n) {
  return ExtendPortable(crc, data, n);
}
#endif

uint32_t Extend(uint32_t crc, const char* data, size_t n) {
  return HasHardware() ? ExtendHardware(crc, data, n) : ExtendPortable(crc, data, n);
}

}  // namespace croupier::crc32c
