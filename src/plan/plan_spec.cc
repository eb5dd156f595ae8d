// PlanSpec validation and the names of its enums.
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "croupier/plan.h"
#include "src/common/enum_names.h"
#include "src/common/status_macros.h"

namespace croupier {
namespace {

absl::Status AtLeastOne(absl::string_view setting, uint64_t value) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("plan spec: ", setting, " is 0; it must be at least 1"));
}

}  // namespace

namespace {

constexpr EnumName<ShuffleMode> kShuffleNames[] = {{ShuffleMode::kNone, "none"},
                                                   {ShuffleMode::kGlobal, "global"},
                                                   {ShuffleMode::kBlocks, "blocks"}};
constexpr EnumName<Remainder> kRemainderNames[] = {{Remainder::kDrop, "drop"},
                                                   {Remainder::kPad, "pad"}};

}  // namespace

absl::string_view ShuffleModeName(ShuffleMode mode) { return NameOf(kShuffleNames, mode); }
absl::string_view RemainderName(Remainder remainder) { return NameOf(kRemainderNames, remainder); }

absl::StatusOr<ShuffleMode> ParseShuffleMode(absl::string_view name) {
  return ParseName(kShuffleNames, "shuffle mode", name);
}
absl::StatusOr<Remainder> ParseRemainder(absl::string_view name) {
  return ParseName(kRemainderNames, "remainder policy", name);
}

absl::Status ValidatePlanSpec(const PlanSpec& spec) {
  if (spec.num_records < 1 || spec.num_records > PlanSpec::kMaxRecords) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan spec: num_records is ", spec.num_records, "; it must be in [1, 2^62]"));
  }
  RETURN_IF_ERROR(AtLeastOne("batch_size", spec.batch_size));
  RETURN_IF_ERROR(AtLeastOne("num_consumers", spec.num_consumers));
  RETURN_IF_ERROR(AtLeastOne("block_size", spec.block_size));
  RETURN_IF_ERROR(AtLeastOne("window_blocks", spec.window_blocks));
  // The enums may hold any value that came through a cast (from a wire format, say).
  if (ShuffleModeName(spec.shuffle) == "invalid") {
    return absl::InvalidArgumentError(absl::StrCat("plan spec: shuffle is ",
                                                   static_cast<int>(spec.shuffle),
                                                   "; it must be one of none, global, blocks"));
  }
  if (RemainderName(spec.remainder) == "invalid") {
    return absl::InvalidArgumentError(absl::StrCat("plan spec: remainder is ",
                                                   static_cast<int>(spec.remainder),
                                                   "; it must be one of drop, pad"));
  }
  const uint64_t round = uint64_t{spec.batch_size} * spec.num_consumers;
  if (spec.remainder == Remainder::kDrop && spec.num_records < round) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan spec: num_records is ", spec.num_records, ", fewer than batch_size*num_consumers = ",
        spec.batch_size, "*", spec.num_consumers, " = ", round,
        " records, so every epoch would be empty with remainder=drop; use remainder=pad or a "
        "smaller batch_size"));
  }
  return absl::OkStatus();
}

}  // namespace croupier
