// Reads TFRecord files that the build's TensorFlow wrote at test time (tests/tf_records.py, run by
// ctest's fixture tf_written_tfrecord): the ground the tests on ../shared/data/tfrecord cover
// (record counts, CRCs, byte-identical rewriting, the index, Example parsing into batches), on
// files whose every value is known. Each test skips with the reason when the files are absent
// (TensorFlow not importable, or the binary run outside ctest).
#include <string>
#include <vector>

#include "croupier/batch.h"
#include "croupier/example.h"
#include "croupier/record_index.h"
#include "croupier/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"
#include "src/io/testdata_dirs.h"

namespace croupier {
namespace {

using ::croupier::testing::FeatureNames;
using ::croupier::testing::ReadAll;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::TfWrittenTfrecordDir;
using ::testing::ElementsAre;

// The counts tests/tf_records.py writes (TF_WRITTEN_COUNTS there).
constexpr size_t kMixed = 300, kRegression = 804, kDetection = 2;


std::string ReadBytes(const std::string& path) { return *ReadFileToString(*Env::Default(), path); }

// A batch of every record of `path` with the features of `spec`.
absl::StatusOr<Batch> BatchOf(const std::string& path, const std::string& spec) {
  auto [records, status] = ReadAll(path);
  if (!status.ok()) return status;
  auto builder = BatchBuilder::Create(*ParseFeatureSpecs(spec));
  if (!builder.ok()) return builder.status();
  for (const std::string& record : records) {
    absl::Status added = (*builder)->AddRecord(record);
    if (!added.ok()) return added;
  }
  return (*builder)->Finish();
}

using TfWrittenTest = testing::TestdataTest<TfWrittenTfrecordDir>;

TEST_F(TfWrittenTest, RecordCountsWithEveryCrcChecked) {
  const std::vector<std::pair<std::string, size_t>> files = {{"mixed.tfrecord", kMixed},
                                                             {"regression.tfrecord", kRegression},
                                                             {"detection.tfrecord", kDetection}};
  for (const auto& [name, count] : files) {
    for (size_t buffer : {size_t{4096}, size_t{4} << 20}) {  // records across buffer refills too
      auto [got, status] = ReadAll(Path(name), buffer);
      ASSERT_TRUE(status.ok()) << name << ": " << status;
      EXPECT_EQ(got.size(), count) << name << ", buffer " << buffer;
    }
  }
}

TEST_F(TfWrittenTest, RewritingGivesIdenticalBytes) {
  ScopedTempDir tmp;
  for (const char* name : {"mixed.tfrecord", "regression.tfrecord", "detection.tfrecord"}) {
    auto [records, status] = ReadAll(Path(name));
    ASSERT_TRUE(status.ok()) << status;
    std::string copy = tmp.Join(name);
    auto writer = *RecordWriter::Create(copy);
    for (const std::string& r : records) ASSERT_TRUE(writer->Write(r).ok());
    ASSERT_TRUE(writer->Close().ok());
    EXPECT_EQ(ReadBytes(copy), ReadBytes(Path(name))) << name;
  }
}

TEST_F(TfWrittenTest, IndexAndReadBack) {
  ScopedTempDir tmp;
  IndexCache cache(tmp.Join("cache"));
  auto index = cache.Get(Path("detection.tfrecord"));
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ((*index)->num_records(), kDetection);
  auto file = *IndexedRecordFile::Open(*index);
  const std::string jpeg = ReadBytes(Path("detection.jpg"));
  std::string buffer;
  for (uint64_t i = 0; i < kDetection; ++i) {
    auto record = file->Read(i, buffer);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_NE(record->find(jpeg), absl::string_view::npos) << "record " << i;
  }
  auto mixed = cache.Get(Path("mixed.tfrecord"));
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ((*mixed)->num_records(), kMixed);
}

TEST_F(TfWrittenTest, MixedFeaturesHoldWhatTensorflowWrote) {
  auto [records, status] = ReadAll(Path("mixed.tfrecord"));
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& record : records) {
    auto example = ParseExample(record);
    ASSERT_TRUE(example.ok()) << example.status();
    EXPECT_THAT(FeatureNames(*example), ElementsAre("emb", "id", "name", "tokens"));
    EXPECT_EQ(EncodeExample(*example).size(), record.size());  // the same bytes, re-encoded
  }
  auto batch =
      BatchOf(Path("mixed.tfrecord"), "id:int64,tokens:int64[*],emb:float32[3],name:bytes");
  ASSERT_TRUE(batch.ok()) << batch.status();
  const BatchView& view = batch->view();
  ASSERT_EQ(view.num_records(), kMixed);
  const ColumnView* tokens = view.Find("tokens");
  const ColumnView* emb = view.Find("emb");
  const ColumnView* name = view.Find("name");
  ASSERT_EQ(tokens->row_splits.size(), kMixed + 1);
  for (size_t i = 0; i < kMixed; ++i) {
    EXPECT_EQ(view.Find("id")->ints()[i], static_cast<int64_t>(i));
    // tokens [0, i % 4): an empty list every fourth record, several values in the others.
    std::vector<int64_t> want_tokens;
    for (int64_t t = 0; t < static_cast<int64_t>(i % 4); ++t) want_tokens.push_back(t);
    std::vector<int64_t> got_tokens(tokens->ints().begin() + tokens->row_splits[i],
                                    tokens->ints().begin() + tokens->row_splits[i + 1]);
    EXPECT_EQ(got_tokens, want_tokens) << "record " << i;
    const float x = static_cast<float>(i);
    EXPECT_THAT(emb->floats().subspan(3 * i, 3), ElementsAre(x, static_cast<float>(i / 2.0), -x));
    EXPECT_EQ(name->bytes(i), "r" + std::to_string(i));
  }
  // A feature the records lack fails the first record, naming it.
  auto builder = *BatchBuilder::Create(*ParseFeatureSpecs("id:int64,label:int64"));
  absl::Status missing = builder->AddRecord(records[0]);
  EXPECT_TRUE(absl::IsInvalidArgument(missing));
  EXPECT_EQ(missing.message(), "feature 'label': missing");
}

TEST_F(TfWrittenTest, RegressionFloatsAreWhatTensorflowWrote) {
  auto batch = BatchOf(Path("regression.tfrecord"), "x:float32,y:float32");
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->num_records(), kRegression);
  for (size_t i = 0; i < kRegression; ++i) {  // regression_row(i) of tests/tf_records.py
    double x = static_cast<double>((i * 37) % 1000);
    double y = 2 * x + (static_cast<double>((i * 7) % 11) - 5) / 10;
    EXPECT_EQ(batch->view().Find("x")->floats()[i], static_cast<float>(x)) << i;
    EXPECT_EQ(batch->view().Find("y")->floats()[i], static_cast<float>(y)) << i;
  }
}

TEST_F(TfWrittenTest, DetectionRecordsWithALargeJpegAndEmptyLists) {
  auto batch =
      BatchOf(Path("detection.tfrecord"),
              "image/encoded:bytes,image/format:bytes,image/width:int64,image/height:int64,"
              "image/object/bbox/xmin:float32[*],image/object/bbox/ymin:float32[*],"
              "image/object/class/label:int64[*],image/object/class/text:bytes[*]");
  ASSERT_TRUE(batch.ok()) << batch.status();
  const BatchView& view = batch->view();
  ASSERT_EQ(view.num_records(), kDetection);
  const std::string jpeg = ReadBytes(Path("detection.jpg"));
  ASSERT_GT(jpeg.size(), 100000u);
  for (uint64_t i = 0; i < kDetection; ++i) {
    EXPECT_EQ(view.Find("image/encoded")->bytes(i), jpeg);  // byte for byte
    EXPECT_EQ(view.Find("image/format")->bytes(i), "jpeg");
    EXPECT_EQ(view.Find("image/width")->ints()[i], 512);
    EXPECT_EQ(view.Find("image/height")->ints()[i], 512);
  }
  EXPECT_EQ(jpeg.substr(0, 2), "\xff\xd8");  // a JPEG's start-of-image marker
  // Record 0 has three objects, record 1 none: every object list of record 1 is empty.
  const ColumnView* xmin = view.Find("image/object/bbox/xmin");
  const ColumnView* ymin = view.Find("image/object/bbox/ymin");
  const ColumnView* label = view.Find("image/object/class/label");
  const ColumnView* text = view.Find("image/object/class/text");
  for (const ColumnView* column : {xmin, ymin, label, text}) {
    EXPECT_THAT(column->row_splits, ElementsAre(0, 3, 3)) << column->name;
  }
  EXPECT_THAT(xmin->floats(), ElementsAre(0.1f, 0.2f, 0.3f));
  EXPECT_THAT(ymin->floats(), ElementsAre(0.5f, 0.6f, 0.7f));
  EXPECT_THAT(label->ints(), ElementsAre(1, 2, 3));
  ASSERT_EQ(text->num_values, 3u);
  EXPECT_EQ(text->bytes(0), "a");
  EXPECT_EQ(text->bytes(1), "");
  EXPECT_EQ(text->bytes(2), "ccc");
}

}  // namespace
}  // namespace croupier
