#include "src/plan/seed_sequence.h"

#include <array>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace croupier::plan {
namespace {

// The expected words were printed by numpy 2 itself:
//   numpy.random.SeedSequence(entropy).generate_state(2, numpy.uint64)
struct Case {
  std::vector<uint64_t> entropy;
  uint64_t first, second;
};

std::array<uint64_t, 2> Generate(const std::vector<uint64_t>& entropy) {
  std::array<uint32_t, 4> words;
  SeedSequenceWords(entropy, absl::MakeSpan(words));
  return {uint64_t{words[0]} | (uint64_t{words[1]} << 32),
          uint64_t{words[2]} | (uint64_t{words[3]} << 32)};
}

TEST(PlanSeedSequenceTest, GivesNumpysWords) {
  const std::vector<Case> cases = {
      {{5, 1, 9, 2}, 0x2aeef7144873194d, 0xbaf18e7e1170811b},
      {{0, 0, 0, 2}, 0xc46775ed47a0a908, 0xf03f87b8393c015d},
      // An index of two 32-bit words: five words of entropy, one more than the pool.
      {{123456789, 7, (uint64_t{1} << 32) + 5, 2}, 0x8e59c3b9ba22ab2b, 0xe759c2f340229b17},
      {{(uint64_t{1} << 63) + 3, uint64_t{1} << 40, 0, 2}, 0xdd3b07142d5034e9, 0x6f8462be5a7de05f},
      // Fewer words than the pool: the rest are hashed zeros.
      {{1, 2, 3}, 0xb45f843fe3d1fc80, 0x42c16e36203807c7},
  };
  for (const Case& c : cases) {
    const std::array<uint64_t, 2> got = Generate(c.entropy);
    EXPECT_EQ(got[0], c.first) << "entropy[0] " << c.entropy[0];
    EXPECT_EQ(got[1], c.second) << "entropy[0] " << c.entropy[0];
  }
}

TEST(PlanSeedSequenceTest, RecordSeedsAreEachRecordsWords) {
  const std::vector<uint64_t> ids = {9, 0, (uint64_t{1} << 32) + 5};
  std::vector<int64_t> out(2 * ids.size());
  RecordSeeds(5, 1, ids, 2, absl::MakeSpan(out));
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::array<uint64_t, 2> want = Generate({5, 1, ids[k], 2});
    EXPECT_EQ(static_cast<uint64_t>(out[2 * k]), want[0]) << k;
    EXPECT_EQ(static_cast<uint64_t>(out[2 * k + 1]), want[1]) << k;
  }
  EXPECT_EQ(static_cast<uint64_t>(out[0]), 0x2aeef7144873194dULL);
}

}  // namespace
}  // namespace croupier::plan
