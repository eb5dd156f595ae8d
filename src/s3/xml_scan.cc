#include "src/s3/xml_scan.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace croupier::s3 {
namespace {

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> out;
  const std::string open = absl::StrCat("<", tag, ">"), close = absl::StrCat("</", tag, ">");
  size_t at = 0;
  while (true) {
    const size_t begin = xml.find(open, at);
    if (begin == absl::string_view::npos) break;
    const size_t body = begin + open.size();
    const size_t end = xml.find(close, body);
    if (end == absl::string_view::npos) break;
    out.push_back(xml.substr(body, end - body));
    at = end + close.size();
  }
  return out;
}

std::optional<std::string> XmlText(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> found = XmlElements(xml, tag);
  if (found.empty()) return std::nullopt;
  return XmlUnescape(found.front());
}

std::string XmlUnescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t semi = text[i] == '&' ? text.find(';', i) : absl::string_view::npos;
    if (semi == absl::string_view::npos) {
      out.push_back(text[i]);
      continue;
    }
    absl::string_view name = text.substr(i + 1, semi - i - 1);
    uint32_t cp = 0;
    if (name == "amp") {
      out.push_back('&');
    } else if (name == "lt") {
      out.push_back('<');
    } else if (name == "gt") {
      out.push_back('>');
    } else if (name == "quot") {
      out.push_back('"');
    } else if (name == "apos") {
      out.push_back('\'');
    } else if (name.size() > 2 && name[0] == '#' && (name[1] == 'x' || name[1] == 'X') &&
               absl::SimpleHexAtoi(name.substr(2), &cp)) {
      AppendUtf8(cp, out);
    } else if (name.size() > 1 && name[0] == '#' && absl::SimpleAtoi(name.substr(1), &cp)) {
      AppendUtf8(cp, out);
    } else {
      out.push_back(text[i]);
      continue;
    }
    i = semi;
  }
  return out;
}

}  // namespace croupier::s3
