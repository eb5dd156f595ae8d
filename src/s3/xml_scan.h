// The little XML that S3's answers need read: the text of named elements of a ListObjectsV2
// result or an error document. Not a general parser: elements of one name must not nest
// (true of every element read here), and attributes, CDATA and comments are not understood.
#ifndef CROUPIER_SRC_S3_XML_SCAN_H_
#define CROUPIER_SRC_S3_XML_SCAN_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace croupier::s3 {

// The raw contents of every <tag>...</tag> in `xml`, in order (views into xml).
std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag);

// The unescaped text of the first <tag>, or nullopt.
std::optional<std::string> XmlText(absl::string_view xml, absl::string_view tag);

// Replaces the five predefined entities and numeric character references (&#NN; &#xNN;).
std::string XmlUnescape(absl::string_view text);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_XML_SCAN_H_
