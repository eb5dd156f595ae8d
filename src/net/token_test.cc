#include "src/net/token.h"

#include <string>

#include "gtest/gtest.h"

namespace croupier {
namespace {

TEST(TokenTest, MatchesOnlyTheSameToken) {
  EXPECT_TRUE(TokenMatches("s3cret", "s3cret"));
  EXPECT_TRUE(TokenMatches("", ""));
  EXPECT_FALSE(TokenMatches("s3creT", "s3cret"));
  EXPECT_FALSE(TokenMatches("s3cre", "s3cret"));
  EXPECT_FALSE(TokenMatches("s3crett", "s3cret"));
  EXPECT_FALSE(TokenMatches("", "s3cret"));
  EXPECT_FALSE(TokenMatches("x", ""));
  // A prefix padded with NULs must not pass for the token.
  EXPECT_FALSE(TokenMatches(std::string("s3\0\0\0\0", 6), "s3cret"));
  EXPECT_FALSE(TokenMatches("s3cret", std::string("s3cret\0", 7)));
}

}  // namespace
}  // namespace croupier
