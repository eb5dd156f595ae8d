// Job specs as the dispatcher takes them: the checks that need no data, the defaults, and the
// comparison that decides whether a CreateJob with exist_ok may reuse an existing job.
#ifndef CROUPIER_SRC_DISPATCHER_JOB_SPEC_H_
#define CROUPIER_SRC_DISPATCHER_JOB_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "croupier/plan.h"
#include "proto/croupier.pb.h"

namespace croupier {

inline constexpr size_t kMaxJobNameBytes = 128;

// OK, or INVALID_ARGUMENT saying what a name may be: 1 to 128 letters, digits, '_', '-' or '.',
// starting with a letter or a digit.
absl::Status ValidateJobName(absl::string_view name);

// Checks everything in `spec` that needs no data and returns it with the defaults filled in,
// every enum setting explicit: source tfrecord, shuffle global (none for a python source, which
// allows nothing else), remainder drop, mode dealt, compression none, block_size 1024,
// window_blocks 16, and the features in their canonical text (FormatFeatureSpecs). A map job,
// like a python job, reads no files and is made by the Python producers registered for it; it
// carries its record count (num_records) and has a plan like a tfrecord job. INVALID_ARGUMENT,
// prefixed with "job '<name>': ", names the first problem: the name, an enum value this croupier
// does not know, no files (tfrecord) or files (python, map), an empty file pattern, num_records
// missing (map) or given (others), the feature spec text, num_consumers 0, and any plan setting
// out of range (ValidatePlanSpec's message). A tokens job (docs/protocol.md §7) reads no files
// either: its sources are in spec.tokens. Its batch_size becomes global_batch / num_consumers,
// its shuffle none (its plan shuffles documents), its features the token columns
// (TokenFeatures), its packing explicit, packing_window 4096 when 0, and no weights equal
// weights from step 0; refused besides: no source, an empty one, steps_per_epoch 0, a
// global_batch that num_consumers does not divide, another batch_size, shuffle or features, and
// the weight schedule's errors (ValidateTokenPlanSpec). Whether the files exist and hold enough
// records is BuildJobInfo's business.
absl::StatusOr<v1::JobSpec> NormalizeJobSpec(const v1::JobSpec& spec);

// The plan settings of a normalized spec, for a dataset of `num_records` records.
PlanSpec MakePlanSpec(const v1::JobSpec& spec, uint64_t num_records);

// Empty when `existing` and `requested` are equal; otherwise the fields that differ, e.g.
// "batch_size is 32 in the existing job, 64 in this request".
std::string DescribeSpecDifference(const v1::JobSpec& existing, const v1::JobSpec& requested);

// Prefixes a status's message with "job '<name>': ", keeping its code.
absl::Status JobError(absl::string_view name, const absl::Status& status);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_JOB_SPEC_H_
