// Optional compression of batch bytes on the TCP data plane (JobSpec.compression). The codec
// itself: no sockets, no frames (frame.h carries the result as a BATCH_COMPRESSED frame).
#ifndef CROUPIER_SRC_TRANSPORT_COMPRESSION_H_
#define CROUPIER_SRC_TRANSPORT_COMPRESSION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/job/codec.h"

namespace croupier {

// The largest input Compress takes (lz4's limit, about 2 GiB). A larger batch is sent as is.
uint64_t MaxCompressibleBytes(Codec codec);

// `input` compressed with `codec` (zstd level 1, lz4 default). INVALID_ARGUMENT for kNone or an
// input above MaxCompressibleBytes; INTERNAL if the library fails.
absl::StatusOr<std::string> Compress(Codec codec, absl::string_view input);

// Decompresses `input` into out[0, size): `size` is the sender's claim of the uncompressed size,
// which the caller has bounded before allocating `out`. DATA_LOSS when the input is not one
// complete compressed frame of exactly `size` bytes (corrupt, truncated, longer or shorter);
// INVALID_ARGUMENT for kNone or an unknown codec.
absl::Status Decompress(Codec codec, absl::string_view input, char* out, uint64_t size);

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_COMPRESSION_H_
