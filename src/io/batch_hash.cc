// ContentHash: a portable 64-bit hash of bytes, written for this project (docs/formats.md states
// the algorithm so that other languages can reproduce it).
//
// Four independent lanes take 32 bytes per step so that multiplications overlap in the CPU; a
// lane step xors in a word, multiplies by an odd constant and folds the high bits down, each a
// bijection, so one differing word always changes its lane.
#include <cstdint>

#include "croupier/batch.h"

namespace croupier {
namespace {

constexpr uint64_t kK1 = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio, odd
constexpr uint64_t kK2 = 0xD6E8FEB86659FD93ull;
constexpr uint64_t kK3 = 0xA0761D6478BD642Full;

// Little-endian whatever the host; compilers turn this into one load.
inline uint64_t Load64(const unsigned char* p, size_t n = 8) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

inline uint64_t Lane(uint64_t acc, uint64_t word) {
  acc = (acc ^ word) * kK1;
  return acc ^ (acc >> 31);
}

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 32;
  x *= kK2;
  x ^= x >> 29;
  x *= kK3;
  return x ^ (x >> 32);
}

}  // namespace

uint64_t ContentHash(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  uint64_t v0 = kK3, v1 = kK3 + kK1, v2 = kK3 + 2 * kK1, v3 = kK3 + 3 * kK1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    v0 = Lane(v0, Load64(p + i));
    v1 = Lane(v1, Load64(p + i + 8));
    v2 = Lane(v2, Load64(p + i + 16));
    v3 = Lane(v3, Load64(p + i + 24));
  }
  uint64_t h = Mix(uint64_t{n} * kK1 ^ kK2);
  h = Mix(h ^ v0);
  h = Mix(h ^ v1);
  h = Mix(h ^ v2);
  h = Mix(h ^ v3);
  for (; i + 8 <= n; i += 8) h = Mix(h ^ Load64(p + i));
  if (i < n) h = Mix(h ^ Load64(p + i, n - i));
  return h;
}

}  // namespace croupier
