#include "src/plan/block_shuffle.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "src/plan/keys.h"

namespace croupier::plan {
namespace {

struct Layout {
  uint64_t n;
  uint32_t block_size;
  uint32_t window_blocks;
};

// Sizes chosen to hit every edge: one record, exact multiples of S, a partial last block, W larger
// than the block count, S = 1, W = 1, a single block, and a partial block alone in its window.
const Layout kLayouts[] = {
    {1, 1, 1},     {1, 1024, 16},    {7, 3, 2},    {9, 3, 2},    {10, 3, 100}, {100, 1, 1},
    {100, 1, 7},   {100, 100, 1},    {100, 99, 1}, {1000, 7, 3}, {1000, 8, 4}, {1001, 8, 4},
    {4097, 64, 5}, {5000, 1024, 16}, {65, 8, 8},   {65, 8, 9},
};

TEST(PlanBlockShuffleTest, WindowsHoldExactlyTheirBlocksRecords) {
  for (const Layout& l : kLayouts) {
    for (uint64_t seed : {0, 1, 12345}) {
      for (uint64_t epoch : {0, 3}) {
        SCOPED_TRACE(::testing::Message() << "n=" << l.n << " S=" << l.block_size
                                          << " W=" << l.window_blocks << " seed=" << seed);
        BlockShuffle b(l.n, l.block_size, l.window_blocks, seed, epoch);
        ASSERT_EQ(b.num_blocks(), (l.n + l.block_size - 1) / l.block_size);
        std::vector<uint64_t> order(l.n);
        b.Fill(0, absl::MakeSpan(order));

        uint64_t next_start = 0;
        for (uint64_t w = 0; w < b.num_windows(); ++w) {
          ASSERT_EQ(b.WindowStart(w), next_start) << "w=" << w;
          const uint64_t size = b.WindowSize(w);
          next_start += size;
          std::set<uint64_t> expected;
          const uint64_t last_q = std::min(b.num_blocks(), (w + 1) * l.window_blocks);
          for (uint64_t q = w * l.window_blocks; q < last_q; ++q) {
            const uint64_t block = b.BlockAt(q);
            for (uint64_t r = block * l.block_size; r < std::min(l.n, (block + 1) * l.block_size);
                 ++r) {
              expected.insert(r);
            }
          }
          std::set<uint64_t> got;
          for (uint64_t p = b.WindowStart(w); p < b.WindowStart(w) + size; ++p) {
            ASSERT_EQ(b.WindowOf(p), w) << "p=" << p;
            ASSERT_EQ(b.RecordAt(p), order[p]) << "p=" << p;
            got.insert(order[p]);
          }
          ASSERT_EQ(got.size(), size);
          ASSERT_EQ(got, expected) << "w=" << w;
        }
        ASSERT_EQ(next_start, l.n);
      }
    }
  }
}

TEST(PlanBlockShuffleTest, FillFromAnyStartMatchesRecordAt) {
  BlockShuffle b(1001, 8, 4, 9, 1);
  for (uint64_t first : {0, 1, 31, 32, 500, 990}) {
    const uint64_t len = std::min<uint64_t>(77, 1001 - first);
    std::vector<uint64_t> out(len);
    b.Fill(first, absl::MakeSpan(out));
    for (uint64_t i = 0; i < len; ++i) ASSERT_EQ(out[i], b.RecordAt(first + i));
  }
}

TEST(PlanBlockShuffleTest, OneBlockWindowsKeepBlocksWhole) {
  // W = 1: a window is one block, so the order reads whole blocks one after another.
  BlockShuffle b(100, 10, 1, 4, 0);
  std::vector<uint64_t> order(100);
  b.Fill(0, absl::MakeSpan(order));
  for (uint64_t p = 0; p < 100; ++p) EXPECT_EQ(order[p] / 10, b.BlockAt(p / 10)) << p;
}

TEST(PlanBlockShuffleTest, HugeDatasetSampledPositionsStayInTheirWindow) {
  const uint64_t n = 1000000007;  // not a multiple of S
  const uint32_t s = 1024, w = 16;
  BlockShuffle b(n, s, w, 5, 2);
  std::set<uint64_t> positions, records;
  for (uint64_t i = 0; i < 3000; ++i) {
    // Sample around window edges as well as at random.
    const uint64_t p = i % 3 == 0 ? Mix64(i) % n : b.WindowStart(Mix64(i) % b.num_windows());
    const uint64_t r = b.RecordAt(p);
    ASSERT_LT(r, n);
    // The record's block must sit at a permuted position inside p's window.
    const uint64_t window = b.WindowOf(p);
    bool found = false;
    for (uint64_t q = window * w; q < std::min(b.num_blocks(), (window + 1) * w); ++q) {
      found = found || b.BlockAt(q) == r / s;
    }
    ASSERT_TRUE(found) << "p=" << p;
    // Distinct positions hold distinct records.
    if (positions.insert(p).second) {
      ASSERT_TRUE(records.insert(r).second) << "p=" << p;
    }
  }
  EXPECT_EQ(b.WindowStart(b.num_windows() - 1) + b.WindowSize(b.num_windows() - 1), n);
}

}  // namespace
}  // namespace croupier::plan
