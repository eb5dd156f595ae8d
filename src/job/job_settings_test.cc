#include "src/job/job_settings.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/job/job_json.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Every typed value goes to its wire value and back, and no two share one.
TEST(JobSettingsTest, EveryValueRoundTripsThroughTheWire) {
  for (SourceKind v : {SourceKind::kTfrecord, SourceKind::kPython, SourceKind::kMap}) {
    EXPECT_EQ(*FromProto(ToProto(v)), v);
  }
  for (DealMode v : {DealMode::kDealt, DealMode::kFirstCome}) EXPECT_EQ(*FromProto(ToProto(v)), v);
  for (ShuffleMode v : {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlocks}) {
    EXPECT_EQ(*FromProto(ToProto(v)), v);
  }
  for (Remainder v : {Remainder::kDrop, Remainder::kPad}) EXPECT_EQ(*FromProto(ToProto(v)), v);
  for (Codec v : {Codec::kNone, Codec::kZstd, Codec::kLz4}) EXPECT_EQ(*FromProto(ToProto(v)), v);
  EXPECT_EQ(ToProto(SourceKind::kMap), v1::SOURCE_KIND_MAP);
  EXPECT_EQ(SourceKindName(SourceKind::kMap), "map");
  EXPECT_EQ(*ParseSourceKind("map"), SourceKind::kMap);
}

TEST(JobSettingsTest, UnspecifiedIsTheDefaultAndAnUnknownNumberIsRefused) {
  const TypedSettings settings = *TypedSettingsOf(v1::JobSpec());
  EXPECT_EQ(settings.source, SourceKind::kTfrecord);
  EXPECT_EQ(settings.mode, DealMode::kDealt);
  EXPECT_EQ(settings.shuffle, ShuffleMode::kGlobal);
  EXPECT_EQ(settings.remainder, Remainder::kDrop);
  EXPECT_EQ(settings.compression, Codec::kNone);
  v1::JobSpec spec;
  spec.set_compression(static_cast<v1::Compression>(4));
  EXPECT_EQ(TypedSettingsOf(spec).status().message(),
            "compression 4 is not a value this croupier knows");
}

TEST(JobSettingsTest, TextSetsTheEnumsAndEmptyLeavesThemUnspecified) {
  v1::JobSpec spec;
  ASSERT_TRUE(SetSettingsFromText({.source = "map",
                                   .mode = "first_come",
                                   .shuffle = "blocks",
                                   .remainder = "pad",
                                   .compression = "lz4"},
                                  spec)
                  .ok());
  EXPECT_EQ(spec.source(), v1::SOURCE_KIND_MAP);
  EXPECT_EQ(spec.mode(), v1::DEAL_MODE_FIRST_COME);
  EXPECT_EQ(spec.shuffle(), v1::SHUFFLE_BLOCKS);
  EXPECT_EQ(spec.remainder(), v1::REMAINDER_PAD);
  EXPECT_EQ(spec.compression(), v1::COMPRESSION_LZ4);
  const SettingsText text = SettingsTextOf(spec);
  EXPECT_EQ(text.source, "map");
  EXPECT_EQ(text.mode, "first_come");
  EXPECT_EQ(text.shuffle, "blocks");
  EXPECT_EQ(text.remainder, "pad");
  EXPECT_EQ(text.compression, "lz4");
  ASSERT_TRUE(SetSettingsFromText({}, spec).ok());
  EXPECT_EQ(spec.source(), v1::SOURCE_KIND_UNSPECIFIED);
  EXPECT_EQ(spec.compression(), v1::COMPRESSION_UNSPECIFIED);
  EXPECT_EQ(SettingsTextOf(spec).shuffle, "");
}

TEST(JobSettingsTest, AnUnknownNameListsTheAcceptedOnesAndChangesNothing) {
  v1::JobSpec spec;
  spec.set_shuffle(v1::SHUFFLE_NONE);
  absl::Status s = SetSettingsFromText({.shuffle = "sideways"}, spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unknown shuffle mode 'sideways'; expected one of none, global, blocks");
  EXPECT_EQ(spec.shuffle(), v1::SHUFFLE_NONE);
  EXPECT_EQ(SetSettingsFromText({.source = "stream"}, spec).message(),
            "unknown source 'stream'; expected one of tfrecord, python, map, tokens");
  EXPECT_EQ(SetSettingsFromText({.mode = "broadcast"}, spec).message(),
            "unknown mode 'broadcast'; expected one of dealt, first_come");
}

// The users' JSON names the settings as the command line does, in both directions, at any depth
// (a StatusResponse's jobs).
TEST(JobJsonTest, SettingsAreWrittenAndReadByTheirText) {
  v1::StatusResponse status;
  v1::JobSpec& spec = *status.add_jobs()->mutable_spec();
  spec.set_name("SHUFFLE_GLOBAL");  // a name is not a setting
  spec.set_shuffle(v1::SHUFFLE_BLOCKS);
  spec.set_source(v1::SOURCE_KIND_MAP);
  spec.set_num_records(12);
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const std::string json = ToUserJson(status, options);
  EXPECT_THAT(json, HasSubstr(R"("shuffle":"blocks")"));
  EXPECT_THAT(json, HasSubstr(R"("source":"map")"));
  EXPECT_THAT(json, HasSubstr(R"("name":"SHUFFLE_GLOBAL")"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("SHUFFLE_BLOCKS")));
  v1::StatusResponse back;
  ASSERT_TRUE(FromUserJson(json, &back).ok()) << json;
  EXPECT_EQ(back.ShortDebugString(), status.ShortDebugString());

  options.always_print_primitive_fields = true;
  EXPECT_THAT(ToUserJson(v1::JobSpec(), options), HasSubstr(R"("mode":"")"));
}

// A job's state reads as the command line prints it: "idle", "running", "done".
TEST(JobJsonTest, JobStatesAreWrittenAndReadByTheirText) {
  v1::StatusResponse status;
  status.add_job_summaries()->set_state(v1::JOB_STATE_DONE);
  status.add_job_summaries()->set_state(v1::JOB_STATE_IDLE);
  const std::string json = ToUserJson(status, google::protobuf::util::JsonPrintOptions());
  EXPECT_THAT(json, HasSubstr(R"("state":"done")"));
  EXPECT_THAT(json, HasSubstr(R"("state":"idle")"));
  v1::StatusResponse back;
  ASSERT_TRUE(FromUserJson(json, &back).ok()) << json;
  EXPECT_EQ(back.ShortDebugString(), status.ShortDebugString());
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "running");
  EXPECT_EQ(FromUserJson(R"({"job_summaries": [{"state": "over"}]})", &back).message(),
            "unknown job state 'over'; expected one of idle, running, done");
}

// The Python API's dicts have counts as numbers: a 64-bit integer is a JSON number where a double
// holds it exactly, else protobuf's string; the plain form keeps protobuf's strings.
TEST(JobJsonTest, Int64sAreNumbersWhenAsked) {
  v1::JobSpec spec;
  spec.set_name("12");  // a string field that looks like a number stays a string
  spec.set_num_records(43);
  spec.set_seed(uint64_t{1} << 60);
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const std::string numbers = ToUserJson(spec, options, /*int64_as_numbers=*/true);
  EXPECT_THAT(numbers, HasSubstr(R"("num_records":43)"));
  EXPECT_THAT(numbers, HasSubstr(R"("name":"12")"));
  EXPECT_THAT(numbers, HasSubstr(R"("seed":"1152921504606846976")"));
  EXPECT_THAT(ToUserJson(spec, options), HasSubstr(R"("num_records":"43")"));
  v1::JobSpec back;
  ASSERT_TRUE(FromUserJson(numbers, &back).ok()) << numbers;
  EXPECT_EQ(back.ShortDebugString(), spec.ShortDebugString());
}

TEST(JobJsonTest, AnUnknownNameInJsonIsInvalid) {
  v1::JobSpec spec;
  absl::Status s = FromUserJson(R"({"name": "j", "mode": "random"})", &spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unknown mode 'random'; expected one of dealt, first_come");
  s = FromUserJson(R"({"name": "j", "batch_size": "many"})", &spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(FromUserJson(R"({"name": "j", "mode": "first_come", "shuffle": ""})", &spec).ok());
  EXPECT_EQ(spec.mode(), v1::DEAL_MODE_FIRST_COME);
  EXPECT_EQ(spec.shuffle(), v1::SHUFFLE_UNSPECIFIED);
}

}  // namespace
}  // namespace croupier
