#include "src/s3/s3_path.h"

#include <gtest/gtest.h>

namespace croupier::s3 {
namespace {

TEST(S3PathTest, SplitsBucketAndKey) {
  absl::StatusOr<S3Path> p = ParseS3Path("s3://data/train/a-00001.tfrecord");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bucket, "data");
  EXPECT_EQ(p->key, "train/a-00001.tfrecord");
  EXPECT_EQ(p->ToString(), "s3://data/train/a-00001.tfrecord");
  EXPECT_EQ(ParseS3Path("s3://data")->key, "");
}

TEST(S3PathTest, RejectsOtherSchemesAndEmptyBuckets) {
  EXPECT_EQ(ParseS3Path("/tmp/x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseS3Path("s3:///k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsS3Path("s3://b/k"));
  EXPECT_FALSE(IsS3Path("gs://b/k"));
}

TEST(S3PathTest, GlobPrefixStopsAtTheFirstWildcard) {
  EXPECT_EQ(GlobPrefix("train/part-*.tfrecord"), "train/part-");
  EXPECT_EQ(GlobPrefix("train/?x"), "train/");
  EXPECT_EQ(GlobPrefix("train/[ab]"), "train/");
  EXPECT_EQ(GlobPrefix("train/a.tfrecord"), "train/a.tfrecord");
}

TEST(S3PathTest, GlobMatchesLikeALocalPath) {
  EXPECT_TRUE(GlobMatch("train/*.tfrecord", "train/a.tfrecord"));
  EXPECT_FALSE(GlobMatch("train/*.tfrecord", "train/sub/a.tfrecord"));
  EXPECT_TRUE(GlobMatch("train/*/*.tfrecord", "train/sub/a.tfrecord"));
  EXPECT_TRUE(GlobMatch("train/part-[0-9]", "train/part-7"));
  EXPECT_FALSE(GlobMatch("train/part-?", "train/part-10"));
  // As the shell: a wildcard does not match a leading dot, so .croupier-index/ stays out.
  EXPECT_FALSE(GlobMatch("*/*/*.tfrecord", ".croupier-index/b/a.tfrecord.crindex"));
  EXPECT_FALSE(GlobMatch("train/*", "train/.hidden"));
  EXPECT_TRUE(GlobMatch("train/.*", "train/.hidden"));
}

}  // namespace
}  // namespace croupier::s3
