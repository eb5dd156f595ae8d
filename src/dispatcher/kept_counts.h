// The record counts a dispatcher keeps in an object store beside a pattern's objects
// (v1::KeptCounts; docs/formats.md). The first job on a pattern indexes every object it matches
// and keeps their counts in one object; a later job on the same pattern takes the count of each
// object whose size, Last-Modified and ETag are still those kept, from that one GET, instead of
// a GET of every object's index (Dataset::OpenKnown). Nothing trusts a kept count blindly: each
// producer checks it against the object's index as it loads it, so that a wrong one fails the
// batches that need the object, naming it.
#ifndef CROUPIER_SRC_DISPATCHER_KEPT_COUNTS_H_
#define CROUPIER_SRC_DISPATCHER_KEPT_COUNTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/croupier.pb.h"
#include "src/common/env.h"

namespace croupier {

// Where the counts of `pattern`'s matches are kept: env.SharedDerivedPath of
// "<the pattern's directory>/pattern-<CRC-32C of the pattern, 8 hex digits>" with the suffix
// ".crcounts" (s3://B/.croupier-index/B/data/pattern-1a2b3c4d.crcounts for
// s3://B/data/*.tfrecord). Empty when they are not kept: a pattern without a wildcard (one
// object, whose own index is one GET), or one whose Env keeps no shared files (local files, or
// CROUPIER_S3_INDEX_PREFIX=off).
std::string KeptCountsPath(Env& env, const std::string& pattern);

// The count of each of `files` (a listing of `pattern`; known[i] what it said of files[i]) as
// kept at KeptCountsPath, or nullopt unless every file has one: nothing kept, a file added or
// written again since (another size, Last-Modified or ETag, or none), or kept bytes that are not
// the counts of this pattern (logged as a warning). The kept object is read with one GET.
std::optional<std::vector<uint64_t>> ReadKeptCounts(Env& env, const std::string& pattern,
                                                    absl::Span<const std::string> files,
                                                    absl::Span<const FileStat> known);

// Keeps `files` (the pattern's matches as a job's FileInfo names them, each with its ETag) at
// KeptCountsPath, in one PUT. A failure is logged as a warning, not returned: the next job
// indexes again.
void WriteKeptCounts(Env& env, const std::string& pattern, absl::Span<const v1::FileInfo> files);

// The kept bytes: "CRCOUNT1", the KeptCounts message, and the message's masked CRC-32C (4 bytes,
// little-endian). Parse: DATA_LOSS naming `source` for a wrong magic, checksum or message.
std::string SerializeKeptCounts(const v1::KeptCounts& counts);
absl::StatusOr<v1::KeptCounts> ParseKeptCounts(absl::string_view bytes, absl::string_view source);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_KEPT_COUNTS_H_
