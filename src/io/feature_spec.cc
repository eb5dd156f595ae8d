// Feature specs: validation, and the `name:dtype[dims]` command-line syntax.
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "croupier/example.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

// Characters the spec syntax uses as delimiters, so a name cannot hold them.
constexpr char kNameDelimiters[] = ",:[]";

// Splits at commas outside brackets: "a:int64,b:float32[2,3]" -> {"a:int64", "b:float32[2,3]"}.
std::vector<absl::string_view> SplitItems(absl::string_view text) {
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']') --depth;
    if (text[i] == ',' && depth <= 0) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  items.push_back(text.substr(start));
  return items;
}

// The part of a spec item after the dtype: "" (scalar), "[*]" or "[d1,d2,...]".
absl::Status ParseShape(absl::string_view text, FeatureSpec& spec) {
  if (text.empty()) return absl::OkStatus();
  if (text.front() != '[' || text.back() != ']') {
    return absl::InvalidArgumentError("expected a shape in brackets after the dtype");
  }
  absl::string_view inside = absl::StripAsciiWhitespace(text.substr(1, text.size() - 2));
  if (inside.empty()) {
    return absl::InvalidArgumentError("empty shape '[]' (write no brackets for a scalar)");
  }
  if (inside == "*") {
    spec.variable_length = true;
    return absl::OkStatus();
  }
  for (absl::string_view dim_text : absl::StrSplit(inside, ',')) {
    dim_text = absl::StripAsciiWhitespace(dim_text);
    int64_t dim;
    if (!absl::SimpleAtoi(dim_text, &dim) ||
        dim_text.find_first_not_of("0123456789") != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad dim '", dim_text, "' (expected a positive integer, or [*] alone)"));
    }
    spec.shape.push_back(dim);
  }
  return absl::OkStatus();
}

absl::StatusOr<FeatureSpec> ParseItem(absl::string_view item) {
  FeatureSpec spec;
  size_t colon = item.find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError("expected name:dtype");
  }
  spec.name = std::string(absl::StripAsciiWhitespace(item.substr(0, colon)));
  absl::string_view rest = absl::StripAsciiWhitespace(item.substr(colon + 1));
  size_t bracket = rest.find('[');
  absl::string_view dtype_text = absl::StripAsciiWhitespace(rest.substr(0, bracket));
  ASSIGN_OR_RETURN(spec.dtype, ParseDType(dtype_text));
  if (bracket != absl::string_view::npos) {
    RETURN_IF_ERROR(ParseShape(rest.substr(bracket), spec));
  }
  return spec;
}

// Checks one spec on its own; the caller adds which one.
absl::Status ValidateSpec(const FeatureSpec& spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("empty feature name");
  if (spec.name.find_first_of(kNameDelimiters) != std::string::npos) {
    return absl::InvalidArgumentError("a feature name cannot hold any of ',:[]'");
  }
  // The spec syntax strips spaces around names, so such a name could not round-trip.
  if (absl::ascii_isspace(spec.name.front()) || absl::ascii_isspace(spec.name.back())) {
    return absl::InvalidArgumentError("a feature name cannot start or end with whitespace");
  }
  if (!IsDTypeCode(static_cast<uint8_t>(spec.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype value ", static_cast<int>(spec.dtype)));
  }
  if (spec.variable_length) {
    if (!spec.shape.empty()) {
      return absl::InvalidArgumentError("a variable-length feature cannot have a fixed shape");
    }
    return absl::OkStatus();
  }
  if (spec.shape.size() > kMaxFeatureRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", spec.shape.size(), " is above the limit of ", kMaxFeatureRank));
  }
  int64_t product = 1;
  for (int64_t dim : spec.shape) {
    if (dim < 1)
      return absl::InvalidArgumentError(absl::StrCat("bad dim ", dim, " (must be >= 1)"));
    if (dim > kMaxValuesPerRecord / product) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape holds more than ", kMaxValuesPerRecord, " values per record"));
    }
    product *= dim;
  }
  return absl::OkStatus();
}

}  // namespace

int64_t FeatureSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::Status ValidateFeatureSpecs(absl::Span<const FeatureSpec> specs) {
  if (specs.empty()) return absl::InvalidArgumentError("no features given");
  absl::flat_hash_set<absl::string_view> names;
  for (const FeatureSpec& spec : specs) {
    absl::Status status = ValidateSpec(spec);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature '", spec.name, "': ", status.message()));
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate feature name '", spec.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckExampleFeatureSpecs(absl::Span<const FeatureSpec> specs) {
  for (const FeatureSpec& spec : specs) {
    if (!IsExampleDType(spec.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature '", spec.name, "' is ", DTypeName(spec.dtype),
                       "; a tf.train.Example holds bytes, float32 and int64 only, so TFRecord "
                       "files cannot give it (a Python source, croupier.serve, can)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FeatureSpec>> ParseFeatureSpecs(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("empty feature spec (expected name:dtype[dims],...)");
  }
  std::vector<FeatureSpec> specs;
  absl::flat_hash_set<std::string> names;
  std::vector<absl::string_view> items = SplitItems(text);
  for (size_t i = 0; i < items.size(); ++i) {
    absl::string_view item = absl::StripAsciiWhitespace(items[i]);
    auto describe = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature spec item ", i + 1, " '", item, "': ", what));
    };
    if (item.empty()) return describe("empty item");
    absl::StatusOr<FeatureSpec> spec = ParseItem(item);
    if (!spec.ok()) return describe(spec.status().message());
    absl::Status valid = ValidateSpec(*spec);
    if (!valid.ok()) return describe(valid.message());
    if (!names.insert(spec->name).second) {
      return describe(absl::StrCat("duplicate feature name '", spec->name, "'"));
    }
    specs.push_back(*std::move(spec));
  }
  return specs;
}

std::string FormatFeatureSpecs(absl::Span<const FeatureSpec> specs) {
  std::vector<std::string> items;
  for (const FeatureSpec& spec : specs) {
    std::string item = absl::StrCat(spec.name, ":", DTypeName(spec.dtype));
    if (spec.variable_length) {
      absl::StrAppend(&item, "[*]");
    } else if (!spec.shape.empty()) {
      absl::StrAppend(&item, "[", absl::StrJoin(spec.shape, ","), "]");
    }
    items.push_back(std::move(item));
  }
  return absl::StrJoin(items, ",");
}

}  // namespace croupier
