#include "src/dispatcher/job_spec.h"

#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "croupier/example.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"
#include "src/common/status_macros.h"
#include "src/job/job.h"
#include "src/job/job_settings.h"
#include "src/job/token_job.h"

namespace croupier {
namespace {

// A field's value as text: strings and settings (by their text names) quoted, repeated fields
// as [a, b].
std::string FieldText(const v1::JobSpec& spec, const google::protobuf::FieldDescriptor* field) {
  const google::protobuf::Reflection* reflection = spec.GetReflection();
  if (field->enum_type() != nullptr && IsSettingEnum(field->enum_type())) {
    return absl::StrCat(
        "\"", SettingText(field->enum_type(), reflection->GetEnumValue(spec, field)), "\"");
  }
  std::string out;
  if (!field->is_repeated()) {
    google::protobuf::TextFormat::PrintFieldValueToString(spec, field, -1, &out);
    return out;
  }
  std::vector<std::string> items;
  for (int i = 0; i < reflection->FieldSize(spec, field); ++i) {
    google::protobuf::TextFormat::PrintFieldValueToString(spec, field, i, &items.emplace_back());
  }
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

// A tokens job's own settings (JobSpec.tokens), checked and completed in `out`, whose enum
// settings are `settings`: the batch size, shuffle and features follow from them.
absl::Status NormalizeTokens(v1::JobSpec& out, TypedSettings& settings) {
  v1::TokenSpec& tokens = *out.mutable_tokens();
  if (tokens.sources().empty()) {
    return absl::InvalidArgumentError(
        "a tokens job needs tokens.sources: the prefixes of its indexed datasets "
        "(PREFIX.idx and PREFIX.bin)");
  }
  for (int i = 0; i < tokens.sources_size(); ++i) {
    if (tokens.sources(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tokens.sources[", i, "] is empty"));
    }
  }
  std::vector<bool> is_text(tokens.sources_size(), false);
  for (int t = 0; t < tokens.text_size(); ++t) {
    v1::TextSource& text = *tokens.mutable_text(t);
    const std::string where = absl::StrCat("tokens.text[", t, "]");
    if (text.source() >= static_cast<uint32_t>(tokens.sources_size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is for source ", text.source(),
                                                     "; the job has ", tokens.sources_size(),
                                                     " (0 to ", tokens.sources_size() - 1, ")"));
    }
    if (is_text[text.source()]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": source ", text.source(), " is described twice"));
    }
    is_text[text.source()] = true;
    if (text.files().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " names no files"));
    }
    for (int f = 0; f < text.files_size(); ++f) {
      if (text.files(f).empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".files[", f, "] is empty"));
      }
    }
    if (text.tokenizer().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " names no tokenizer (the path of a tokenizer.json)"));
    }
    if (text.text_key().empty()) text.set_text_key("text");
    if (text.eod_id() < -1 || text.eod_id() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".eod_id is ", text.eod_id(),
                                                     "; a token id (int32), or -1 for none"));
    }
  }
  if (tokens.steps_per_epoch() == 0) {
    return absl::InvalidArgumentError(
        "tokens.steps_per_epoch is 0; a tokens job's epoch is that many global steps");
  }
  const uint32_t n = out.num_consumers();
  if (n == 0) return absl::InvalidArgumentError("num_consumers is 0; it must be at least 1");
  if (tokens.global_batch() == 0 || tokens.global_batch() % n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens.global_batch is ", tokens.global_batch(),
                     "; it must be a multiple of "
                     "num_consumers (",
                     n, "): each rank's batch is global_batch / num_consumers sequences"));
  }
  const uint32_t per_rank = tokens.global_batch() / n;
  if (out.batch_size() != 0 && out.batch_size() != per_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size is ", out.batch_size(), "; a tokens job's is global_batch / num_consumers (",
        per_rank, "): leave it 0"));
  }
  out.set_batch_size(per_rank);
  if (out.shuffle() == v1::SHUFFLE_UNSPECIFIED) settings.shuffle = ShuffleMode::kNone;
  if (settings.shuffle != ShuffleMode::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tokens job's plan shuffles the documents of each source: shuffle must be none, not '",
        ShuffleModeName(settings.shuffle), "'"));
  }
  if (settings.remainder != Remainder::kDrop) {
    return absl::InvalidArgumentError(
        "a tokens job's epoch is whole global batches: remainder must be drop");
  }
  const std::string features = TokenFeatures(tokens.sequence_length());
  if (!out.features().empty() && out.features() != features) {
    return absl::InvalidArgumentError(absl::StrCat("a tokens job's columns are ", features,
                                                   "; leave features empty, not '", out.features(),
                                                   "'"));
  }
  out.set_features(features);
  ASSIGN_OR_RETURN(Packing packing, FromProto(tokens.packing()));
  tokens.set_packing(ToProto(packing));
  if (tokens.packing_window() == 0) tokens.set_packing_window(TokenPlanSpec().window);
  if (tokens.weights().empty()) {
    v1::WeightChange* equal = tokens.add_weights();
    for (int k = 0; k < tokens.sources_size(); ++k) equal->add_weights(1.0);
  }
  const std::vector<std::string> names(tokens.sources().begin(), tokens.sources().end());
  return ValidateTokenPlanSpec(TokenPlanSpecOf(out), names);
}

}  // namespace

absl::Status JobError(absl::string_view name, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("job '", name, "': ", status.message()));
}

absl::Status ValidateJobName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxJobNameBytes && absl::ascii_isalnum(name[0]);
  for (char c : name) ok = ok && (absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.');
  if (ok) return absl::OkStatus();
  if (name.empty()) return absl::InvalidArgumentError("the job has no name");
  return absl::InvalidArgumentError(
      absl::StrCat("job name '", name, "' is invalid: use 1 to ", kMaxJobNameBytes,
                   " letters, digits, '_', '-' or '.', starting with a letter or a digit"));
}

absl::StatusOr<v1::JobSpec> NormalizeJobSpec(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(ValidateJobName(spec.name()));
  const std::string& name = spec.name();
  auto invalid = [&](absl::string_view what) {
    return JobError(name, absl::InvalidArgumentError(what));
  };
  v1::JobSpec out = spec;
  // The settings are typed from here on; the normalized spec holds each explicitly.
  absl::StatusOr<TypedSettings> typed = TypedSettingsOf(spec);
  if (!typed.ok()) return JobError(name, typed.status());
  TypedSettings settings = *typed;
  const bool python = settings.source == SourceKind::kPython;
  const bool map = settings.source == SourceKind::kMap;
  const bool tokens = settings.source == SourceKind::kTokens;
  // Jobs made by Python producers registered for them read no files; a tokens job names its
  // sources in its TokenSpec.
  if ((python || map) && !spec.files().empty()) {
    return invalid(absl::StrCat("a ", SourceKindName(settings.source), " job reads no files"));
  }
  if (tokens && !spec.files().empty()) {
    return invalid("a tokens job reads no files: its sources are tokens.sources");
  }
  if (!tokens && spec.has_tokens()) {
    return invalid(absl::StrCat("tokens is for tokens jobs only, not a ",
                                SourceKindName(settings.source), " job"));
  }
  if (tokens) {
    if (absl::Status s = NormalizeTokens(out, settings); !s.ok()) return JobError(name, s);
  }
  if (python) {
    // Batches come from a Python iterable in its own order (croupier.serve): no plan shuffle,
    // and only whole rounds of num_consumers batches are dealt.
    if (spec.shuffle() == v1::SHUFFLE_UNSPECIFIED) settings.shuffle = ShuffleMode::kNone;
    if (settings.shuffle != ShuffleMode::kNone) {
      return invalid(
          absl::StrCat("a python job deals batches in the order its source yields "
                       "them: shuffle must be none, not '",
                       ShuffleModeName(settings.shuffle), "'"));
    }
    if (settings.remainder != Remainder::kDrop) {
      return invalid(
          "a python job drops the batches past the last whole round: remainder must "
          "be drop");
    }
    if (out.num_consumers() > 0 && out.source_batches_per_epoch() < out.num_consumers()) {
      return invalid(absl::StrCat("source_batches_per_epoch is ", out.source_batches_per_epoch(),
                                  "; a python job needs at least num_consumers (",
                                  out.num_consumers(), ") batches per epoch"));
    }
    if (out.source_count() == 0) out.set_source_count(1);
  } else if (out.source_batches_per_epoch() != 0 || out.source_count() != 0) {
    return invalid("source_batches_per_epoch and source_count are for python jobs only");
  }
  if (map) {
    // A map-style dataset read by index: its records are numbered, not in files.
    if (out.num_records() == 0) {
      return invalid("a map job needs num_records, the number of records its source holds");
    }
  } else if (out.num_records() != 0) {
    return invalid(absl::StrCat("num_records is for map jobs only; a ",
                                SourceKindName(settings.source), " job counts its records ",
                                python   ? "from source_batches_per_epoch"
                                : tokens ? "from tokens.steps_per_epoch and global_batch"
                                         : "in its files"));
  }
  if (!map && spec.skip_failing_records()) {
    return invalid(absl::StrCat("skip_failing_records is for map jobs only; a ",
                                SourceKindName(settings.source),
                                " job's bad input fails its batch"));
  }
  if (!python && !map && !tokens && spec.files().empty()) return invalid("no files given");
  if ((python || map) && settings.compression != Codec::kNone) {
    return invalid(absl::StrCat("compression '", CodecName(settings.compression),
                                "' is for tfrecord jobs only; a ", SourceKindName(settings.source),
                                " job's batches are sent as they are"));
  }
  SetTypedSettings(settings, out);
  if ((out.start_epoch() != 0 || out.start_batch() != 0) &&
      (python || settings.mode != DealMode::kDealt)) {
    return invalid(
        "start_epoch and start_batch (resuming a checkpoint) are for dealt tfrecord, map "
        "and tokens jobs only");
  }
  if (out.num_epochs() != 0 && out.start_epoch() >= out.num_epochs()) {
    return invalid(absl::StrCat("start_epoch ", out.start_epoch(), " is past the job's ",
                                out.num_epochs(), " epochs"));
  }
  for (int i = 0; i < spec.files_size(); ++i) {
    if (spec.files(i).empty()) return invalid(absl::StrCat("files[", i, "] is empty"));
  }
  absl::StatusOr<std::vector<FeatureSpec>> features = ParseFeatureSpecs(out.features());
  if (!features.ok()) return JobError(name, features.status());
  out.set_features(FormatFeatureSpecs(*features));

  const PlanSpec defaults;
  if (out.block_size() == 0) out.set_block_size(defaults.block_size);
  if (out.window_blocks() == 0) out.set_window_blocks(defaults.window_blocks);
  if (out.num_consumers() == 0) return invalid("num_consumers is 0; it must be at least 1");
  // Every plan setting but the record count, which needs the data.
  if (absl::Status s = ValidatePlanSpec(MakePlanSpec(out, PlanSpec::kMaxRecords)); !s.ok()) {
    return JobError(name, s);
  }
  return out;
}

PlanSpec MakePlanSpec(const v1::JobSpec& spec, uint64_t num_records) {
  PlanSpec plan;
  plan.num_records = num_records;
  plan.seed = spec.seed();
  plan.batch_size = spec.batch_size();
  plan.num_consumers = spec.num_consumers();
  // Normalized specs hold valid values; the fallbacks only keep this total.
  plan.shuffle = FromProto(spec.shuffle()).value_or(ShuffleMode::kGlobal);
  plan.remainder = FromProto(spec.remainder()).value_or(Remainder::kDrop);
  plan.block_size = spec.block_size();
  plan.window_blocks = spec.window_blocks();
  return plan;
}

std::string DescribeSpecDifference(const v1::JobSpec& existing_spec, const v1::JobSpec& requested) {
  // A job journaled before JobSpec.compression existed has it UNSPECIFIED, which means none.
  v1::JobSpec existing = existing_spec;
  if (existing.compression() == v1::COMPRESSION_UNSPECIFIED) {
    existing.set_compression(v1::COMPRESSION_NONE);
  }
  const google::protobuf::Descriptor* descriptor = v1::JobSpec::descriptor();
  std::vector<std::string> differences;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    std::string a = FieldText(existing, field), b = FieldText(requested, field);
    if (a != b) {
      differences.push_back(
          absl::StrCat(field->name(), " is ", a, " in the existing job, ", b, " in this request"));
    }
  }
  return absl::StrJoin(differences, "; ");
}

}  // namespace croupier
