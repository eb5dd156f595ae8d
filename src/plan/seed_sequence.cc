#include "src/plan/seed_sequence.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/container/inlined_vector.h"

namespace croupier::plan {
namespace {

// numpy's constants (bit_generator.pyx), after Melissa O'Neill's seed_seq_fe.
constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr int kShift = 16;
constexpr size_t kPoolSize = 4;

uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> kShift);
}

uint32_t Mix(uint32_t x, uint32_t y) {
  const uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> kShift);
}

// The pool after mixing in `words` (SeedSequence.mix_entropy).
std::array<uint32_t, kPoolSize> MixEntropy(absl::Span<const uint32_t> words) {
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (size_t i = 0; i < kPoolSize; ++i) {
    pool[i] = HashMix(i < words.size() ? words[i] : 0, hash_const);
  }
  for (size_t src = 0; src < kPoolSize; ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < words.size(); ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      pool[dst] = Mix(pool[dst], HashMix(words[src], hash_const));
    }
  }
  return pool;
}

// SeedSequence.generate_state(out.size(), uint32) of a mixed pool.
void GenerateState(const std::array<uint32_t, kPoolSize>& pool, absl::Span<uint32_t> out) {
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t value = pool[i % kPoolSize] ^ hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    out[i] = value ^ (value >> kShift);
  }
}

// numpy's _int_to_uint32_array: the 32-bit words of `value`, low first; 0 is one word.
void AppendWords(uint64_t value, absl::InlinedVector<uint32_t, 8>& words) {
  do {
    words.push_back(static_cast<uint32_t>(value));
    value >>= 32;
  } while (value != 0);
}

}  // namespace

void SeedSequenceWords(absl::Span<const uint64_t> entropy, absl::Span<uint32_t> out) {
  absl::InlinedVector<uint32_t, 8> words;
  for (uint64_t value : entropy) AppendWords(value, words);
  GenerateState(MixEntropy(words), out);
}

void RecordSeeds(uint64_t seed, uint64_t epoch, absl::Span<const uint64_t> ids, uint64_t kind,
                 absl::Span<int64_t> out) {
  const size_t n = std::min(ids.size(), out.size() / 2);
  for (size_t k = 0; k < n; ++k) {
    const uint64_t entropy[4] = {seed, epoch, ids[k], kind};
    std::array<uint32_t, 4> state;
    SeedSequenceWords(entropy, absl::MakeSpan(state));
    // generate_state(2, uint64): the uint32 words in pairs, low word first.
    const uint64_t first = uint64_t{state[0]} | (uint64_t{state[1]} << 32);
    const uint64_t second = uint64_t{state[2]} | (uint64_t{state[3]} << 32);
    std::memcpy(&out[2 * k], &first, sizeof(first));
    std::memcpy(&out[2 * k + 1], &second, sizeof(second));
  }
}

}  // namespace croupier::plan
