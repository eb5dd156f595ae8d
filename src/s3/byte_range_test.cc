#include "src/s3/byte_range.h"

#include <gtest/gtest.h>

namespace croupier::s3 {
namespace {

TEST(ByteRangeTest, RangeHeaderIsInclusive) {
  EXPECT_EQ(*RangeHeader({0, 10}), "bytes=0-9");
  EXPECT_EQ(*RangeHeader({4096, 1}), "bytes=4096-4096");
  EXPECT_EQ(RangeHeader({5, 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ByteRangeTest, NamesItselfHalfOpen) {
  EXPECT_EQ((ByteRange{0, 4096}).ToString(), "bytes [0, 4096)");
}

TEST(ByteRangeTest, ParsesContentRange) {
  absl::StatusOr<ContentRange> r = ParseContentRange("bytes 100-199/1000");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->range.offset, 100u);
  EXPECT_EQ(r->range.length, 100u);
  EXPECT_EQ(r->total, 1000u);
  r = ParseContentRange("bytes 0-0/*");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->total.has_value());
}

TEST(ByteRangeTest, RejectsMalformedContentRange) {
  for (const char* bad : {"", "bytes */1000", "bytes 5-4/10", "bytes 0-9/9", "items 0-9/10",
                          "bytes 0-9", "bytes a-9/10"}) {
    absl::StatusOr<ContentRange> r = ParseContentRange(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace croupier::s3
