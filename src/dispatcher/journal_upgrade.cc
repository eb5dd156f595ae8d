#include "src/dispatcher/journal_upgrade.h"

#include "absl/strings/str_cat.h"
#include "src/job/job_settings.h"

namespace croupier {
namespace {

// Version 2's text settings of a JobCreated, written into the spec's enums.
absl::Status UpgradeJobCreatedFromV2(absl::string_view payload, journal::Update& update) {
  journal::V2Update v2;
  if (!v2.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError("not a version 2 journal update");
  }
  const journal::V2JobSettings& text = v2.job_created().job().spec();
  v1::JobSpec& spec = *update.mutable_job_created()->mutable_job()->mutable_spec();
  absl::Status set = SetSettingsFromText({.source = text.source(),
                                          .mode = text.mode(),
                                          .shuffle = text.shuffle(),
                                          .remainder = text.remainder(),
                                          .compression = text.compression()},
                                         spec);
  if (!set.ok()) {
    return absl::DataLossError(
        absl::StrCat("job '", spec.name(), "' of a version 2 journal: ", set.message()));
  }
  // The text fields, unknown to the current JobSpec, stay out of the state.
  spec.GetReflection()->MutableUnknownFields(&spec)->Clear();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<journal::Update> ParseJournalEntry(uint32_t version, absl::string_view payload) {
  journal::Update update;
  if (!update.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError("not a journal update");
  }
  if (version == 2 && update.has_job_created()) {
    if (absl::Status s = UpgradeJobCreatedFromV2(payload, update); !s.ok()) return s;
  }
  return update;
}

}  // namespace croupier
