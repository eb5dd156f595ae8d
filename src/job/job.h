// The job as every component uses it: a JobInfo (proto/croupier.proto) parsed once, at the edge,
// into typed settings, with the arithmetic of the deal and of tasks that the dispatcher, the
// producers, the consumers and croupier.serve() share.
//
// The deal. An epoch deals global batches [FirstBatch, EndBatch) of its plan, a whole number of
// rounds of num_consumers: rank r takes FirstBatch + step * num_consumers + r as its step `step`.
// Every epoch deals [0, batches_per_epoch), except when the job resumes another job's checkpoint
// with a different number of consumers (JobSpec.start_epoch, start_batch): epochs before
// start_epoch deal nothing, and start_epoch deals from start_batch, the next global batch of the
// checkpoint, to the last whole round of the new number of consumers.
//
// Tasks and sources. Producers are given work in tasks of batches_per_task consecutive global
// batches of an epoch, cut from its first dealt batch F on: task k covers
// [F + k*T, min(F + (k+1)*T, EndBatch)). A Python job
// (croupier.serve) is made by source_count processes: task k of an epoch is made by source
// k % source_count, which yields the batches of its tasks in order. A map job is made by the
// Python producers registered for it, which read its records by index through the epoch plan.
#ifndef CROUPIER_SRC_JOB_JOB_H_
#define CROUPIER_SRC_JOB_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "croupier/deal_mode.h"
#include "croupier/plan.h"
#include "proto/croupier.pb.h"
#include "src/job/codec.h"

namespace croupier {

// Where a job's batches come from (JobSpec.source).
enum class SourceKind {
  kTfrecord,  // TFRecord files through the epoch plan, made by any producer
  kPython,    // croupier.serve(): a Python iterable's batches, made by the job's own sources
  kMap,       // a map-style Python dataset read by index through the epoch plan, made by the
              // Python producers registered for the job
  kTokens,    // packed sequences of token documents (JobSpec.tokens), made by any producer
};

// "tfrecord", "python", "map", "tokens": the names of the command line and the Python API
// (DealModeName is in croupier/deal_mode.h).
absl::string_view SourceKindName(SourceKind source);
// Inverses of the above; INVALID_ARGUMENT listing the accepted names for anything else.
absl::StatusOr<SourceKind> ParseSourceKind(absl::string_view name);
absl::StatusOr<DealMode> ParseDealMode(absl::string_view name);

// A copyable value; immutable once parsed.
struct JobConfig {
  std::string name;
  SourceKind source = SourceKind::kTfrecord;
  DealMode mode = DealMode::kDealt;
  Codec compression = Codec::kNone;
  std::string features;     // the feature spec text, canonical
  PlanSpec plan;            // num_records, seed, batch size, consumers, shuffle, remainder, blocks
  uint64_t num_epochs = 0;  // 0: unbounded
  uint64_t batches_per_epoch = 0;  // global batches, a multiple of num_consumers
  uint64_t steps_per_epoch = 0;
  uint64_t batches_per_task = 0;
  uint64_t start_epoch = 0;  // resuming a checkpoint: see above
  uint64_t start_batch = 0;
  uint32_t source_count = 1;          // python: how many processes serve the job
  bool skip_failing_records = false;  // map: a failing record is left out of its batch
  bool text_tokens = false;  // tokens: a source is text (TokenSpec.text), tokenized by producers

  uint32_t num_consumers() const { return plan.num_consumers; }
  // The croupier.serve() stream only.
  bool python() const { return source == SourceKind::kPython; }
  bool map() const { return source == SourceKind::kMap; }
  bool tokens() const { return source == SourceKind::kTokens; }
  // Made by Python producers registered for the job (ProducerHeartbeat's source_job), not by
  // the producers of TFRecord jobs: a python or a map job, or a tokens job with a text source
  // (whose producers tokenize). Such a job has no files.
  bool made_by_sources() const { return python() || map() || text_tokens; }
  bool dealt() const { return mode == DealMode::kDealt; }

  // The deal (see above).
  uint64_t FirstBatch(uint64_t epoch) const;
  uint64_t StepsInEpoch(uint64_t epoch) const;
  uint64_t EndBatch(uint64_t epoch) const;
  // The global batch rank `rank` takes at `step` of `epoch`.
  uint64_t GlobalBatch(uint64_t epoch, uint64_t step, uint32_t rank) const;

  // Tasks and sources (see above). Tasks are cut from the epoch's first batch on.
  // The first batch of the task holding `batch` of `epoch`.
  uint64_t TaskStart(uint64_t epoch, uint64_t batch) const;
  // The end of the task starting at `start` (EndBatch(epoch) for a start at or past it).
  uint64_t TaskEnd(uint64_t epoch, uint64_t start) const;
  // How many tasks the job has before position (epoch, batch), over every epoch from its first
  // (start_epoch): `batch` is a task's start or EndBatch(epoch). Counts the tasks between two
  // positions without visiting them; 0 without tasks (batches_per_task 0).
  uint64_t TaskOrdinal(uint64_t epoch, uint64_t batch) const;
  // Which source makes `batch` of `epoch` (python; 0 for other jobs).
  uint32_t SourceOf(uint64_t epoch, uint64_t batch) const;
  // Where `batch` comes in the order its source yields its batches of `epoch`, from 0.
  uint64_t SourceOrdinal(uint64_t epoch, uint64_t batch) const;
  // The (epoch, end batch) of the last task source `source` makes: where it is done. nullopt
  // for an unbounded job, or a source that makes no task at all (more sources than tasks).
  std::optional<std::pair<uint64_t, uint64_t>> LastTaskEnd(uint32_t source) const;
};

// The typed job of `info`. INVALID_ARGUMENT naming the job and the field for a name that is not
// a setting's, or counts that do not fit together (a JobInfo that no dispatcher made).
absl::StatusOr<JobConfig> ParseJobConfig(const v1::JobInfo& info);

}  // namespace croupier

#endif  // CROUPIER_SRC_JOB_JOB_H_
