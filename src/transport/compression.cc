#include "src/transport/compression.h"

#include <lz4.h>
#include <zstd.h>

#include <limits>

#include "absl/strings/str_cat.h"

namespace croupier {
namespace {

// zstd's fastest standard level: batches are compressed on the send path, once per delivery.
constexpr int kZstdLevel = 1;

}  // namespace

uint64_t MaxCompressibleBytes(Codec codec) {
  switch (codec) {
    case Codec::kZstd:
      return uint64_t{1} << 32;
    case Codec::kLz4:
      return LZ4_MAX_INPUT_SIZE;
    case Codec::kNone:
      break;
  }
  return 0;
}

absl::StatusOr<std::string> Compress(Codec codec, absl::string_view input) {
  if (codec == Codec::kNone || input.size() > MaxCompressibleBytes(codec)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot compress ", input.size(),
                                                   " bytes with ", CodecName(codec)));
  }
  std::string out;
  if (codec == Codec::kZstd) {
    out.resize(ZSTD_compressBound(input.size()));
    const size_t n =
        ZSTD_compress(out.data(), out.size(), input.data(), input.size(), kZstdLevel);
    if (ZSTD_isError(n)) {
      return absl::InternalError(absl::StrCat("zstd compression failed: ", ZSTD_getErrorName(n)));
    }
    out.resize(n);
    return out;
  }
  const int bound = LZ4_compressBound(static_cast<int>(input.size()));
  out.resize(static_cast<size_t>(bound));
  const int n = LZ4_compress_default(input.data(), out.data(), static_cast<int>(input.size()),
                                     bound);
  if (n <= 0) return absl::InternalError("lz4 compression failed");
  out.resize(static_cast<size_t>(n));
  return out;
}

absl::Status Decompress(Codec codec, absl::string_view input, char* out, uint64_t size) {
  switch (codec) {
    case Codec::kZstd: {
      // The frame's own content size, when it states one, must agree with the claim.
      const unsigned long long stated = ZSTD_getFrameContentSize(input.data(), input.size());
      if (stated == ZSTD_CONTENTSIZE_ERROR) {
        return absl::DataLossError("not a zstd frame");
      }
      if (stated != ZSTD_CONTENTSIZE_UNKNOWN && stated != size) {
        return absl::DataLossError(absl::StrCat("zstd frame of ", stated,
                                                " bytes where the frame claims ", size));
      }
      const size_t n = ZSTD_decompress(out, size, input.data(), input.size());
      if (ZSTD_isError(n)) {
        return absl::DataLossError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
      }
      if (n != size) {
        return absl::DataLossError(
            absl::StrCat("zstd body gives ", n, " bytes where the frame claims ", size));
      }
      return absl::OkStatus();
    }
    case Codec::kLz4: {
      constexpr uint64_t kIntMax = static_cast<uint64_t>(std::numeric_limits<int>::max());
      if (size > kIntMax || input.size() > kIntMax) {
        return absl::DataLossError(absl::StrCat("lz4 block of ", input.size(), " bytes claiming ",
                                                size, " bytes exceeds lz4's limits"));
      }
      // The safe decoder never writes past `size` nor reads past the input.
      const int n = LZ4_decompress_safe(input.data(), out, static_cast<int>(input.size()),
                                        static_cast<int>(size));
      if (n < 0) return absl::DataLossError("lz4: corrupt block");
      if (static_cast<uint64_t>(n) != size) {
        return absl::DataLossError(
            absl::StrCat("lz4 body gives ", n, " bytes where the frame claims ", size));
      }
      return absl::OkStatus();
    }
    case Codec::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot decompress with ", CodecName(codec)));
}

}  // namespace croupier
