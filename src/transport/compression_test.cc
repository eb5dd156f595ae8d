#include "src/transport/compression.h"

#include <random>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Text-like bytes: words from a small vocabulary, as compressible as a tokenized corpus.
std::string TextLike(size_t n, uint64_t seed) {
  static const char* kWords[] = {"the ", "batch ", "of ", "records ", "deals ", "to ", "every ",
                                 "trainer ", "once ", "seeded "};
  std::mt19937_64 rng(seed);
  std::string out;
  while (out.size() < n) out += kWords[rng() % 10];
  out.resize(n);
  return out;
}

std::string Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

class CompressionTest : public ::testing::TestWithParam<Codec> {};

TEST_P(CompressionTest, RoundTripIsByteIdentical) {
  for (size_t n : {size_t{1}, size_t{4096}, size_t{3} << 20}) {
    const std::string input = TextLike(n, n);
    auto compressed = Compress(GetParam(), input);
    ASSERT_TRUE(compressed.ok()) << compressed.status();
    if (n >= 4096) {
      EXPECT_LT(compressed->size(), input.size() / 2) << n;
    }
    std::string out(n, '\0');
    ASSERT_TRUE(Decompress(GetParam(), *compressed, out.data(), n).ok());
    EXPECT_EQ(out, input);
  }
  // Incompressible bytes still round-trip (the server then sends them uncompressed).
  const std::string random = Random(100000, 3);
  auto compressed = Compress(GetParam(), random);
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  std::string out(random.size(), '\0');
  ASSERT_TRUE(Decompress(GetParam(), *compressed, out.data(), out.size()).ok());
  EXPECT_EQ(out, random);
}

TEST_P(CompressionTest, CorruptInputIsDataLoss) {
  const std::string input = TextLike(1 << 16, 7);
  std::string compressed = *Compress(GetParam(), input);
  std::string out(input.size(), '\0');
  // Truncated.
  absl::Status s = Decompress(GetParam(), absl::string_view(compressed).substr(0, 10), out.data(),
                              out.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // Garbage.
  const std::string garbage = Random(compressed.size(), 9);
  s = Decompress(GetParam(), garbage, out.data(), out.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // Flipped bytes in the middle: an error, or else never a wrong size.
  std::string flipped = compressed;
  for (size_t i = flipped.size() / 3; i < flipped.size() / 3 + 16; ++i) flipped[i] ^= 0x5a;
  s = Decompress(GetParam(), flipped, out.data(), out.size());
  if (!s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  // Empty body.
  s = Decompress(GetParam(), "", out.data(), out.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST_P(CompressionTest, SizeClaimMustMatchExactly) {
  const std::string input = TextLike(1 << 16, 11);
  const std::string compressed = *Compress(GetParam(), input);
  // A claim larger than what the body gives: the decoder fills no more than the body holds.
  std::string bigger(input.size() + 100, '\0');
  absl::Status s = Decompress(GetParam(), compressed, bigger.data(), bigger.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // A claim smaller than the body: refused, never written past the buffer.
  std::string smaller(input.size() - 100, '\0');
  s = Decompress(GetParam(), compressed, smaller.data(), smaller.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressionTest, ::testing::Values(Codec::kZstd, Codec::kLz4),
                         [](const auto& info) { return CodecName(info.param); });

TEST(CompressionNamesTest, ParseAndName) {
  EXPECT_EQ(*ParseCodec(""), Codec::kNone);
  EXPECT_EQ(*ParseCodec("none"), Codec::kNone);
  EXPECT_EQ(*ParseCodec("zstd"), Codec::kZstd);
  EXPECT_EQ(*ParseCodec("lz4"), Codec::kLz4);
  auto bad = ParseCodec("gzip");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown compression 'gzip'"));
  EXPECT_EQ(CodecName(Codec::kLz4), "lz4");
  EXPECT_EQ(CodecName(static_cast<Codec>(9)), "codec 9");
  EXPECT_TRUE(IsCompressingCodec(1));
  EXPECT_TRUE(IsCompressingCodec(2));
  EXPECT_FALSE(IsCompressingCodec(0));
  EXPECT_FALSE(IsCompressingCodec(3));
}

TEST(CompressionNamesTest, NoneIsNotACodecToRun) {
  EXPECT_EQ(Compress(Codec::kNone, "x").status().code(), absl::StatusCode::kInvalidArgument);
  char out[1];
  EXPECT_EQ(Decompress(Codec::kNone, "x", out, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decompress(static_cast<Codec>(7), "x", out, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace croupier
