#include "src/plan/permutation.h"

#include <bit>

#include "src/plan/keys.h"

namespace croupier::plan {
namespace {

// The smallest k >= 2 with 2^k >= n. At least 2 so that both halves have a bit to mix; with k = 1
// one half would be empty and the network would be the identity or a fixed swap.
int DomainBits(uint64_t n) {
  int k = n <= 1 ? 0 : std::bit_width(n - 1);
  return k < 2 ? 2 : k;
}

uint64_t Mask(int bits) { return bits >= 64 ? ~0ULL : (1ULL << bits) - 1; }

// The round function: a full-avalanche mix of the half and the round key. Feistel inverts rounds by
// recomputing F, so F need not itself be invertible; Mix64 happens to be, which costs nothing.
inline uint64_t RoundFunction(uint64_t half, uint64_t round_key) { return Mix64(half ^ round_key); }

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n) {
  if (n <= 1) return;  // the identity; the Feistel fields are never read
  const int k = DomainBits(n);
  rounds_ = k < kSmallDomainBits ? kSmallDomainRounds : kRounds;
  left_bits_ = (k + 1) / 2;
  right_bits_ = k / 2;
  left_mask_ = Mask(left_bits_);
  right_mask_ = Mask(right_bits_);
  // Round keys are successive outputs of splitmix64 seeded with `key`.
  uint64_t state = key;
  for (int r = 0; r < rounds_; ++r) {
    state += kGamma;
    round_keys_[r] = Mix64(state);
  }
}

// Even rounds map (L in [0,a), R in [0,b)) to (R, (L + F(R)) mod a), odd rounds map (L in [0,b),
// R in [0,a)) to (R, (L + F(R)) mod b): the halves trade sizes every round, so after an even number
// of rounds the value is again L*b + R with L < a and R < b. Addition rather than xor is the
// "numeric" Feistel, which would also serve non-power-of-two halves.
uint64_t Permutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> right_bits_;
  uint64_t right = x & right_mask_;
  for (int r = 0; r < rounds_; ++r) {
    const uint64_t mask = (r % 2 == 0) ? left_mask_ : right_mask_;
    const uint64_t next_right = (left + RoundFunction(right, round_keys_[r])) & mask;
    left = right;
    right = next_right;
  }
  return (left << right_bits_) | right;
}

uint64_t Permutation::Decrypt(uint64_t x) const {
  uint64_t left = x >> right_bits_;
  uint64_t right = x & right_mask_;
  for (int r = rounds_ - 1; r >= 0; --r) {
    const uint64_t mask = (r % 2 == 0) ? left_mask_ : right_mask_;
    const uint64_t prev_left = (right - RoundFunction(left, round_keys_[r])) & mask;
    right = left;
    left = prev_left;
  }
  return (left << right_bits_) | right;
}

// Cycle walking: Encrypt permutes [0, 2^k); following its cycle from i until it re-enters [0, n)
// gives a permutation of [0, n). Decrypt walks the same cycle backwards.
uint64_t Permutation::operator()(uint64_t i) const {
  if (n_ <= 1 || i >= n_) return i;
  uint64_t x = Encrypt(i);
  while (x >= n_) x = Encrypt(x);
  return x;
}

// A single Encrypt is a chain of dependent multiplies, so element-at-a-time evaluation mostly
// waits on latency. Here kLanes elements go through the rounds side by side and their independent
// chains overlap. The walks, needed by a minority of elements, follow one at a time: batching them
// as well measured no faster. About 1.6 times as fast as operator() on 1e8 elements.
void Permutation::Fill(uint64_t first, absl::Span<uint64_t> out) const {
  if (n_ <= 1) {
    for (size_t t = 0; t < out.size(); ++t) out[t] = first + t;
    return;
  }
  constexpr size_t kLanes = 4;
  size_t t = 0;
  for (; t + kLanes <= out.size(); t += kLanes) {
    uint64_t left[kLanes], right[kLanes];
    for (size_t j = 0; j < kLanes; ++j) {
      left[j] = (first + t + j) >> right_bits_;
      right[j] = (first + t + j) & right_mask_;
    }
    for (int r = 0; r < rounds_; ++r) {
      const uint64_t mask = (r % 2 == 0) ? left_mask_ : right_mask_;
      for (size_t j = 0; j < kLanes; ++j) {
        const uint64_t next_right = (left[j] + RoundFunction(right[j], round_keys_[r])) & mask;
        left[j] = right[j];
        right[j] = next_right;
      }
    }
    for (size_t j = 0; j < kLanes; ++j) out[t + j] = (left[j] << right_bits_) | right[j];
  }
  for (; t < out.size(); ++t) out[t] = Encrypt(first + t);
  for (uint64_t& x : out) {
    while (x >= n_) x = Encrypt(x);
  }
}

uint64_t Permutation::Inverse(uint64_t i) const {
  if (n_ <= 1 || i >= n_) return i;
  uint64_t x = Decrypt(i);
  while (x >= n_) x = Decrypt(x);
  return x;
}

}  // namespace croupier::plan
