// croupier inspect FILE [--limit K] [--json]: prints the features of each record.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "croupier/example.h"
#include "croupier/tfrecord.h"
#include "src/common/status_macros.h"
#include "tools/commands.h"

namespace croupier::cli {
namespace {

constexpr char kInspectDescription[] =
    "Prints the records of a TFRecord file, decoded as tf.train.Example.";

constexpr size_t kShownValues = 8;    // human view: values shown per feature
constexpr size_t kShownBytes = 48;    // human view: bytes shown per byte string

// Shortest text that reads back as the same float. JSON has no NaN or infinity: they are strings.
std::string FloatText(float v, bool json) {
  if (std::isnan(v)) return json ? "\"NaN\"" : "nan";
  if (std::isinf(v)) return json ? (v > 0 ? "\"Infinity\"" : "\"-Infinity\"") : (v > 0 ? "inf" : "-inf");
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string HumanBytes(const std::string& b) {
  bool printable = true;
  for (unsigned char c : b) printable &= c >= 0x20 && c < 0x7f;
  if (printable && b.size() <= kShownBytes) return absl::StrCat("\"", b, "\"");
  std::string head = absl::BytesToHexString(b.substr(0, 16));
  return absl::StrCat("<", b.size(), " bytes: ", head, b.size() > 16 ? "...>" : ">");
}

std::string JsonLine(const Example& example) {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, f] : example) {
    absl::StrAppend(&out, first ? "" : ", ", JsonString(name), ": [");
    first = false;
    std::string sep;
    for (const auto& b : f.bytes) absl::StrAppend(&out, std::exchange(sep, ", "), "\"", absl::Base64Escape(b), "\"");
    for (float v : f.floats) absl::StrAppend(&out, std::exchange(sep, ", "), FloatText(v, true));
    for (int64_t v : f.ints) absl::StrAppend(&out, std::exchange(sep, ", "), v);
    out += "]";
  }
  return out + "}";
}

std::string HumanText(const Example& example) {
  std::string out;
  for (const auto& [name, f] : example) {
    size_t n = f.bytes.size() + f.floats.size() + f.ints.size();
    absl::StrAppend(&out, "  ", name, ": ", f.kind_set ? DTypeName(f.dtype) : "none", "[", n,
                    "] = [");
    std::string sep;
    size_t shown = 0;
    for (const auto& b : f.bytes) {
      if (shown++ == kShownValues) break;
      absl::StrAppend(&out, std::exchange(sep, ", "), HumanBytes(b));
    }
    for (float v : f.floats) {
      if (shown++ == kShownValues) break;
      absl::StrAppend(&out, std::exchange(sep, ", "), FloatText(v, false));
    }
    for (int64_t v : f.ints) {
      if (shown++ == kShownValues) break;
      absl::StrAppend(&out, std::exchange(sep, ", "), v);
    }
    if (n > kShownValues) absl::StrAppend(&out, ", ... ", n - kShownValues, " more");
    out += "]\n";
  }
  return out;
}

struct InspectFlags {
  std::string file;
  int64_t limit = -1;
  bool json = false;
};

absl::Status Run(const InspectFlags& f) {
  const int64_t limit = f.limit;
  const std::string& path = f.file;
  ASSIGN_OR_RETURN(auto reader, RecordReader::Open(path));
  const bool json = f.json;
  int64_t count = 0;
  while (limit < 0 || count < limit) {
    ASSIGN_OR_RETURN(auto record, reader->Next());
    if (!record.has_value()) break;
    auto example = ParseExample(*record);
    if (!example.ok()) {
      return absl::Status(example.status().code(),
                          absl::StrCat("record ", count, " at byte ", reader->record_offset(),
                                       " of ", path, ": ", example.status().message()));
    }
    if (json) {
      std::printf("%s\n", JsonLine(*example).c_str());
    } else {
      std::printf("record %lld (byte %llu, %zu bytes)\n%s", static_cast<long long>(count),
                  static_cast<unsigned long long>(reader->record_offset()), record->size(),
                  HumanText(*example).c_str());
    }
    ++count;
  }
  if (!json) std::printf("%lld records shown\n", static_cast<long long>(count));
  return absl::OkStatus();
}

void Declare(CLI::App* app, InspectFlags* f) {
  app->add_option("file", f->file, "the TFRecord file")->required()->option_text("FILE");
  AddFlag(app, "--limit", &f->limit, "K", "show at most K records; -1: all")
      ->check(CLI::Range(int64_t{-1}, INT64_MAX))
      ->default_str("all");
  AddSwitch(app, "--json", &f->json, "one JSON object per record (bytes in base64)");
}

}  // namespace

Subcommand AddInspectCommand(CLI::App& parent) {
  return AddCommand<InspectFlags>(parent, "inspect", kInspectDescription, Declare, Run);
}

}  // namespace croupier::cli
