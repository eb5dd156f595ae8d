#include "src/s3/sigv4.h"

#include <gtest/gtest.h>

namespace croupier::s3 {
namespace {

// The credentials of AWS's published SigV4 examples for S3 ("Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk").
SigningInput ExampleInput() {
  SigningInput in;
  in.method = "GET";
  in.region = "us-east-1";
  in.access_key_id = "AKIAIOSFODNN7EXAMPLE";
  in.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  in.headers["Host"] = "examplebucket.s3.amazonaws.com";
  in.headers["x-amz-date"] = "20130524T000000Z";
  in.headers["x-amz-content-sha256"] = std::string(kEmptyPayloadSha256);
  return in;
}

TEST(SigV4Test, PublishedGetObjectExampleWithRange) {
  SigningInput in = ExampleInput();
  in.canonical_uri = "/test.txt";
  in.headers["Range"] = "bytes=0-9";
  EXPECT_EQ(AuthorizationHeader(in),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, PublishedListObjectsExampleSortsAndEncodesTheQuery) {
  SigningInput in = ExampleInput();
  in.canonical_uri = "/";
  in.query = {{"prefix", "J"}, {"max-keys", "2"}};  // out of order on purpose
  EXPECT_EQ(CanonicalQuery(in.query), "max-keys=2&prefix=J");
  EXPECT_EQ(Signature(in, "20130524T000000Z"),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4Test, CanonicalRequestTrimsHeaderValuesAndLowersNames) {
  SigningInput in = ExampleInput();
  in.canonical_uri = "/a";
  in.headers["X-Odd"] = "  two   words ";
  EXPECT_NE(CanonicalRequest(in).find("\nx-odd:two words\n"), std::string::npos);
}

TEST(SigV4Test, UriEncodeKeepsUnreservedAndOptionallySlashes) {
  EXPECT_EQ(UriEncode("data/a b+c~d_e.tfrecord", true), "data/a%20b%2Bc~d_e.tfrecord");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("\xc3\xbc", true), "%C3%BC");
}

TEST(SigV4Test, AmzDateIsUtcBasicFormat) {
  EXPECT_EQ(AmzDate(absl::FromUnixSeconds(1369353600)), "20130524T000000Z");
}

TEST(SigV4Test, Sha256OfNothingIsTheEmptyPayloadHash) {
  EXPECT_EQ(Sha256Hex(""), kEmptyPayloadSha256);
}

}  // namespace
}  // namespace croupier::s3
