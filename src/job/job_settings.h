// A job's enum settings (source, mode, shuffle, remainder, compression) in their three forms: the
// wire's enums (proto/croupier.proto, what JobSpec carries), the typed values every component
// uses (src/job/job.h, croupier/plan.h, src/job/codec.h), and the text of the command line and
// the Python API ("tfrecord", "first_come", "global", "pad", "zstd"). Each conversion is here
// once; the edges (tools/, python/src/, src/job/job_json.h) call these.
#ifndef CROUPIER_SRC_JOB_JOB_SETTINGS_H_
#define CROUPIER_SRC_JOB_JOB_SETTINGS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "croupier/deal_mode.h"
#include "croupier/plan.h"
#include "google/protobuf/descriptor.h"
#include "proto/croupier.pb.h"
#include "src/job/codec.h"
#include "src/job/job.h"
#include "src/plan/token_plan.h"

namespace croupier {

// Wire value -> typed. UNSPECIFIED is the setting's default (tfrecord, dealt, global, drop,
// none). A proto3 enum field can hold any number: INVALID_ARGUMENT naming the setting and the
// number for one the enum does not define (a peer of a later version).
absl::StatusOr<SourceKind> FromProto(v1::SourceKind value);
absl::StatusOr<DealMode> FromProto(v1::DealMode value);
absl::StatusOr<ShuffleMode> FromProto(v1::Shuffle value);
absl::StatusOr<Remainder> FromProto(v1::Remainder value);
absl::StatusOr<Codec> FromProto(v1::Compression value);
absl::StatusOr<Packing> FromProto(v1::Packing value);  // a tokens job's (UNSPECIFIED: concat)

// Typed -> wire value (never UNSPECIFIED).
v1::SourceKind ToProto(SourceKind value);
v1::DealMode ToProto(DealMode value);
v1::Shuffle ToProto(ShuffleMode value);
v1::Remainder ToProto(Remainder value);
v1::Compression ToProto(Codec value);
v1::Packing ToProto(Packing value);

// The five settings of a spec, typed.
struct TypedSettings {
  SourceKind source = SourceKind::kTfrecord;
  DealMode mode = DealMode::kDealt;
  ShuffleMode shuffle = ShuffleMode::kGlobal;
  Remainder remainder = Remainder::kDrop;
  Codec compression = Codec::kNone;
};
// The settings of `spec`, each UNSPECIFIED as its default; FromProto's errors.
absl::StatusOr<TypedSettings> TypedSettingsOf(const v1::JobSpec& spec);
// Writes every setting of `settings` into `spec`, explicitly.
void SetTypedSettings(const TypedSettings& settings, v1::JobSpec& spec);

// The settings as text, as the command line and the Python API give them; "" leaves a setting
// UNSPECIFIED (its default).
struct SettingsText {
  std::string source{};
  std::string mode{};
  std::string shuffle{};
  std::string remainder{};
  std::string compression{};
};
// Sets the five enum fields of `spec` from `text`. INVALID_ARGUMENT for a name that is not the
// setting's, listing the accepted ones ("unknown shuffle mode 'x'; expected one of none, ...").
absl::Status SetSettingsFromText(const SettingsText& text, v1::JobSpec& spec);
// The text of each setting of `spec`: "" for UNSPECIFIED, "invalid" for an undefined number.
SettingsText SettingsTextOf(const v1::JobSpec& spec);

// A job's state (GetStatus, GetJob) by its name: "idle", "running", "done"; "" for
// JOB_STATE_UNSPECIFIED (a dispatcher that does not say), "invalid" for an undefined number.
absl::string_view JobStateName(v1::JobState state);

// The same, one enum at a time, by its descriptor, for the JSON forms (src/job/job_json.h).
// Whether `type` is one of the five settings' enums, Packing (a tokens job's: "concat",
// "best_fit"), or JobState (named as above).
bool IsSettingEnum(const google::protobuf::EnumDescriptor* type);
// The text of `number` of setting enum `type` ("" for 0, "invalid" for an undefined number).
std::string SettingText(const google::protobuf::EnumDescriptor* type, int number);
// The number of the text `text` of setting enum `type` (0 for ""); INVALID_ARGUMENT as above.
absl::StatusOr<int> SettingNumber(const google::protobuf::EnumDescriptor* type,
                                  absl::string_view text);

}  // namespace croupier

#endif  // CROUPIER_SRC_JOB_JOB_SETTINGS_H_
