// Turning a job spec into a JobInfo: the slow part of CreateJob, which reads the data (or the
// cached record indexes). DispatcherImpl calls it without holding its lock.
#ifndef CROUPIER_SRC_DISPATCHER_JOB_BUILDER_H_
#define CROUPIER_SRC_DISPATCHER_JOB_BUILDER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "croupier/record_index.h"
#include "proto/croupier.pb.h"
#include "src/common/env.h"

namespace croupier {

// The JobInfo of a spec that NormalizeJobSpec accepted. Expands every pattern of spec.files with
// env.Glob (in order, each pattern's matches sorted), indexes the files through `cache`, checks the
// features against the first record of the first non-empty file, and computes the counts:
// batches_per_epoch from the epoch plan, batches_per_task = num_consumers * rounds_per_task, or,
// for rounds_per_task 0, num_consumers * AutoRoundsPerTask(...) with the batch size estimated from
// the files' bytes per record (a Python job: from the step count alone). A python or map job
// reads no data: a python job's counts come from source_batches_per_epoch, a map job's from its
// plan over spec.num_records records. A tokens job reads its sources' indexes (token_sources:
// their fingerprints) and holds steps_per_epoch * global_batch sequences an epoch; its sources
// must make a token plan (TokenPlan::Create's errors: a source with no document, or none with
// tokens), and their index errors are IndexedDataset::Open's (NOT_FOUND, DATA_LOSS naming the
// file and byte offset).
// Errors, each prefixed with "job '<name>': ":
//   INVALID_ARGUMENT  a pattern that matches no file (or whose directory cannot be read); a file
//                     matched twice; files that hold no records; a feature absent from the
//                     record, of another dtype or with another number of values than its fixed
//                     shape; too few records for the plan (ValidatePlanSpec's message);
//   the index's own code (NOT_FOUND, PERMISSION_DENIED, DATA_LOSS with the file and byte offset,
//                     ABORTED for a file that changed while it was indexed) for a file that cannot
//                     be indexed, and DATA_LOSS for a first record that is not a tf.train.Example.
// Thread-safe (as IndexCache and Env are).
absl::StatusOr<v1::JobInfo> BuildJobInfo(const v1::JobSpec& spec, IndexCache& cache, Env& env,
                                         uint32_t rounds_per_task);

// The automatic rounds per task (a task is num_consumers batches per round). Every task costs its
// assignment, a Locate by each consumer and, at its end, a wait for the next task's producer, so
// small tasks cap small batches; large ones spread an epoch over few tasks (fewer producers can
// share it) and lose more work when a producer dies. The rule: 4 rounds, raised to at most
// steps_per_epoch / 16 (an epoch keeps 16 tasks or more), to at most 64 MiB of batches per task
// (when `batch_bytes`, an estimate, is not 0), and to at most 1,024.
uint32_t AutoRoundsPerTask(uint64_t steps_per_epoch, uint32_t num_consumers, uint64_t batch_bytes);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_JOB_BUILDER_H_
