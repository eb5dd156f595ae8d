#include "src/plan/block_shuffle.h"

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "src/plan/keys.h"

namespace croupier::plan {

BlockShuffle::BlockShuffle(uint64_t n, uint32_t block_size, uint32_t window_blocks, uint64_t seed,
                           uint64_t epoch)
    : n_(n),
      block_size_(block_size),
      window_blocks_(window_blocks),
      // Cannot overflow: both factors are below 2^32.
      window_records_(uint64_t{block_size} * window_blocks),
      seed_(seed),
      epoch_(epoch),
      num_blocks_((n - 1) / block_size + 1),
      num_windows_((num_blocks_ - 1) / window_blocks + 1),
      shortfall_(num_blocks_ * block_size - n),
      block_order_(num_blocks_, DeriveKey(seed, epoch, KeyPurpose::kBlockOrder, 0)) {
  assert(n >= 1 && block_size >= 1 && window_blocks >= 1);
  partial_position_ = block_order_.Inverse(num_blocks_ - 1);
  partial_window_ = partial_position_ / window_blocks_;
}

// Windows before the partial one are full; those after it start d earlier than full ones would.
// (w * W*S stays below 2^64: with two or more windows, m > W, so it is at most about 2n + 2S.)
uint64_t BlockShuffle::WindowStart(uint64_t w) const {
  return w * window_records_ - (w > partial_window_ ? shortfall_ : 0);
}

uint64_t BlockShuffle::WindowSize(uint64_t w) const {
  const uint64_t blocks = std::min(window_blocks_, num_blocks_ - w * window_blocks_);
  return blocks * block_size_ - (w == partial_window_ ? shortfall_ : 0);
}

uint64_t BlockShuffle::WindowOf(uint64_t p) const {
  // Up to the end of the partial window every earlier window is full; past it, positions sit d
  // earlier than they would with a full last block.
  const uint64_t partial_end = (partial_window_ + 1) * window_records_ - shortfall_;
  return p < partial_end ? p / window_records_ : (p + shortfall_) / window_records_;
}

BlockShuffle::Window BlockShuffle::MakeWindow(uint64_t w) const {
  Window window;
  window.index = w;
  window.start = WindowStart(w);
  window.size = WindowSize(w);
  window.first_block = w * window_blocks_;
  window.num_blocks = std::min(window_blocks_, num_blocks_ - window.first_block);
  window.partial_end = ~uint64_t{0};
  if (w == partial_window_) {
    window.partial_end = (partial_position_ - window.first_block + 1) * block_size_ - shortfall_;
  }
  window.order = Permutation(window.size, DeriveKey(seed_, epoch_, KeyPurpose::kWindow, w));
  return window;
}

uint64_t BlockShuffle::Unshuffled(const Window& window, uint64_t u, const uint64_t* blocks) const {
  // Past the partial block, index as if it were full, so that every block is S long.
  if (u >= window.partial_end) u += shortfall_;
  uint64_t q, offset;
  if (u <= UINT32_MAX) {
    // A 32-bit division is several times faster than a 64-bit one on x86-64, and this is the
    // common case: windows rarely hold 2^32 records.
    q = static_cast<uint32_t>(u) / static_cast<uint32_t>(block_size_);
    offset = static_cast<uint32_t>(u) - q * block_size_;
  } else {
    q = u / block_size_;
    offset = u % block_size_;
  }
  const uint64_t block = blocks != nullptr ? blocks[q] : BlockAt(window.first_block + q);
  return block * block_size_ + offset;
}

uint64_t BlockShuffle::RecordAt(uint64_t p) const {
  assert(p < n_);
  const Window window = MakeWindow(WindowOf(p));
  return Unshuffled(window, window.order(p - window.start), nullptr);
}

void BlockShuffle::Fill(uint64_t first, absl::Span<uint64_t> out) const {
  if (out.empty()) return;
  assert(first < n_ && out.size() <= n_ - first);
  Window window = MakeWindow(WindowOf(first));
  while (!out.empty()) {
    if (first - window.start >= window.size) window = MakeWindow(window.index + 1);
    const uint64_t offset = first - window.start;
    const size_t run = static_cast<size_t>(std::min<uint64_t>(out.size(), window.size - offset));
    absl::Span<uint64_t> chunk = out.subspan(0, run);
    window.order.Fill(offset, chunk);  // in-window indices, mapped to records below
    // Look the window's blocks up once when that is cheaper than once per record.
    uint64_t blocks[kCachedBlocks];
    const uint64_t* cache = nullptr;
    if (window.num_blocks <= kCachedBlocks && window.num_blocks <= run) {
      block_order_.Fill(window.first_block, absl::MakeSpan(blocks, window.num_blocks));
      cache = blocks;
    }
    for (uint64_t& x : chunk) x = Unshuffled(window, x, cache);
    out.remove_prefix(run);
    first += run;
  }
}

}  // namespace croupier::plan
