// Reads TFRecord files that TensorFlow wrote (../shared/data/tfrecord, see its README): the codec
// must read what TensorFlow users already have on disk. Each test skips, naming the folder, when
// it is absent; tf_written_test.cc checks the same on files that TensorFlow writes at test time.
#include <string>
#include <vector>

#include "croupier/batch.h"
#include "croupier/example.h"
#include "croupier/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/testdata_dirs.h"

namespace croupier {
namespace {

using ::croupier::testing::SharedTfrecordDir;

using ExampleTfrecordTest = testing::TestdataTest<SharedTfrecordDir>;

// Every record of the file at `path`, which must read to its end without error.
std::vector<std::string> Records(const std::string& path) {
  auto [records, status] = testing::ReadAll(path);
  EXPECT_TRUE(status.ok()) << status;
  return records;
}

TEST_F(ExampleTfrecordTest, TitanicBatchesLikeItsReadmeSays) {
  std::vector<std::string> records = Records(Path("titanic-train.tfrecord"));
  ASSERT_EQ(records.size(), 891u);
  auto first = ParseExample(records[0]);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(testing::FeatureNames(*first),
              ::testing::ElementsAre("cabin_id", "cabin_type", "embarked", "fare", "gender",
                                     "label", "parch", "pass_id", "pclass", "sibsp", "ticket"));
  auto builder = *BatchBuilder::Create(
      *ParseFeatureSpecs("label:int64,pclass:int64,fare:float32,pass_id:int64,gender:int64"));
  for (const std::string& record : records) {
    auto example = ParseExample(record);
    ASSERT_TRUE(example.ok()) << example.status();
    EXPECT_EQ(EncodeExample(*example).size(), record.size());  // the same bytes, re-encoded
    ASSERT_TRUE(builder->AddRecord(record).ok());
  }
  auto batch = builder->Finish();
  ASSERT_TRUE(batch.ok()) << batch.status();
  const BatchView& view = batch->view();
  EXPECT_EQ(view.num_records(), 891u);
  for (int64_t label : view.Find("label")->ints()) EXPECT_TRUE(label == 0 || label == 1);
  for (int64_t pclass : view.Find("pclass")->ints()) EXPECT_TRUE(pclass >= 1 && pclass <= 3);
  for (float fare : view.Find("fare")->floats()) EXPECT_GE(fare, 0.0f);

  // The test split has no label: a job asking for one fails on the first record, saying why.
  std::vector<std::string> test = Records(Path("titanic-test.tfrecord"));
  ASSERT_EQ(test.size(), 418u);
  absl::Status missing = builder->AddRecord(test[0]);
  EXPECT_TRUE(absl::IsInvalidArgument(missing));
  EXPECT_EQ(missing.message(), "feature 'label': missing");
}

TEST_F(ExampleTfrecordTest, RegressionFloats) {
  for (const char* name : {"regression-train.tfrecord", "regression-eval.tfrecord"}) {
    std::vector<std::string> records = Records(Path(name));
    auto builder = *BatchBuilder::Create(*ParseFeatureSpecs("x:float32,y:float32"));
    for (const std::string& record : records) ASSERT_TRUE(builder->AddRecord(record).ok());
    auto batch = builder->Finish();
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(batch->num_records(), std::string(name) == "regression-eval.tfrecord" ? 99u : 804u);
  }
}

TEST_F(ExampleTfrecordTest, DetectionRecordWithALargeJpeg) {
  std::vector<std::string> records = Records(Path("detection-test.tfrecord"));
  ASSERT_EQ(records.size(), 1u);
  auto example = ParseExample(records[0]);
  ASSERT_TRUE(example.ok()) << example.status();
  auto builder = *BatchBuilder::Create(*ParseFeatureSpecs(
      "image/encoded:bytes,image/format:bytes,image/width:int64,image/height:int64,"
      "image/object/bbox/xmin:float32[*],image/object/class/label:int64[*]"));
  ASSERT_TRUE(builder->AddRecord(records[0]).ok());
  auto batch = builder->Finish();
  ASSERT_TRUE(batch.ok());
  const ColumnView* image = batch->view().Find("image/encoded");
  EXPECT_EQ(image->bytes(0).size(), 708684u);
  EXPECT_EQ(image->bytes(0).substr(0, 2), "\xff\xd8");  // a JPEG's start-of-image marker
  EXPECT_EQ(batch->view().Find("image/format")->bytes(0), "jpg");
  EXPECT_EQ(batch->view().Find("image/object/bbox/xmin")->num_values,
            batch->view().Find("image/object/class/label")->num_values);
}

}  // namespace
}  // namespace croupier
