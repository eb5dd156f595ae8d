#include "src/dispatcher/kept_counts.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/crc32c.h"
#include "src/common/logging.h"
#include "src/io/tfrecord_format.h"

namespace croupier {
namespace {

constexpr absl::string_view kMagic = "CRCOUNT1";
constexpr absl::string_view kSuffix = ".crcounts";

}  // namespace

std::string KeptCountsPath(Env& env, const std::string& pattern) {
  const size_t wildcard = pattern.find_first_of("*?[");
  if (wildcard == std::string::npos) return "";
  const size_t slash = pattern.rfind('/', wildcard);
  if (slash == std::string::npos) return "";
  const std::string name =
      absl::StrFormat("%s/pattern-%08x", pattern.substr(0, slash), crc32c::Value(pattern));
  return env.SharedDerivedPath(name, kSuffix);
}

std::string SerializeKeptCounts(const v1::KeptCounts& counts) {
  std::string out(kMagic);
  const std::string message = counts.SerializeAsString();
  out.append(message);
  char crc[4];
  tfrecord::EncodeU32(crc, crc32c::Mask(crc32c::Value(message)));
  out.append(crc, sizeof(crc));
  return out;
}

absl::StatusOr<v1::KeptCounts> ParseKeptCounts(absl::string_view bytes, absl::string_view source) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("kept counts ", source, " are invalid: ", why));
  };
  if (bytes.size() < kMagic.size() + 4) return bad("shorter than their magic and checksum");
  if (bytes.substr(0, kMagic.size()) != kMagic) return bad("wrong magic bytes");
  const absl::string_view message = bytes.substr(kMagic.size(), bytes.size() - kMagic.size() - 4);
  if (crc32c::Unmask(tfrecord::DecodeU32(bytes.data() + bytes.size() - 4)) !=
      crc32c::Value(message)) {
    return bad("checksum mismatch");
  }
  v1::KeptCounts counts;
  if (!counts.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    return bad("not a KeptCounts message");
  }
  return counts;
}

std::optional<std::vector<uint64_t>> ReadKeptCounts(Env& env, const std::string& pattern,
                                                    absl::Span<const std::string> files,
                                                    absl::Span<const FileStat> known) {
  const std::string path = KeptCountsPath(env, pattern);
  if (path.empty()) return std::nullopt;
  absl::StatusOr<std::string> bytes = ReadFileToString(env, path);
  if (!bytes.ok()) {
    if (!absl::IsNotFound(bytes.status())) {
      Log(LogLevel::kWarning, "index",
          absl::StrCat("could not read the kept counts of '", pattern,
                       "' (indexing its files instead): ", bytes.status().message()));
    }
    return std::nullopt;
  }
  absl::StatusOr<v1::KeptCounts> kept = ParseKeptCounts(*bytes, path);
  if (!kept.ok() || kept->pattern() != pattern) {
    Log(LogLevel::kWarning, "index",
        absl::StrCat(kept.ok()
                         ? absl::StrCat("the kept counts ", path, " are of '", kept->pattern(), "'")
                         : std::string(kept.status().message()),
                     "; indexing the files of '", pattern, "' instead"));
    return std::nullopt;
  }
  absl::flat_hash_map<absl::string_view, const v1::FileInfo*> by_path;
  for (const v1::FileInfo& f : kept->files()) by_path[f.path()] = &f;
  std::vector<uint64_t> counts;
  counts.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    auto it = by_path.find(files[i]);
    if (it == by_path.end()) return std::nullopt;
    const v1::FileInfo& f = *it->second;
    if (known[i].etag.empty() || f.etag() != known[i].etag || f.size_bytes() != known[i].size ||
        f.mtime_ns() != known[i].mtime_ns) {
      return std::nullopt;
    }
    counts.push_back(f.num_records());
  }
  return counts;
}

void WriteKeptCounts(Env& env, const std::string& pattern, absl::Span<const v1::FileInfo> files) {
  const std::string path = KeptCountsPath(env, pattern);
  if (path.empty()) return;
  v1::KeptCounts kept;
  kept.set_pattern(pattern);
  for (const v1::FileInfo& f : files) {
    if (f.etag().empty()) return;  // not an object's: nothing would take it
    *kept.add_files() = f;
  }
  if (absl::Status put = env.WriteFileAtomically(path, SerializeKeptCounts(kept)); !put.ok()) {
    Log(LogLevel::kWarning, "index",
        absl::StrCat("could not keep the record counts of '", pattern,
                     "' (the next job will read each file's index): ", put.message()));
  }
}

}  // namespace croupier
