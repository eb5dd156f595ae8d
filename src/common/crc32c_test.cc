#include "src/common/crc32c.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace croupier::crc32c {
namespace {

TEST(Crc32cTest, KnownVectors) {
  // Check values from RFC 3720 (iSCSI), B.4, and the classic "123456789".
  EXPECT_EQ(Value("123456789"), 0xe3069283u);
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Value(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Value(ascending), 0x46dd794eu);
  EXPECT_EQ(Value(""), 0u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string s = "hello, croupier: deal the cards";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Extend(Value(s.data(), cut), s.data() + cut, s.size() - cut), Value(s));
  }
}

TEST(Crc32cTest, HardwareMatchesPortableAtEveryLengthAndAlignment) {
  if (!HasHardware()) GTEST_SKIP() << "no SSE4.2 on this CPU; only the portable path exists";
  std::mt19937_64 rng(7);
  std::string buf(3 * 8192 * 2 + 4096, '\0');
  for (char& c : buf) c = static_cast<char>(rng());
  for (size_t len : {0, 1, 7, 8, 9, 191, 192, 193, 255, 256, 383, 767, 768, 769, 1024, 1200,
                     3000, 24575, 24576, 24577, 50000}) {
    for (size_t align = 0; align < 8; ++align) {
      if (align + len > buf.size()) continue;
      uint32_t seed = static_cast<uint32_t>(rng());
      EXPECT_EQ(ExtendHardware(seed, buf.data() + align, len),
                ExtendPortable(seed, buf.data() + align, len))
          << "len " << len << " align " << align;
    }
  }
}

TEST(Crc32cTest, MaskRoundTripsAndDiffers) {
  for (uint32_t v : {0u, 1u, 0xe3069283u, 0xffffffffu}) {
    EXPECT_EQ(Unmask(Mask(v)), v);
    EXPECT_NE(Mask(v), v);
  }
}

}  // namespace
}  // namespace croupier::crc32c
