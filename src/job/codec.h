// How producers compress a job's batches on the TCP data plane (JobSpec.compression): the codec
// as a setting. The codec itself is src/transport/compression.h.
#ifndef CROUPIER_SRC_JOB_CODEC_H_
#define CROUPIER_SRC_JOB_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

// The wire values of the codec field of a BATCH_COMPRESSED frame; kNone never appears there.
enum class Codec : uint32_t {
  kNone = 0,
  kZstd = 1,
  kLz4 = 2,
};

// "none" (or ""), "zstd", "lz4". INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<Codec> ParseCodec(absl::string_view name);
// "none", "zstd", "lz4"; "codec <n>" for a value that is not one.
std::string CodecName(Codec codec);
// Whether `value` (a wire field) names a codec other than kNone.
bool IsCompressingCodec(uint32_t value);

}  // namespace croupier

#endif  // CROUPIER_SRC_JOB_CODEC_H_
