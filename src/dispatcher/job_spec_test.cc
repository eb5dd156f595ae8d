#include "src/dispatcher/job_spec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Minimal() {
  v1::JobSpec spec;
  spec.set_name("train");
  spec.add_files("data/*.tfrecord");
  spec.set_features(" label : int64 , image:bytes");
  spec.set_batch_size(32);
  spec.set_num_consumers(4);
  return spec;
}

void ExpectInvalid(const v1::JobSpec& spec, const std::string& substring) {
  absl::StatusOr<v1::JobSpec> result = NormalizeJobSpec(spec);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(substring));
}

TEST(DispatcherJobSpecTest, DefaultsFilledIn) {
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(Minimal());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->source(), v1::SOURCE_KIND_TFRECORD);
  EXPECT_EQ(spec->shuffle(), v1::SHUFFLE_GLOBAL);
  EXPECT_EQ(spec->remainder(), v1::REMAINDER_DROP);
  EXPECT_EQ(spec->mode(), v1::DEAL_MODE_DEALT);
  EXPECT_EQ(spec->block_size(), 1024u);
  EXPECT_EQ(spec->window_blocks(), 16u);
  EXPECT_EQ(spec->features(), "label:int64,image:bytes");
  EXPECT_EQ(spec->num_epochs(), 0u);
  EXPECT_EQ(spec->compression(), v1::COMPRESSION_NONE);
}

TEST(DispatcherJobSpecTest, Compression) {
  for (v1::Compression codec : {v1::COMPRESSION_NONE, v1::COMPRESSION_ZSTD, v1::COMPRESSION_LZ4}) {
    v1::JobSpec in = Minimal();
    in.set_compression(codec);
    absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(in);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->compression(), codec);
  }
  v1::JobSpec spec = Minimal();
  spec.set_compression(static_cast<v1::Compression>(9));
  ExpectInvalid(spec, "job 'train': compression 9 is not a value this croupier knows");
  spec = v1::JobSpec();
  spec.set_name("py");
  spec.set_source(v1::SOURCE_KIND_PYTHON);
  spec.set_features("x:int64");
  spec.set_batch_size(4);
  spec.set_num_consumers(1);
  spec.set_source_batches_per_epoch(4);
  spec.set_compression(v1::COMPRESSION_ZSTD);
  ExpectInvalid(spec, "compression 'zstd' is for tfrecord jobs only");
}

TEST(DispatcherJobSpecTest, AJobJournaledBeforeCompressionExistedMatchesNone) {
  v1::JobSpec requested = *NormalizeJobSpec(Minimal());
  v1::JobSpec old = requested;
  old.clear_compression();
  EXPECT_EQ(DescribeSpecDifference(old, requested), "");
  requested.set_compression(v1::COMPRESSION_ZSTD);
  EXPECT_EQ(DescribeSpecDifference(old, requested),
            "compression is \"none\" in the existing job, \"zstd\" in this request");
}

TEST(DispatcherJobSpecTest, GivenSettingsKept) {
  v1::JobSpec in = Minimal();
  in.set_shuffle(v1::SHUFFLE_BLOCKS);
  in.set_block_size(64);
  in.set_window_blocks(4);
  in.set_remainder(v1::REMAINDER_PAD);
  in.set_mode(v1::DEAL_MODE_FIRST_COME);
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->shuffle(), v1::SHUFFLE_BLOCKS);
  EXPECT_EQ(spec->block_size(), 64u);
  EXPECT_EQ(spec->window_blocks(), 4u);
  EXPECT_EQ(spec->remainder(), v1::REMAINDER_PAD);
  EXPECT_EQ(spec->mode(), v1::DEAL_MODE_FIRST_COME);
}

TEST(DispatcherJobSpecTest, Names) {
  v1::JobSpec spec = Minimal();
  spec.set_name("");
  ExpectInvalid(spec, "the job has no name");
  spec.set_name("my job");
  ExpectInvalid(spec, "job name 'my job' is invalid: use 1 to 128 letters, digits");
  spec.set_name(".hidden");
  ExpectInvalid(spec, "starting with a letter or a digit");
  spec.set_name(std::string(129, 'a'));
  ExpectInvalid(spec, "is invalid");
  spec.set_name("imagenet-1k_v2.train");
  EXPECT_TRUE(NormalizeJobSpec(spec).ok());
}

TEST(DispatcherJobSpecTest, Refusals) {
  v1::JobSpec spec = Minimal();
  spec.clear_files();
  ExpectInvalid(spec, "job 'train': no files given");
  spec = Minimal();
  spec.add_files("");
  ExpectInvalid(spec, "job 'train': files[1] is empty");
  spec = Minimal();
  spec.set_features("label:int65");
  ExpectInvalid(spec, "job 'train': ");
  spec.set_features("");
  ExpectInvalid(spec, "job 'train': ");
  spec = Minimal();
  spec.set_mode(static_cast<v1::DealMode>(7));
  ExpectInvalid(spec, "job 'train': mode 7 is not a value this croupier knows");
  spec = Minimal();
  spec.set_shuffle(static_cast<v1::Shuffle>(7));
  ExpectInvalid(spec, "job 'train': shuffle mode 7 is not");
  spec = Minimal();
  spec.set_remainder(static_cast<v1::Remainder>(7));
  ExpectInvalid(spec, "job 'train': remainder policy 7 is not");
  spec = Minimal();
  spec.set_source(static_cast<v1::SourceKind>(7));
  ExpectInvalid(spec, "job 'train': source 7 is not");
  spec = Minimal();
  spec.set_num_consumers(0);
  ExpectInvalid(spec, "job 'train': num_consumers is 0; it must be at least 1");
  spec = Minimal();
  spec.set_batch_size(0);
  ExpectInvalid(spec, "job 'train': plan spec: batch_size is 0");
}

TEST(DispatcherJobSpecTest, PlanSpec) {
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(Minimal());
  ASSERT_TRUE(spec.ok());
  PlanSpec plan = MakePlanSpec(*spec, 1000);
  EXPECT_EQ(plan.num_records, 1000u);
  EXPECT_EQ(plan.batch_size, 32u);
  EXPECT_EQ(plan.num_consumers, 4u);
  EXPECT_EQ(plan.shuffle, ShuffleMode::kGlobal);
  EXPECT_EQ(plan.remainder, Remainder::kDrop);
}

TEST(DispatcherJobSpecTest, DescribeSpecDifference) {
  v1::JobSpec a = *NormalizeJobSpec(Minimal());
  v1::JobSpec b = a;
  EXPECT_EQ(DescribeSpecDifference(a, b), "");
  b.set_batch_size(64);
  EXPECT_EQ(DescribeSpecDifference(a, b),
            "batch_size is 32 in the existing job, 64 in this request");
  b.add_files("more/*.tfrecord");
  EXPECT_THAT(DescribeSpecDifference(a, b),
              HasSubstr("files is [\"data/*.tfrecord\"] in the existing job, "
                        "[\"data/*.tfrecord\", \"more/*.tfrecord\"] in this request; batch_size"));
}

// A map job, like a python job, reads no files and is made by the Python producers registered
// for it; it carries its record count and has a tfrecord job's plan.
v1::JobSpec MapSpec() {
  v1::JobSpec spec;
  spec.set_name("m");
  spec.set_source(v1::SOURCE_KIND_MAP);
  spec.set_features("x:int64");
  spec.set_batch_size(4);
  spec.set_num_consumers(2);
  spec.set_num_records(100);
  return spec;
}

TEST(DispatcherJobSpecTest, AMapJobHasARecordCountAndATfrecordJobsPlan) {
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(MapSpec());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->source(), v1::SOURCE_KIND_MAP);
  EXPECT_EQ(spec->shuffle(), v1::SHUFFLE_GLOBAL);
  EXPECT_EQ(spec->remainder(), v1::REMAINDER_DROP);
  EXPECT_EQ(spec->num_records(), 100u);
  v1::JobSpec in = MapSpec();
  in.set_shuffle(v1::SHUFFLE_BLOCKS);
  in.set_remainder(v1::REMAINDER_PAD);
  in.set_num_epochs(3);
  in.set_start_epoch(1);
  in.set_start_batch(6);
  spec = NormalizeJobSpec(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->shuffle(), v1::SHUFFLE_BLOCKS);
  EXPECT_EQ(spec->remainder(), v1::REMAINDER_PAD);
}

TEST(DispatcherJobSpecTest, AMapJobRefusesFilesAndTheStreamsSettings) {
  v1::JobSpec spec = MapSpec();
  spec.add_files("data/*.tfrecord");
  ExpectInvalid(spec, "job 'm': a map job reads no files");
  spec = MapSpec();
  spec.clear_num_records();
  ExpectInvalid(spec, "job 'm': a map job needs num_records");
  spec = MapSpec();
  spec.set_source_batches_per_epoch(10);
  ExpectInvalid(spec, "source_batches_per_epoch and source_count are for python jobs only");
  spec = MapSpec();
  spec.set_compression(v1::COMPRESSION_LZ4);
  ExpectInvalid(spec, "compression 'lz4' is for tfrecord jobs only; a map job's batches");
  spec = Minimal();
  spec.set_num_records(100);
  ExpectInvalid(spec,
                "job 'train': num_records is for map jobs only; a tfrecord job counts its "
                "records in its files");
  spec = Minimal();
  spec.set_skip_failing_records(true);
  ExpectInvalid(spec, "job 'train': skip_failing_records is for map jobs only; a tfrecord job's");
  spec = MapSpec();
  spec.set_skip_failing_records(true);
  absl::StatusOr<v1::JobSpec> skipping = NormalizeJobSpec(spec);
  ASSERT_TRUE(skipping.ok()) << skipping.status();
  EXPECT_TRUE(skipping->skip_failing_records());
}

TEST(DispatcherJobSpecTest, APythonJobDefaultsToNoShuffleAndAllowsNoOther) {
  v1::JobSpec in;
  in.set_name("py");
  in.set_source(v1::SOURCE_KIND_PYTHON);
  in.set_features("x:int64");
  in.set_batch_size(4);
  in.set_num_consumers(2);
  in.set_source_batches_per_epoch(4);
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->shuffle(), v1::SHUFFLE_NONE);
  EXPECT_EQ(spec->source_count(), 1u);
  in.set_shuffle(v1::SHUFFLE_GLOBAL);
  ExpectInvalid(in, "shuffle must be none, not 'global'");
  in.set_shuffle(v1::SHUFFLE_NONE);
  in.set_num_records(8);
  ExpectInvalid(in,
                "num_records is for map jobs only; a python job counts its records from "
                "source_batches_per_epoch");
}

v1::JobSpec Tokens() {
  v1::JobSpec spec;
  spec.set_name("lm");
  spec.set_source(v1::SOURCE_KIND_TOKENS);
  spec.set_num_consumers(4);
  v1::TokenSpec& tokens = *spec.mutable_tokens();
  tokens.add_sources("/data/web");
  tokens.add_sources("/data/code");
  tokens.set_sequence_length(2048);
  tokens.set_global_batch(32);
  tokens.set_steps_per_epoch(1000);
  return spec;
}

TEST(DispatcherJobSpecTest, ATokensJobsBatchSizeShuffleFeaturesAndWeightsFollowFromItsTokenSpec) {
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(Tokens());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size(), 8u);  // 32 / 4
  EXPECT_EQ(spec->shuffle(), v1::SHUFFLE_NONE);
  EXPECT_EQ(spec->remainder(), v1::REMAINDER_DROP);
  EXPECT_EQ(spec->features(),
            "input_ids:int32[2048],labels:int32[2048],position_ids:int32[2048],"
            "segment_ids:int32[2048],loss_mask:int32[2048]");
  EXPECT_EQ(spec->tokens().packing(), v1::PACKING_CONCAT);
  EXPECT_EQ(spec->tokens().packing_window(), 4096u);
  ASSERT_EQ(spec->tokens().weights_size(), 1);
  EXPECT_EQ(spec->tokens().weights(0).first_step(), 0u);
  EXPECT_THAT(spec->tokens().weights(0).weights(), ::testing::ElementsAre(1.0, 1.0));
  // Normalizing again changes nothing (CreateJob with exist_ok compares normalized specs).
  absl::StatusOr<v1::JobSpec> again = NormalizeJobSpec(*spec);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(DescribeSpecDifference(*spec, *again), "");
}

TEST(DispatcherJobSpecTest, ATokensJobsBadSettingsAreNamed) {
  auto with = [](auto change) {
    v1::JobSpec spec = Tokens();
    change(spec);
    return spec;
  };
  ExpectInvalid(with([](v1::JobSpec& s) { s.mutable_tokens()->clear_sources(); }),
                "needs tokens.sources");
  ExpectInvalid(with([](v1::JobSpec& s) { s.mutable_tokens()->set_sources(1, ""); }),
                "tokens.sources[1] is empty");
  ExpectInvalid(with([](v1::JobSpec& s) { s.mutable_tokens()->set_global_batch(30); }),
                "tokens.global_batch is 30; it must be a multiple of num_consumers (4)");
  ExpectInvalid(with([](v1::JobSpec& s) { s.mutable_tokens()->set_steps_per_epoch(0); }),
                "tokens.steps_per_epoch is 0");
  ExpectInvalid(with([](v1::JobSpec& s) { s.mutable_tokens()->set_sequence_length(0); }),
                "sequence length above 0");
  ExpectInvalid(with([](v1::JobSpec& s) { s.set_batch_size(16); }),
                "batch_size is 16; a tokens job's is global_batch / num_consumers (8)");
  ExpectInvalid(with([](v1::JobSpec& s) { s.set_shuffle(v1::SHUFFLE_GLOBAL); }),
                "shuffle must be none, not 'global'");
  ExpectInvalid(with([](v1::JobSpec& s) { s.set_features("x:int64"); }), "leave features empty");
  ExpectInvalid(with([](v1::JobSpec& s) { s.add_files("a.tfrecord"); }), "reads no files");
  ExpectInvalid(with([](v1::JobSpec& s) { s.mutable_tokens()->set_packing(v1::Packing(9)); }),
                "packing 9 is not a value this croupier knows");
  ExpectInvalid(with([](v1::JobSpec& s) {
                  v1::WeightChange* w = s.mutable_tokens()->add_weights();
                  w->add_weights(1);
                  w->add_weights(-1);
                }),
                "the weight of source '/data/code' is -1");
  ExpectInvalid(with([](v1::JobSpec& s) {
                  for (uint64_t step : {0, 10, 10}) {
                    v1::WeightChange* w = s.mutable_tokens()->add_weights();
                    w->set_first_step(step);
                    w->add_weights(1);
                    w->add_weights(1);
                  }
                }),
                "weight change 2 (step 10): steps must increase");
  auto text = [](v1::JobSpec& s, uint32_t source) {
    v1::TextSource* t = s.mutable_tokens()->add_text();
    t->set_source(source);
    t->add_files("/data/web.jsonl");
    t->set_tokenizer("/data/tokenizer.json");
    t->set_eod_id(-1);
    return t;
  };
  ExpectInvalid(with([&](v1::JobSpec& s) { text(s, 2); }),
                "tokens.text[0] is for source 2; the job has 2 (0 to 1)");
  ExpectInvalid(with([&](v1::JobSpec& s) {
                  text(s, 1);
                  text(s, 1);
                }),
                "tokens.text[1]: source 1 is described twice");
  ExpectInvalid(with([&](v1::JobSpec& s) { text(s, 0)->clear_files(); }),
                "tokens.text[0] names no files");
  ExpectInvalid(with([&](v1::JobSpec& s) { text(s, 0)->clear_tokenizer(); }),
                "tokens.text[0] names no tokenizer");
  ExpectInvalid(with([&](v1::JobSpec& s) { text(s, 0)->set_eod_id(-2); }),
                "tokens.text[0].eod_id is -2");
  absl::StatusOr<v1::JobSpec> with_text =
      NormalizeJobSpec(with([&](v1::JobSpec& s) { text(s, 1)->set_text_key(""); }));
  ASSERT_TRUE(with_text.ok()) << with_text.status();
  EXPECT_EQ(with_text->tokens().text(0).text_key(), "text") << "the default key";
  v1::JobSpec tfrecord = Minimal();
  tfrecord.mutable_tokens()->add_sources("/data/web");
  ExpectInvalid(tfrecord, "tokens is for tokens jobs only, not a tfrecord job");
}

TEST(DispatcherJobSpecTest, DifferencesNameTheSettingsByTheirText) {
  v1::JobSpec a = *NormalizeJobSpec(Minimal());
  v1::JobSpec b = a;
  b.set_shuffle(v1::SHUFFLE_BLOCKS);
  EXPECT_EQ(DescribeSpecDifference(a, b),
            "shuffle is \"global\" in the existing job, \"blocks\" in this request");
}

}  // namespace
}  // namespace croupier
