#include "src/job/job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/enum_names.h"
#include "src/common/status_macros.h"
#include "src/job/job_settings.h"

namespace croupier {
namespace {

constexpr EnumName<SourceKind> kSourceNames[] = {{SourceKind::kTfrecord, "tfrecord"},
                                                 {SourceKind::kPython, "python"},
                                                 {SourceKind::kMap, "map"},
                                                 {SourceKind::kTokens, "tokens"}};
constexpr EnumName<DealMode> kModeNames[] = {{DealMode::kDealt, "dealt"},
                                             {DealMode::kFirstCome, "first_come"}};

}  // namespace

absl::string_view SourceKindName(SourceKind source) { return NameOf(kSourceNames, source); }
absl::string_view DealModeName(DealMode mode) { return NameOf(kModeNames, mode); }
absl::StatusOr<SourceKind> ParseSourceKind(absl::string_view name) {
  return ParseName(kSourceNames, "source", name);
}
absl::StatusOr<DealMode> ParseDealMode(absl::string_view name) {
  return ParseName(kModeNames, "mode", name);
}

uint64_t JobConfig::FirstBatch(uint64_t epoch) const {
  if (epoch < start_epoch) return batches_per_epoch;
  if (epoch == start_epoch) return std::min(start_batch, batches_per_epoch);
  return 0;
}

uint64_t JobConfig::StepsInEpoch(uint64_t epoch) const {
  const uint64_t n = num_consumers();
  if (n == 0) return 0;
  return (batches_per_epoch - FirstBatch(epoch)) / n;
}

uint64_t JobConfig::EndBatch(uint64_t epoch) const {
  return FirstBatch(epoch) + StepsInEpoch(epoch) * num_consumers();
}

uint64_t JobConfig::GlobalBatch(uint64_t epoch, uint64_t step, uint32_t rank) const {
  return FirstBatch(epoch) + step * num_consumers() + rank;
}

uint64_t JobConfig::TaskStart(uint64_t epoch, uint64_t batch) const {
  const uint64_t first = FirstBatch(epoch);
  return first + (batch - first) / batches_per_task * batches_per_task;
}

uint64_t JobConfig::TaskEnd(uint64_t epoch, uint64_t start) const {
  const uint64_t end = EndBatch(epoch);
  return start >= end ? end : start + std::min(batches_per_task, end - start);
}

uint64_t JobConfig::TaskOrdinal(uint64_t epoch, uint64_t batch) const {
  if (epoch < start_epoch || batches_per_task == 0) return 0;
  const auto tasks_to = [this](uint64_t e, uint64_t b) {  // of epoch e, before batch b
    const uint64_t first = FirstBatch(e);
    const uint64_t at = std::clamp(b, first, std::max(first, EndBatch(e)));
    return (at - first + batches_per_task - 1) / batches_per_task;
  };
  if (epoch == start_epoch) return tasks_to(epoch, batch);
  // The first epoch, then epochs that each deal [0, EndBatch) alike.
  const uint64_t first_epoch = tasks_to(start_epoch, EndBatch(start_epoch));
  const uint64_t per_epoch = tasks_to(start_epoch + 1, EndBatch(start_epoch + 1));
  return first_epoch + (epoch - start_epoch - 1) * per_epoch + tasks_to(epoch, batch);
}

uint32_t JobConfig::SourceOf(uint64_t epoch, uint64_t batch) const {
  if (!python()) return 0;
  const uint64_t task = (batch - FirstBatch(epoch)) / batches_per_task;
  return static_cast<uint32_t>(task % source_count);
}

uint64_t JobConfig::SourceOrdinal(uint64_t epoch, uint64_t batch) const {
  const uint64_t offset = batch - FirstBatch(epoch);
  if (!python()) return offset;
  const uint64_t task = offset / batches_per_task;
  return task / source_count * batches_per_task + offset % batches_per_task;
}

std::optional<std::pair<uint64_t, uint64_t>> JobConfig::LastTaskEnd(uint32_t source) const {
  if (num_epochs == 0 || batches_per_task == 0 || source >= source_count) return std::nullopt;
  // Every epoch after start_epoch deals the same batches, and those before it none: the last
  // epoch, then start_epoch, are the only ones to look at.
  for (uint64_t epoch : {num_epochs - 1, std::min(start_epoch, num_epochs - 1)}) {
    const uint64_t first = FirstBatch(epoch), end = EndBatch(epoch);
    if (first >= end) continue;
    const uint64_t tasks = (end - first + batches_per_task - 1) / batches_per_task;
    for (uint64_t task = tasks; task-- > 0;) {
      const uint64_t start = first + task * batches_per_task;
      if (SourceOf(epoch, start) == source) return std::make_pair(epoch, TaskEnd(epoch, start));
    }
  }
  return std::nullopt;
}

absl::StatusOr<JobConfig> ParseJobConfig(const v1::JobInfo& info) {
  const v1::JobSpec& spec = info.spec();
  auto error = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat("job '", spec.name(), "': ", s.message()));
  };
  JobConfig job;
  job.name = spec.name();
  absl::StatusOr<TypedSettings> settings = TypedSettingsOf(spec);
  if (!settings.ok()) return error(settings.status());
  job.source = settings->source;
  job.mode = settings->mode;
  job.compression = settings->compression;
  job.features = spec.features();
  job.plan.num_records = info.num_records();
  job.plan.seed = spec.seed();
  job.plan.batch_size = spec.batch_size();
  job.plan.num_consumers = spec.num_consumers();
  job.plan.shuffle = settings->shuffle;
  job.plan.remainder = settings->remainder;
  if (spec.block_size() != 0) job.plan.block_size = spec.block_size();
  if (spec.window_blocks() != 0) job.plan.window_blocks = spec.window_blocks();
  job.num_epochs = spec.num_epochs();
  job.batches_per_epoch = info.batches_per_epoch();
  job.steps_per_epoch = info.steps_per_epoch();
  job.batches_per_task = info.batches_per_task();
  job.start_epoch = spec.start_epoch();
  job.start_batch = spec.start_batch();
  job.source_count = std::max<uint32_t>(1, spec.source_count());
  job.skip_failing_records = spec.skip_failing_records();
  job.text_tokens = job.tokens() && spec.tokens().text_size() > 0;
  return job;
}

}  // namespace croupier
