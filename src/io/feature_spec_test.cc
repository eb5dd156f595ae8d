#include <string>
#include <vector>

#include "croupier/example.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

FeatureSpec Spec(std::string name, DType dtype, std::vector<int64_t> shape = {},
                 bool variable = false) {
  return FeatureSpec{std::move(name), dtype, std::move(shape), variable};
}

// Expects INVALID_ARGUMENT from ParseFeatureSpecs(text) with every one of `parts` in the message.
void ExpectSpecError(const std::string& text, const std::vector<std::string>& parts) {
  auto specs = ParseFeatureSpecs(text);
  ASSERT_FALSE(specs.ok()) << text;
  EXPECT_TRUE(absl::IsInvalidArgument(specs.status())) << specs.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(specs.status().message(), HasSubstr(part)) << text;
  }
}

TEST(ExampleFeatureSpecTest, ParsesTheDocumentedExample) {
  auto specs = ParseFeatureSpecs(
      "image:bytes,label:int64,emb:float32[128],pix:float32[4,4],tokens:int64[*]");
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::vector<FeatureSpec> expected = {Spec("image", DType::kBytes), Spec("label", DType::kInt64),
                                       Spec("emb", DType::kFloat32, {128}),
                                       Spec("pix", DType::kFloat32, {4, 4}),
                                       Spec("tokens", DType::kInt64, {}, true)};
  EXPECT_EQ(*specs, expected);
  EXPECT_EQ((*specs)[0].NumElements(), 1);
  EXPECT_EQ((*specs)[3].NumElements(), 16);
}

TEST(ExampleFeatureSpecTest, FormatRoundTripsAndCanonicalizesFloat) {
  auto specs = ParseFeatureSpecs(" image/encoded : bytes , x:float[2, 3], t : bytes[ * ] ");
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::string text = FormatFeatureSpecs(*specs);
  EXPECT_EQ(text, "image/encoded:bytes,x:float32[2,3],t:bytes[*]");
  auto again = ParseFeatureSpecs(text);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *specs);
}

TEST(ExampleFeatureSpecTest, DTypeNames) {
  EXPECT_EQ(DTypeName(DType::kBytes), "bytes");
  EXPECT_EQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
  EXPECT_EQ(*ParseDType("float"), DType::kFloat32);
  EXPECT_EQ(*ParseDType("float32"), DType::kFloat32);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseDType("float64").status()));
}

TEST(ExampleFeatureSpecTest, ErrorsNameTheItemAndTheProblem) {
  ExpectSpecError("", {"empty feature spec"});
  ExpectSpecError("a:int64,a:float32", {"item 2", "'a:float32'", "duplicate feature name 'a'"});
  ExpectSpecError("a:int64,b:float33", {"item 2", "unknown dtype 'float33'"});
  ExpectSpecError("a:int64,b", {"item 2", "expected name:dtype"});
  ExpectSpecError("a:int64,", {"item 2", "empty item"});
  ExpectSpecError(":int64", {"item 1", "empty feature name"});
  ExpectSpecError("a:float32[0]", {"'a:float32[0]'", "bad dim 0"});
  ExpectSpecError("a:float32[-3]", {"bad dim '-3'"});
  ExpectSpecError("a:float32[4,x]", {"bad dim 'x'"});
  ExpectSpecError("a:float32[4,]", {"bad dim ''"});
  ExpectSpecError("a:float32[*,3]", {"bad dim '*'"});
  ExpectSpecError("a:float32[]", {"empty shape"});
  ExpectSpecError("a:float32[4", {"shape in brackets"});
  ExpectSpecError("a:float32 4", {"unknown dtype 'float32 4'"});
  ExpectSpecError("a:float32[99999999999999999999]", {"bad dim"});
  ExpectSpecError("a:float32[65536,65536,2]", {"more than 4294967296 values"});
  ExpectSpecError("a]:int64", {"cannot hold"});
}

TEST(ExampleFeatureSpecTest, ValidateChecksStructuredSpecs) {
  EXPECT_TRUE(ValidateFeatureSpecs({Spec("a", DType::kInt64, {2, 3})}).ok());
  absl::Status none = ValidateFeatureSpecs({});
  EXPECT_TRUE(absl::IsInvalidArgument(none));
  EXPECT_THAT(none.message(), HasSubstr("no features"));
  absl::Status both = ValidateFeatureSpecs({Spec("t", DType::kInt64, {3}, true)});
  EXPECT_TRUE(absl::IsInvalidArgument(both));
  EXPECT_THAT(both.message(), HasSubstr("feature 't': a variable-length feature"));
  absl::Status rank = ValidateFeatureSpecs({Spec("r", DType::kInt64, std::vector<int64_t>(33, 1))});
  EXPECT_TRUE(absl::IsInvalidArgument(rank));
  EXPECT_THAT(rank.message(), HasSubstr("rank 33"));
  absl::Status dup =
      ValidateFeatureSpecs({Spec("d", DType::kInt64), Spec("d", DType::kBytes, {}, true)});
  EXPECT_TRUE(absl::IsInvalidArgument(dup));
  EXPECT_THAT(dup.message(), HasSubstr("duplicate feature name 'd'"));
  absl::Status space = ValidateFeatureSpecs({Spec("x ", DType::kInt64)});
  EXPECT_TRUE(absl::IsInvalidArgument(space));
  EXPECT_THAT(space.message(), HasSubstr("feature 'x ': a feature name cannot start or end"));
  absl::Status dtype = ValidateFeatureSpecs({Spec("x", static_cast<DType>(7))});
  EXPECT_TRUE(absl::IsInvalidArgument(dtype));
  EXPECT_THAT(dtype.message(), HasSubstr("unknown dtype value 7"));
}

}  // namespace
}  // namespace croupier
