// The order of shuffle mode "blocks": permuted blocks of consecutive records, with the records of
// each window of W blocks shuffled among themselves. A producer working through a window reads W
// whole blocks sequentially, yet a record can land anywhere in its window, so W trades shuffle
// quality against I/O.
#ifndef CROUPIER_SRC_PLAN_BLOCK_SHUFFLE_H_
#define CROUPIER_SRC_PLAN_BLOCK_SHUFFLE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "src/plan/permutation.h"

namespace croupier::plan {

// Layout, with S = block_size, W = window_blocks, m = ceil(n / S) blocks:
// - block j holds records [j*S, min((j+1)*S, n)); only the last one, m-1, may be partial, holding
//   r = n - (m-1)*S records, d = S - r short of full;
// - a Permutation of [0, m) puts block BlockAt(q) at permuted position q;
// - window w holds the blocks at permuted positions [w*W, min((w+1)*W, m)); the records of those
//   blocks, taken in position order and each block ascending, are shuffled by a Permutation of the
//   window's size;
// - the windows follow each other in the epoch order.
// Only the window holding the partial block is short (by d), so window boundaries are computed in
// O(1) from where that block landed, its permuted position Inverse(m-1).
//
// Immutable after construction, so thread-safe.
class BlockShuffle {
 public:
  // Preconditions: 1 <= n <= 2^62, block_size >= 1, window_blocks >= 1.
  BlockShuffle(uint64_t n, uint32_t block_size, uint32_t window_blocks, uint64_t seed,
               uint64_t epoch);

  uint64_t num_blocks() const { return num_blocks_; }
  uint64_t num_windows() const { return num_windows_; }
  // The block at permuted position q < num_blocks().
  uint64_t BlockAt(uint64_t q) const { return block_order_(q); }
  // The first epoch position of window w < num_windows(), and its number of records.
  uint64_t WindowStart(uint64_t w) const;
  uint64_t WindowSize(uint64_t w) const;
  // The window holding position p < n.
  uint64_t WindowOf(uint64_t p) const;

  // The record at position p < n.
  uint64_t RecordAt(uint64_t p) const;
  // The records at positions [first, first + out.size()), all < n. Builds each window's
  // permutation once rather than once per record.
  void Fill(uint64_t first, absl::Span<uint64_t> out) const;

 private:
  // Fill looks up at most this many blocks per window ahead of time.
  static constexpr uint64_t kCachedBlocks = 64;

  struct Window {
    uint64_t index;
    uint64_t start;        // first epoch position
    uint64_t size;         // records
    uint64_t first_block;  // permuted position of its first block: index * W
    uint64_t num_blocks;
    uint64_t partial_end;  // in-window index just past the partial block; ~0 if it has none
    Permutation order;     // of the window's records
  };
  Window MakeWindow(uint64_t w) const;
  // The record at index u of the window's records in unshuffled order (blocks in permuted-position
  // order, each ascending). `blocks`, if not null, holds the window's block ids.
  uint64_t Unshuffled(const Window& window, uint64_t u, const uint64_t* blocks) const;

  // Constant after construction.
  uint64_t n_;
  uint64_t block_size_;
  uint64_t window_blocks_;
  uint64_t window_records_;  // W*S, the size of a window of full blocks
  uint64_t seed_;
  uint64_t epoch_;
  uint64_t num_blocks_;
  uint64_t num_windows_;
  uint64_t shortfall_;         // d: records missing from the last block
  uint64_t partial_position_;  // permuted position of the last block
  uint64_t partial_window_;    // the window holding it
  Permutation block_order_;
};

}  // namespace croupier::plan

#endif  // CROUPIER_SRC_PLAN_BLOCK_SHUFFLE_H_
