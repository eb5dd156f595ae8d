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

TEST(TokenTest, RandomBytesDiffer) {
  auto a = RandomBytes(kNonceBytes);
  auto b = RandomBytes(kNonceBytes);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), kNonceBytes);
  EXPECT_NE(*a, *b);
}

// The proof is an HMAC-SHA256 (RFC 4231 test case 2 checks the primitive), and it depends on the
// token, the label and each nonce, so that a proof for one exchange or direction is no proof for
// another.
TEST(TokenTest, ProofBindsTokenLabelAndBothNonces) {
  const std::string a(kNonceBytes, 'a'), b(kNonceBytes, 'b');
  const std::string proof = TokenProof("tok", "server", a, b);
  EXPECT_EQ(proof.size(), kProofBytes);
  EXPECT_TRUE(ProofMatches(proof, "tok", "server", a, b));
  EXPECT_FALSE(ProofMatches(proof, "tok2", "server", a, b));
  EXPECT_FALSE(ProofMatches(proof, "tok", "client", a, b));
  EXPECT_FALSE(ProofMatches(proof, "tok", "server", b, a));
  EXPECT_FALSE(ProofMatches(proof, "tok", "server", a, a));
  EXPECT_FALSE(ProofMatches("", "tok", "server", a, b));
  EXPECT_FALSE(ProofMatches(proof, "", "server", a, b));
  // Length-prefixed fields: moving a byte from one field to the next changes the proof.
  EXPECT_NE(TokenProof("tok", "ab", "c", ""), TokenProof("tok", "a", "bc", ""));
}

}  // namespace
}  // namespace croupier
