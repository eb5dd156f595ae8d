#include "src/plan/permutation.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "src/plan/keys.h"

namespace croupier::plan {
namespace {

// Checks exhaustively that p is a bijection on [0, n) and that Inverse undoes it.
void ExpectBijection(const Permutation& p) {
  const uint64_t n = p.size();
  std::vector<bool> seen(n, false);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t j = p(i);
    ASSERT_LT(j, n) << "n=" << n << " i=" << i;
    ASSERT_FALSE(seen[j]) << "n=" << n << ": " << j << " hit twice";
    seen[j] = true;
    ASSERT_EQ(p.Inverse(j), i) << "n=" << n;
  }
}

TEST(PlanPermutationTest, EmptyAndSingletonAreIdentity) {
  Permutation empty(0, 42);
  EXPECT_EQ(empty.size(), 0u);
  Permutation one(1, 42);
  EXPECT_EQ(one(0), 0u);
  EXPECT_EQ(one.Inverse(0), 0u);
  EXPECT_EQ(Permutation().size(), 0u);
}

TEST(PlanPermutationTest, BijectionOnEverySmallSize) {
  for (uint64_t n = 0; n <= 300; ++n) {
    for (uint64_t key : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeef}, ~uint64_t{0}}) {
      ExpectBijection(Permutation(n, key));
    }
  }
}

TEST(PlanPermutationTest, BijectionAroundPowersOfTwo) {
  for (int k = 1; k <= 17; ++k) {
    const uint64_t pow = uint64_t{1} << k;
    for (uint64_t n : {pow - 1, pow, pow + 1}) {
      ExpectBijection(Permutation(n, Mix64(n + k)));
    }
  }
}

TEST(PlanPermutationTest, BijectionOnOddSizes) {
  for (uint64_t n : {1000, 4097, 65521, 100000, 1000003}) {
    ExpectBijection(Permutation(n, n * 7));
  }
}

TEST(PlanPermutationTest, HugeDomainsStayInRangeAndInvert) {
  const uint64_t sizes[] = {1000000000, (uint64_t{1} << 62) + 12345,
                            std::numeric_limits<uint64_t>::max()};
  for (uint64_t n : sizes) {
    Permutation p(n, 99);
    for (uint64_t s = 0; s < 2000; ++s) {
      const uint64_t i = Mix64(s) % n;
      const uint64_t j = p(i);
      ASSERT_LT(j, n);
      ASSERT_EQ(p.Inverse(j), i) << "n=" << n << " i=" << i;
    }
  }
}

TEST(PlanPermutationTest, OutOfRangeInputsAreReturnedUnchanged) {
  Permutation p(10, 5);
  EXPECT_EQ(p(10), 10u);
  EXPECT_EQ(p.Inverse(123), 123u);
}

TEST(PlanPermutationTest, SameKeySamePermutationOtherKeyOther) {
  const uint64_t n = 1000;
  Permutation a(n, 7), b(n, 7), c(n, 8);
  uint64_t same = 0;
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(a(i), b(i));
    same += a(i) == c(i);
  }
  // A random pair of permutations agrees at about one point.
  EXPECT_LT(same, 20u);
}

TEST(PlanPermutationTest, CopiesAgree) {
  Permutation a(12345, 77);
  Permutation b = a;
  for (uint64_t i = 0; i < 12345; i += 7) ASSERT_EQ(a(i), b(i));
}

// Pins the algorithm: any change to the rounds, the round function, the key schedule or the bit
// split changes these values and must come with a format version change.
TEST(PlanPermutationTest, GoldenValues) {
  Permutation p(1000000, 42);
  std::vector<uint64_t> got;
  for (uint64_t i = 0; i < 6; ++i) got.push_back(p(i));
  EXPECT_EQ(got, (std::vector<uint64_t>{511226, 10479, 428816, 221921, 846166, 676368}));
  EXPECT_EQ(Mix64(0), 0u);
  EXPECT_EQ(Mix64(1), 0x5692161d100b05e5ULL);
  EXPECT_EQ(DeriveKey(1, 2, KeyPurpose::kGlobal, 0), 2121466590476142980u);
}

}  // namespace
}  // namespace croupier::plan
