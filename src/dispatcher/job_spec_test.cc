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
  EXPECT_EQ(spec->shuffle(), "global");
  EXPECT_EQ(spec->remainder(), "drop");
  EXPECT_EQ(spec->mode(), "dealt");
  EXPECT_EQ(spec->block_size(), 1024u);
  EXPECT_EQ(spec->window_blocks(), 16u);
  EXPECT_EQ(spec->features(), "label:int64,image:bytes");
  EXPECT_EQ(spec->num_epochs(), 0u);
  EXPECT_EQ(spec->compression(), "none");
}

TEST(DispatcherJobSpecTest, Compression) {
  for (const char* codec : {"none", "zstd", "lz4"}) {
    v1::JobSpec in = Minimal();
    in.set_compression(codec);
    absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(in);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->compression(), codec);
  }
  v1::JobSpec spec = Minimal();
  spec.set_compression("gzip");
  ExpectInvalid(spec, "job 'train': unknown compression 'gzip'; expected one of none, zstd, lz4");
  spec = v1::JobSpec();
  spec.set_name("py");
  spec.set_source("python");
  spec.set_features("x:int64");
  spec.set_batch_size(4);
  spec.set_num_consumers(1);
  spec.set_source_batches_per_epoch(4);
  spec.set_compression("zstd");
  ExpectInvalid(spec, "compression 'zstd' is for tfrecord jobs only");
}

TEST(DispatcherJobSpecTest, AJobJournaledBeforeCompressionExistedMatchesNone) {
  v1::JobSpec requested = *NormalizeJobSpec(Minimal());
  v1::JobSpec old = requested;
  old.clear_compression();
  EXPECT_EQ(DescribeSpecDifference(old, requested), "");
  requested.set_compression("zstd");
  EXPECT_EQ(DescribeSpecDifference(old, requested),
            "compression is \"none\" in the existing job, \"zstd\" in this request");
}

TEST(DispatcherJobSpecTest, GivenSettingsKept) {
  v1::JobSpec in = Minimal();
  in.set_shuffle("blocks");
  in.set_block_size(64);
  in.set_window_blocks(4);
  in.set_remainder("pad");
  in.set_mode("first_come");
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(in);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->shuffle(), "blocks");
  EXPECT_EQ(spec->block_size(), 64u);
  EXPECT_EQ(spec->window_blocks(), 4u);
  EXPECT_EQ(spec->remainder(), "pad");
  EXPECT_EQ(spec->mode(), "first_come");
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
  spec.set_mode("broadcast");
  ExpectInvalid(spec, "job 'train': unknown mode 'broadcast'; expected one of dealt, first_come");
  spec = Minimal();
  spec.set_shuffle("random");
  ExpectInvalid(spec, "job 'train': unknown shuffle mode 'random'");
  spec = Minimal();
  spec.set_remainder("keep");
  ExpectInvalid(spec, "job 'train': unknown remainder policy 'keep'");
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

}  // namespace
}  // namespace croupier
