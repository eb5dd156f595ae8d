#include "src/job/codec.h"

#include "absl/strings/str_cat.h"
#include "src/common/enum_names.h"

namespace croupier {
namespace {

constexpr EnumName<Codec> kCodecNames[] = {
    {Codec::kNone, "none"}, {Codec::kZstd, "zstd"}, {Codec::kLz4, "lz4"}};

}  // namespace

absl::StatusOr<Codec> ParseCodec(absl::string_view name) {
  return ParseName(kCodecNames, "compression", name.empty() ? "none" : name);
}

std::string CodecName(Codec codec) {
  absl::string_view name = NameOf(kCodecNames, codec);
  if (name == "invalid") return absl::StrCat("codec ", static_cast<uint32_t>(codec));
  return std::string(name);
}

bool IsCompressingCodec(uint32_t value) {
  return value == static_cast<uint32_t>(Codec::kZstd) ||
         value == static_cast<uint32_t>(Codec::kLz4);
}

}  // namespace croupier
