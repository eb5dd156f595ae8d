#include "src/dispatcher/job_builder.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "croupier/dataset.h"
#include "croupier/example.h"
#include "croupier/plan.h"
#include "src/common/status_macros.h"
#include "src/dispatcher/job_spec.h"
#include "src/dispatcher/kept_counts.h"
#include "src/io/indexed_dataset.h"
#include "src/job/job.h"
#include "src/job/token_job.h"
#include "src/plan/token_plan.h"

namespace croupier {
namespace {

absl::string_view ListName(DType dtype) {
  switch (dtype) {
    case DType::kBytes:
      return "bytes_list";
    case DType::kFloat32:
      return "float_list";
    case DType::kInt64:
      return "int64_list";
    default:  // a Feature holds bytes, float32 or int64 only
      break;
  }
  return "unknown list";
}

// Why a pattern's Glob failed, as far as it can be told: Env::Glob fails (rather than matching
// nothing) when a directory on the way cannot be read, typically because it does not exist.
std::string GlobFailure(Env& env, const std::string& pattern, const absl::Status& status) {
  // An object store's Glob says itself why it failed (src/s3/s3_env.h): it has no directories.
  if (pattern.find("://") != std::string::npos) return std::string(status.message());
  const size_t wildcard = pattern.find_first_of("*?[");
  const size_t slash =
      pattern.rfind('/', wildcard == std::string::npos ? pattern.size() : wildcard);
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = pattern.substr(0, slash);
    absl::Status stat = env.Stat(dir).status();
    if (absl::IsNotFound(stat)) return absl::StrCat("directory ", dir, " does not exist");
    if (!stat.ok()) return std::string(stat.message());
  }
  return std::string(status.message());
}

// The files a job's patterns name, in order, and what their listing told of each (an object's
// size, Last-Modified and ETag; a local file's stat is left unknown: etag empty), which
// Dataset::Open then takes instead of asking the store again.
struct Expanded {
  std::vector<std::string> files;
  std::vector<FileStat> known;
  // Each pattern, with the end of its matches in `files` (they start where the previous
  // pattern's end).
  std::vector<std::pair<std::string, size_t>> patterns;
};

absl::StatusOr<Expanded> ExpandPatterns(const v1::JobSpec& spec, Env& env) {
  Expanded out;
  absl::flat_hash_map<std::string, std::string> matched_by;
  for (const std::string& pattern : spec.files()) {
    absl::StatusOr<std::vector<Env::Listed>> globbed = env.GlobWithStats(pattern);
    if (!globbed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no file matches '", pattern, "' (", GlobFailure(env, pattern, globbed.status()), ")"));
    }
    std::vector<Env::Listed> matches = *std::move(globbed);
    if (matches.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("no file matches '", pattern, "'"));
    }
    for (Env::Listed& match : matches) {
      auto [it, inserted] = matched_by.emplace(match.path, pattern);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("file ", match.path, " is given twice (by '",
                                                       it->second, "' and '", pattern,
                                                       "'); its records would be dealt twice"));
      }
      out.files.push_back(std::move(match.path));
      out.known.push_back(match.stat.value_or(FileStat{}));
    }
    out.patterns.emplace_back(pattern, out.files.size());
  }
  return out;
}

// The record count of every file, as kept for each pattern (kept_counts.h), or nullopt unless
// every pattern's are.
std::optional<std::vector<uint64_t>> KeptCountsOf(const Expanded& expanded, Env& env) {
  std::vector<uint64_t> counts;
  size_t begin = 0;
  for (const auto& [pattern, end] : expanded.patterns) {
    const absl::Span<const std::string> files =
        absl::MakeConstSpan(expanded.files).subspan(begin, end - begin);
    const absl::Span<const FileStat> known =
        absl::MakeConstSpan(expanded.known).subspan(begin, end - begin);
    std::optional<std::vector<uint64_t>> kept = ReadKeptCounts(env, pattern, files, known);
    if (!kept.has_value()) return std::nullopt;
    counts.insert(counts.end(), kept->begin(), kept->end());
    begin = end;
  }
  return counts;
}

// Checks the spec's features against the first record of the first file that has one.
absl::Status CheckFeatures(const std::vector<FeatureSpec>& features, const Dataset& dataset) {
  size_t f = 0;
  while (f < dataset.num_files() && dataset.first_id(f + 1) == dataset.first_id(f)) ++f;
  if (f == dataset.num_files()) return absl::OkStatus();  // no records: the plan check refuses
  const size_t first[] = {f};
  RETURN_IF_ERROR(dataset.Load(first));
  ASSIGN_OR_RETURN(auto file, IndexedRecordFile::Open(dataset.shared_index(f)));
  std::string buffer;
  ASSIGN_OR_RETURN(absl::string_view record, file->Read(0, buffer));
  const std::string where = absl::StrCat("record 0 of ", dataset.index(f).path);
  absl::StatusOr<Example> example = ParseExample(record);
  if (!example.ok()) {
    return absl::DataLossError(
        absl::StrCat(where, " is not a tf.train.Example: ", example.status().message()));
  }
  for (const FeatureSpec& spec : features) {
    const Feature* found = nullptr;
    for (const auto& [name, feature] : *example) {
      if (name == spec.name) found = &feature;
    }
    if (found == nullptr) {
      std::vector<std::string> names;
      for (const auto& entry : *example) names.push_back(entry.first);
      return absl::InvalidArgumentError(
          absl::StrCat("feature '", spec.name, "' is not in ", where, " (it has ",
                       names.empty() ? "no features" : absl::StrJoin(names, ", "), ")"));
    }
    if (found->kind_set && found->dtype != spec.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("feature '", spec.name, "' is ",
                                                     DTypeName(spec.dtype), " in the spec but ",
                                                     ListName(found->dtype), " in ", where));
    }
    if (!spec.variable_length && static_cast<int64_t>(found->size()) != spec.NumElements()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature '", spec.name, "' is ", FormatFeatureSpecs({spec}), " in the spec (",
          spec.NumElements(), spec.NumElements() == 1 ? " value" : " values", ") but has ",
          found->size(), found->size() == 1 ? " value" : " values", " in ", where));
    }
  }
  return absl::OkStatus();
}

// A python job (croupier.serve) has no data to look at: its shape is what the spec says.
v1::JobInfo BuildPython(const v1::JobSpec& spec, uint32_t rounds_per_task) {
  const uint64_t n = spec.num_consumers();
  const uint64_t steps = spec.source_batches_per_epoch() / n;
  if (rounds_per_task == 0) rounds_per_task = AutoRoundsPerTask(steps, n, /*batch_bytes=*/0);
  v1::JobInfo info;
  *info.mutable_spec() = spec;
  info.set_num_records(spec.source_batches_per_epoch() * spec.batch_size());
  info.set_batches_per_epoch(steps * n);
  info.set_steps_per_epoch(steps);
  info.set_batches_per_task(n * rounds_per_task);
  return info;
}

absl::Status CheckStartBatch(const v1::JobSpec& spec, const EpochPlan& plan) {
  if (spec.start_batch() < plan.num_batches()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "start_batch ", spec.start_batch(), " is past the epoch's ", plan.num_batches(),
      " batches (of ", spec.batch_size(), " records, for ", spec.num_consumers(), " consumers)"));
}

// A map job's records are numbered by the spec (num_records): its plan is a tfrecord job's, over
// no files.
absl::StatusOr<v1::JobInfo> BuildMap(const v1::JobSpec& spec, uint32_t rounds_per_task) {
  ASSIGN_OR_RETURN(EpochPlan plan,
                   EpochPlan::Create(MakePlanSpec(spec, spec.num_records()), /*epoch=*/0));
  RETURN_IF_ERROR(CheckStartBatch(spec, plan));
  if (rounds_per_task == 0) {
    rounds_per_task =
        AutoRoundsPerTask(plan.steps_per_consumer(), spec.num_consumers(), /*batch_bytes=*/0);
  }
  v1::JobInfo info;
  *info.mutable_spec() = spec;
  info.set_num_records(spec.num_records());
  info.set_batches_per_epoch(plan.num_batches());
  info.set_steps_per_epoch(plan.steps_per_consumer());
  info.set_batches_per_task(uint64_t{spec.num_consumers()} * rounds_per_task);
  return info;
}

// A tokens job: its sources' indexes are read (for their fingerprints, and to check that the
// plan can be made from their lengths); an epoch is steps_per_epoch global batches of
// global_batch sequences, dealt global_batch / num_consumers to a rank.
absl::StatusOr<v1::JobInfo> BuildTokens(const v1::JobSpec& spec, Env& env,
                                        uint32_t rounds_per_task) {
  v1::JobInfo info;
  std::vector<std::unique_ptr<IndexedDataset>> datasets;
  std::vector<TokenSource> sources;
  const v1::TokenSpec& tokens = spec.tokens();
  for (int k = 0; k < tokens.sources_size(); ++k) {
    ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> dataset, OpenTokenSource(tokens, k, env));
    sources.push_back(TokenSource{tokens.sources(k), dataset->lengths()});
    ASSIGN_OR_RETURN(*info.add_token_sources(),
                     TokenSourceInfoOf(*dataset, TextSourceOf(tokens, k), env));
    datasets.push_back(std::move(dataset));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TokenPlan> token_plan,
                   TokenPlan::Create(TokenPlanSpecOf(spec), std::move(sources)));
  // Padding from lengths alone: a best_fit source epoch is packed once here, outside the
  // dispatcher's lock (3.9 s for 10 million documents, protocol.md §7.1).
  for (int k = 0; k < info.token_sources_size(); ++k) {
    info.mutable_token_sources(k)->set_padding_fraction(token_plan->PaddingFraction(k, 0));
  }
  const uint64_t sequences = spec.tokens().steps_per_epoch() * spec.tokens().global_batch();
  ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(MakePlanSpec(spec, sequences), /*epoch=*/0));
  RETURN_IF_ERROR(CheckStartBatch(spec, plan));
  if (rounds_per_task == 0) {
    const uint64_t batch_bytes = uint64_t{spec.batch_size()} * spec.tokens().sequence_length() *
                                 sizeof(int32_t) * std::size(kTokenColumns);
    rounds_per_task =
        AutoRoundsPerTask(plan.steps_per_consumer(), spec.num_consumers(), batch_bytes);
  }
  *info.mutable_spec() = spec;
  info.set_num_records(sequences);
  info.set_batches_per_epoch(plan.num_batches());
  info.set_steps_per_epoch(plan.steps_per_consumer());
  info.set_batches_per_task(uint64_t{spec.num_consumers()} * rounds_per_task);
  return info;
}

absl::StatusOr<v1::JobInfo> Build(const v1::JobSpec& spec, IndexCache& cache, Env& env,
                                  uint32_t rounds_per_task) {
  if (spec.source() == v1::SOURCE_KIND_PYTHON) return BuildPython(spec, rounds_per_task);
  if (spec.source() == v1::SOURCE_KIND_MAP) return BuildMap(spec, rounds_per_task);
  if (spec.source() == v1::SOURCE_KIND_TOKENS) return BuildTokens(spec, env, rounds_per_task);
  ASSIGN_OR_RETURN(Expanded expanded, ExpandPatterns(spec, env));
  const std::vector<std::string>& files = expanded.files;
  // With every count kept, only the index of the file whose first record is checked is read;
  // otherwise every file is indexed, and the counts are kept for the next job.
  const std::optional<std::vector<uint64_t>> kept = KeptCountsOf(expanded, env);
  std::unique_ptr<Dataset> dataset;
  if (kept.has_value()) {
    ASSIGN_OR_RETURN(dataset, Dataset::OpenKnown(files, expanded.known, *kept, cache));
  } else {
    ASSIGN_OR_RETURN(dataset, Dataset::Open(files, expanded.known, cache));
  }
  ASSIGN_OR_RETURN(std::vector<FeatureSpec> features, ParseFeatureSpecs(spec.features()));
  RETURN_IF_ERROR(CheckExampleFeatureSpecs(features));
  if (dataset->num_records() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", files.size(), files.size() == 1 ? " file holds" : " files hold", " no records"));
  }
  RETURN_IF_ERROR(CheckFeatures(features, *dataset));
  ASSIGN_OR_RETURN(EpochPlan plan,
                   EpochPlan::Create(MakePlanSpec(spec, dataset->num_records()), /*epoch=*/0));
  RETURN_IF_ERROR(CheckStartBatch(spec, plan));
  v1::JobInfo info;
  *info.mutable_spec() = spec;
  uint64_t file_bytes = 0;
  for (size_t f = 0; f < dataset->num_files(); ++f) {
    v1::FileInfo* file = info.add_files();
    // An index not loaded is an object's, whose listing gave its stat (as its index would).
    const FileStat st =
        dataset->loaded(f) ? FileStat{dataset->index(f).file_size, dataset->index(f).mtime_ns,
                                      dataset->index(f).etag}
                           : expanded.known[f];
    file->set_path(dataset->path(f));
    file->set_num_records(dataset->first_id(f + 1) - dataset->first_id(f));
    file->set_size_bytes(st.size);
    file->set_mtime_ns(st.mtime_ns);
    file->set_etag(st.etag);
    file_bytes += st.size;
  }
  if (!kept.has_value()) {
    size_t begin = 0;
    for (const auto& [pattern, end] : expanded.patterns) {
      WriteKeptCounts(env, pattern,
                      std::vector<v1::FileInfo>(info.files().begin() + begin,
                                                info.files().begin() + end));
      begin = end;
    }
  }
  info.set_num_records(dataset->num_records());
  info.set_batches_per_epoch(plan.num_batches());
  info.set_steps_per_epoch(plan.steps_per_consumer());
  if (rounds_per_task == 0) {
    const uint64_t batch_bytes = file_bytes / dataset->num_records() * spec.batch_size();
    rounds_per_task =
        AutoRoundsPerTask(plan.steps_per_consumer(), spec.num_consumers(), batch_bytes);
  }
  info.set_batches_per_task(uint64_t{spec.num_consumers()} * rounds_per_task);
  return info;
}

}  // namespace

uint32_t AutoRoundsPerTask(uint64_t steps_per_epoch, uint32_t num_consumers, uint64_t batch_bytes) {
  constexpr uint64_t kFloor = 4, kMostRounds = 1024, kMinTasksPerEpoch = 16;
  constexpr uint64_t kMostTaskBytes = uint64_t{64} << 20;
  uint64_t rounds = std::min(steps_per_epoch / kMinTasksPerEpoch, kMostRounds);
  const uint64_t round_bytes = batch_bytes * std::max<uint32_t>(num_consumers, 1);
  if (round_bytes > 0) rounds = std::min(rounds, kMostTaskBytes / round_bytes);
  return static_cast<uint32_t>(std::max(rounds, kFloor));
}

absl::StatusOr<v1::JobInfo> BuildJobInfo(const v1::JobSpec& spec, IndexCache& cache, Env& env,
                                         uint32_t rounds_per_task) {
  absl::StatusOr<v1::JobInfo> info = Build(spec, cache, env, rounds_per_task);
  if (!info.ok()) return JobError(spec.name(), info.status());
  return info;
}

}  // namespace croupier
