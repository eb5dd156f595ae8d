#include "src/s3/xml_scan.h"

#include <gtest/gtest.h>

namespace croupier::s3 {
namespace {

TEST(XmlScanTest, ReadsAListingPage) {
  const char* xml =
      "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
      "<Contents><Key>a&amp;b.tfrecord</Key><Size>12</Size></Contents>"
      "<Contents><Key>c&#x20;d</Key><Size>0</Size></Contents>"
      "<NextContinuationToken>tok==</NextContinuationToken></ListBucketResult>";
  std::vector<absl::string_view> contents = XmlElements(xml, "Contents");
  ASSERT_EQ(contents.size(), 2u);
  EXPECT_EQ(XmlText(contents[0], "Key"), "a&b.tfrecord");
  EXPECT_EQ(XmlText(contents[1], "Key"), "c d");
  EXPECT_EQ(XmlText(contents[0], "Size"), "12");
  EXPECT_EQ(XmlText(xml, "IsTruncated"), "true");
  EXPECT_EQ(XmlText(xml, "NextContinuationToken"), "tok==");
  EXPECT_EQ(XmlText(xml, "Missing"), std::nullopt);
}

TEST(XmlScanTest, UnescapesEntitiesAndLeavesStrayAmpersands) {
  EXPECT_EQ(XmlUnescape("&lt;&gt;&quot;&apos;&#65;&#xfc;"), "<>\"'A\xc3\xbc");
  EXPECT_EQ(XmlUnescape("a & b"), "a & b");
}

}  // namespace
}  // namespace croupier::s3
