#include "src/s3/range_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace croupier::s3 {
namespace {

using Range = RandomAccessFile::Range;

TEST(RangePlanTest, TouchingRangesLaidOutEndToEndAreOneDirectRequest) {
  std::string buf(30, '\0');
  std::vector<Range> ranges = {
      {10, 10, buf.data() + 10}, {0, 10, buf.data()}, {20, 10, buf.data() + 20}};
  auto reqs = PlanRangeRequests(absl::MakeSpan(ranges), 100, 0, 1 << 20);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].range.offset, 0u);
  EXPECT_EQ(reqs[0].range.length, 30u);
  EXPECT_TRUE(reqs[0].direct);
  EXPECT_EQ(reqs[0].members, (std::vector<size_t>{1, 0, 2}));
  EXPECT_EQ(reqs[0].parts.size(), 1u);
}

TEST(RangePlanTest, AGapSplitsRequestsUnlessWithinMaxGap) {
  std::string buf(20, '\0');
  std::vector<Range> ranges = {{0, 10, buf.data()}, {15, 10, buf.data() + 10}};
  EXPECT_EQ(PlanRangeRequests(absl::MakeSpan(ranges), 100, 0, 1 << 20).size(), 2u);
  auto merged = PlanRangeRequests(absl::MakeSpan(ranges), 100, 5, 1 << 20);
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].range.length, 25u);
  EXPECT_FALSE(merged[0].direct);  // the gap's bytes must not land in the caller's buffer
}

TEST(RangePlanTest, TouchingInTheObjectButNotInMemoryIsCopiedOut) {
  std::string a(10, '\0'), b(10, '\0');
  std::vector<Range> ranges = {{0, 10, a.data()}, {10, 10, b.data()}};
  auto reqs = PlanRangeRequests(absl::MakeSpan(ranges), 100, 0, 1 << 20);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_FALSE(reqs[0].direct);
}

TEST(RangePlanTest, OverlapsAndRepeatsShareARequest) {
  std::string a(10, '\0'), b(10, '\0');
  std::vector<Range> ranges = {{0, 10, a.data()}, {0, 10, b.data()}, {5, 10, b.data()}};
  auto reqs = PlanRangeRequests(absl::MakeSpan(ranges), 100, 0, 1 << 20);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].range.length, 15u);
  EXPECT_FALSE(reqs[0].direct);
}

TEST(RangePlanTest, ClipsToTheObjectAndCutsLongRequestsIntoParts) {
  std::string buf(100, '\0');
  std::vector<Range> ranges = {
      {0, 60, buf.data()}, {60, 40, buf.data() + 60}, {200, 5, buf.data()}};
  auto reqs = PlanRangeRequests(absl::MakeSpan(ranges), 90, 0, 32);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(ranges[1].got, 30u);
  EXPECT_EQ(ranges[2].got, 0u);
  EXPECT_EQ(reqs[0].range.length, 90u);
  ASSERT_EQ(reqs[0].parts.size(), 3u);
  EXPECT_EQ(reqs[0].parts[2].offset, 64u);
  EXPECT_EQ(reqs[0].parts[2].length, 26u);
}

}  // namespace
}  // namespace croupier::s3
