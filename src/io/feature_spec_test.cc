#include <string>
#include <utility>
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
  EXPECT_EQ(*ParseDType("float64"), DType::kFloat64);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBFloat16);
  EXPECT_EQ(DTypeName(static_cast<DType>(kLastDTypeCode + 1)), "unknown");
  absl::Status unknown = ParseDType("complex64").status();
  EXPECT_TRUE(absl::IsInvalidArgument(unknown));
  EXPECT_THAT(unknown.message(), HasSubstr("unknown dtype 'complex64' (expected one of bytes, "
                                           "float32, int64, bool, int8"));
}

// Every code names itself, parses back, and has the documented size (docs/formats.md).
TEST(ExampleFeatureSpecTest, EveryDTypeHasANameAndASize) {
  const std::vector<std::pair<std::string, size_t>> table = {
      {"bytes", 0},  {"float32", 4}, {"int64", 8},    {"bool", 1},   {"int8", 1},
      {"int16", 2},  {"int32", 4},   {"uint8", 1},    {"uint16", 2}, {"uint32", 4},
      {"uint64", 8}, {"float16", 2}, {"bfloat16", 2}, {"float64", 8}};
  ASSERT_EQ(table.size(), kLastDTypeCode + 1u);
  for (uint8_t code = 0; code <= kLastDTypeCode; ++code) {
    const DType dtype = static_cast<DType>(code);
    EXPECT_EQ(DTypeName(dtype), table[code].first) << int{code};
    EXPECT_EQ(DTypeSize(dtype), table[code].second) << table[code].first;
    EXPECT_EQ(*ParseDType(table[code].first), dtype);
    EXPECT_EQ(IsExampleDType(dtype), code <= 2) << table[code].first;
  }
  EXPECT_FALSE(IsDTypeCode(kLastDTypeCode + 1));
}

TEST(ExampleFeatureSpecTest, TheSpecSyntaxNamesEveryDType) {
  const std::string text =
      "img:uint8[32,32,3],mask:bool[*],x:bfloat16[8],h:float16,d:float64[2],a:int8,b:int16[*],"
      "c:int32,e:uint16,f:uint32[*],g:uint64,l:int64,s:bytes,w:float32[*]";
  auto specs = ParseFeatureSpecs(text);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0], Spec("img", DType::kUInt8, {32, 32, 3}));
  EXPECT_EQ((*specs)[1], Spec("mask", DType::kBool, {}, true));
  EXPECT_EQ((*specs)[2], Spec("x", DType::kBFloat16, {8}));
  EXPECT_EQ(FormatFeatureSpecs(*specs), text);
  EXPECT_TRUE(ValidateFeatureSpecs(*specs).ok());
  ExpectSpecError("x:complex64", {"item 1 'x:complex64'", "unknown dtype 'complex64'"});
}

TEST(ExampleFeatureSpecTest, ExampleSpecsRefuseWhatAnExampleCannotHold) {
  EXPECT_TRUE(CheckExampleFeatureSpecs(
                  *ParseFeatureSpecs("img:bytes,label:int64,emb:float32[3],t:int64[*]"))
                  .ok());
  absl::Status status =
      CheckExampleFeatureSpecs(*ParseFeatureSpecs("label:int64,img:uint8[4,4],m:bool"));
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("feature 'img' is uint8; a tf.train.Example holds "
                                          "bytes, float32 and int64 only"));
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
  absl::Status dtype = ValidateFeatureSpecs({Spec("x", static_cast<DType>(14))});
  EXPECT_TRUE(absl::IsInvalidArgument(dtype));
  EXPECT_THAT(dtype.message(), HasSubstr("unknown dtype value 14"));
}

}  // namespace
}  // namespace croupier
