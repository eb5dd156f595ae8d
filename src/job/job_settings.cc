#include "src/job/job_settings.h"

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

absl::Status Undefined(absl::string_view setting, int number) {
  return absl::InvalidArgumentError(
      absl::StrCat(setting, " ", number, " is not a value this croupier knows"));
}

// The text of a typed value, through its wire value's FromProto.
template <typename Wire, typename Name>
std::string TextOf(Wire value, Name name) {
  if (static_cast<int>(value) == 0) return "";
  auto typed = FromProto(value);
  return typed.ok() ? std::string(name(*typed)) : "invalid";
}

// The wire value of a text, through the setting's parse.
template <typename Wire, typename Parse>
absl::StatusOr<Wire> WireOf(absl::string_view text, Parse parse) {
  if (text.empty()) return static_cast<Wire>(0);
  ASSIGN_OR_RETURN(auto typed, parse(text));
  return ToProto(typed);
}

}  // namespace

absl::StatusOr<SourceKind> FromProto(v1::SourceKind value) {
  switch (value) {
    case v1::SOURCE_KIND_UNSPECIFIED:
    case v1::SOURCE_KIND_TFRECORD:
      return SourceKind::kTfrecord;
    case v1::SOURCE_KIND_PYTHON:
      return SourceKind::kPython;
    case v1::SOURCE_KIND_MAP:
      return SourceKind::kMap;
    case v1::SOURCE_KIND_TOKENS:
      return SourceKind::kTokens;
    default:
      return Undefined("source", value);
  }
}

absl::StatusOr<DealMode> FromProto(v1::DealMode value) {
  switch (value) {
    case v1::DEAL_MODE_UNSPECIFIED:
    case v1::DEAL_MODE_DEALT:
      return DealMode::kDealt;
    case v1::DEAL_MODE_FIRST_COME:
      return DealMode::kFirstCome;
    default:
      return Undefined("mode", value);
  }
}

absl::StatusOr<ShuffleMode> FromProto(v1::Shuffle value) {
  switch (value) {
    case v1::SHUFFLE_NONE:
      return ShuffleMode::kNone;
    case v1::SHUFFLE_UNSPECIFIED:
    case v1::SHUFFLE_GLOBAL:
      return ShuffleMode::kGlobal;
    case v1::SHUFFLE_BLOCKS:
      return ShuffleMode::kBlocks;
    default:
      return Undefined("shuffle mode", value);
  }
}

absl::StatusOr<Remainder> FromProto(v1::Remainder value) {
  switch (value) {
    case v1::REMAINDER_UNSPECIFIED:
    case v1::REMAINDER_DROP:
      return Remainder::kDrop;
    case v1::REMAINDER_PAD:
      return Remainder::kPad;
    default:
      return Undefined("remainder policy", value);
  }
}

absl::StatusOr<Codec> FromProto(v1::Compression value) {
  switch (value) {
    case v1::COMPRESSION_UNSPECIFIED:
    case v1::COMPRESSION_NONE:
      return Codec::kNone;
    case v1::COMPRESSION_ZSTD:
      return Codec::kZstd;
    case v1::COMPRESSION_LZ4:
      return Codec::kLz4;
    default:
      return Undefined("compression", value);
  }
}

absl::StatusOr<Packing> FromProto(v1::Packing value) {
  switch (value) {
    case v1::PACKING_UNSPECIFIED:
    case v1::PACKING_CONCAT:
      return Packing::kConcat;
    case v1::PACKING_BEST_FIT:
      return Packing::kBestFit;
    default:
      return Undefined("packing", value);
  }
}

v1::Packing ToProto(Packing value) {
  switch (value) {
    case Packing::kConcat:
      return v1::PACKING_CONCAT;
    case Packing::kBestFit:
      return v1::PACKING_BEST_FIT;
  }
  return v1::PACKING_UNSPECIFIED;
}

v1::SourceKind ToProto(SourceKind value) {
  switch (value) {
    case SourceKind::kTfrecord:
      return v1::SOURCE_KIND_TFRECORD;
    case SourceKind::kPython:
      return v1::SOURCE_KIND_PYTHON;
    case SourceKind::kMap:
      return v1::SOURCE_KIND_MAP;
    case SourceKind::kTokens:
      return v1::SOURCE_KIND_TOKENS;
  }
  return v1::SOURCE_KIND_UNSPECIFIED;
}

v1::DealMode ToProto(DealMode value) {
  switch (value) {
    case DealMode::kDealt:
      return v1::DEAL_MODE_DEALT;
    case DealMode::kFirstCome:
      return v1::DEAL_MODE_FIRST_COME;
  }
  return v1::DEAL_MODE_UNSPECIFIED;
}

v1::Shuffle ToProto(ShuffleMode value) {
  switch (value) {
    case ShuffleMode::kNone:
      return v1::SHUFFLE_NONE;
    case ShuffleMode::kGlobal:
      return v1::SHUFFLE_GLOBAL;
    case ShuffleMode::kBlocks:
      return v1::SHUFFLE_BLOCKS;
  }
  return v1::SHUFFLE_UNSPECIFIED;
}

v1::Remainder ToProto(Remainder value) {
  switch (value) {
    case Remainder::kDrop:
      return v1::REMAINDER_DROP;
    case Remainder::kPad:
      return v1::REMAINDER_PAD;
  }
  return v1::REMAINDER_UNSPECIFIED;
}

v1::Compression ToProto(Codec value) {
  switch (value) {
    case Codec::kNone:
      return v1::COMPRESSION_NONE;
    case Codec::kZstd:
      return v1::COMPRESSION_ZSTD;
    case Codec::kLz4:
      return v1::COMPRESSION_LZ4;
  }
  return v1::COMPRESSION_UNSPECIFIED;
}

absl::StatusOr<TypedSettings> TypedSettingsOf(const v1::JobSpec& spec) {
  TypedSettings out;
  ASSIGN_OR_RETURN(out.source, FromProto(spec.source()));
  ASSIGN_OR_RETURN(out.mode, FromProto(spec.mode()));
  ASSIGN_OR_RETURN(out.shuffle, FromProto(spec.shuffle()));
  ASSIGN_OR_RETURN(out.remainder, FromProto(spec.remainder()));
  ASSIGN_OR_RETURN(out.compression, FromProto(spec.compression()));
  return out;
}

void SetTypedSettings(const TypedSettings& settings, v1::JobSpec& spec) {
  spec.set_source(ToProto(settings.source));
  spec.set_mode(ToProto(settings.mode));
  spec.set_shuffle(ToProto(settings.shuffle));
  spec.set_remainder(ToProto(settings.remainder));
  spec.set_compression(ToProto(settings.compression));
}

absl::Status SetSettingsFromText(const SettingsText& text, v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(v1::SourceKind source, WireOf<v1::SourceKind>(text.source, ParseSourceKind));
  ASSIGN_OR_RETURN(v1::DealMode mode, WireOf<v1::DealMode>(text.mode, ParseDealMode));
  ASSIGN_OR_RETURN(v1::Shuffle shuffle, WireOf<v1::Shuffle>(text.shuffle, ParseShuffleMode));
  ASSIGN_OR_RETURN(v1::Remainder remainder, WireOf<v1::Remainder>(text.remainder, ParseRemainder));
  ASSIGN_OR_RETURN(v1::Compression compression,
                   WireOf<v1::Compression>(text.compression, ParseCodec));
  spec.set_source(source);
  spec.set_mode(mode);
  spec.set_shuffle(shuffle);
  spec.set_remainder(remainder);
  spec.set_compression(compression);
  return absl::OkStatus();
}

SettingsText SettingsTextOf(const v1::JobSpec& spec) {
  SettingsText out;
  out.source = TextOf(spec.source(), SourceKindName);
  out.mode = TextOf(spec.mode(), DealModeName);
  out.shuffle = TextOf(spec.shuffle(), ShuffleModeName);
  out.remainder = TextOf(spec.remainder(), RemainderName);
  out.compression = TextOf(spec.compression(), CodecName);
  return out;
}

absl::string_view JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_UNSPECIFIED:
      return "";
    case v1::JOB_STATE_IDLE:
      return "idle";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_DONE:
      return "done";
    default:
      return "invalid";
  }
}

bool IsSettingEnum(const google::protobuf::EnumDescriptor* type) {
  return type == v1::JobState_descriptor() || type == v1::SourceKind_descriptor() || type == v1::DealMode_descriptor() ||
         type == v1::Shuffle_descriptor() || type == v1::Remainder_descriptor() ||
         type == v1::Compression_descriptor() || type == v1::Packing_descriptor();
}

std::string SettingText(const google::protobuf::EnumDescriptor* type, int number) {
  if (type == v1::JobState_descriptor()) {
    return std::string(JobStateName(static_cast<v1::JobState>(number)));
  }
  if (type == v1::SourceKind_descriptor()) {
    return TextOf(static_cast<v1::SourceKind>(number), SourceKindName);
  }
  if (type == v1::DealMode_descriptor()) {
    return TextOf(static_cast<v1::DealMode>(number), DealModeName);
  }
  if (type == v1::Shuffle_descriptor()) {
    return TextOf(static_cast<v1::Shuffle>(number), ShuffleModeName);
  }
  if (type == v1::Remainder_descriptor()) {
    return TextOf(static_cast<v1::Remainder>(number), RemainderName);
  }
  if (type == v1::Compression_descriptor()) {
    return TextOf(static_cast<v1::Compression>(number), CodecName);
  }
  if (type == v1::Packing_descriptor()) {
    return TextOf(static_cast<v1::Packing>(number), PackingName);
  }
  return "invalid";
}

absl::StatusOr<int> SettingNumber(const google::protobuf::EnumDescriptor* type,
                                  absl::string_view text) {
  if (type == v1::JobState_descriptor()) {
    for (int n = v1::JobState_MIN; n <= v1::JobState_MAX; ++n) {
      if (JobStateName(static_cast<v1::JobState>(n)) == text) return n;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown job state '", text, "'; expected one of idle, running, done"));
  }
  if (type == v1::SourceKind_descriptor()) {
    return WireOf<v1::SourceKind>(text, ParseSourceKind);
  }
  if (type == v1::DealMode_descriptor()) return WireOf<v1::DealMode>(text, ParseDealMode);
  if (type == v1::Shuffle_descriptor()) return WireOf<v1::Shuffle>(text, ParseShuffleMode);
  if (type == v1::Remainder_descriptor()) return WireOf<v1::Remainder>(text, ParseRemainder);
  if (type == v1::Compression_descriptor()) return WireOf<v1::Compression>(text, ParseCodec);
  if (type == v1::Packing_descriptor()) return WireOf<v1::Packing>(text, ParsePacking);
  return absl::InvalidArgumentError(absl::StrCat(type->full_name(), " is not a job setting"));
}

}  // namespace croupier
