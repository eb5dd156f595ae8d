// The 64-bit mixing and key derivation under every epoch plan. These functions define the plan's
// bits: changing a constant here reshuffles every job, so the golden values in epoch_plan_test.cc
// pin them, and /tmp/formats_plan.md (destined for docs/) spells them out for other languages.
#ifndef CROUPIER_SRC_PLAN_KEYS_H_
#define CROUPIER_SRC_PLAN_KEYS_H_

#include <cstdint>

namespace croupier::plan {

// The golden-ratio increment of splitmix64: odd, so adding it walks all 2^64 states.
inline constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

// The splitmix64 finalizer (Stafford's "Mix13"). A bijection on uint64 with full avalanche; we
// rely on both: bijectivity makes key derivation injective, avalanche makes Feistel rounds strong.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// What a permutation key is for. The values are part of the format: never renumber them.
enum class KeyPurpose : uint64_t {
  kGlobal = 1,      // the global shuffle of all records
  kBlockOrder = 2,  // the order of the blocks in blocks mode
  kWindow = 3,      // the records within one window in blocks mode (index = window number)
  kTokenSource = 4,  // a token job's source's documents in one source epoch (index = source)
};

// The key of one permutation of one epoch. Each step absorbs one word through the bijection
// Mix64, so for fixed other inputs the key is an injective function of each input: two epochs (or
// two windows) of one job never share a key.
constexpr uint64_t DeriveKey(uint64_t seed, uint64_t epoch, KeyPurpose purpose, uint64_t index) {
  uint64_t h = Mix64(seed + 1 * kGamma);
  h = Mix64(h ^ Mix64(epoch + 2 * kGamma));
  h = Mix64(h ^ Mix64(static_cast<uint64_t>(purpose) + 3 * kGamma));
  h = Mix64(h ^ Mix64(index + 4 * kGamma));
  return h;
}

}  // namespace croupier::plan

#endif  // CROUPIER_SRC_PLAN_KEYS_H_
