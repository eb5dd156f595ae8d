#include "croupier/tfrecord.h"

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "croupier/record_index.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"
#include "src/io/io_testing.h"
#include "src/io/testdata_dirs.h"
#include "src/io/tfrecord_format.h"

namespace croupier {
namespace {

using ::croupier::testing::ReadAll;
using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::SharedTfrecordDir;
using ::croupier::testing::WriteRecords;
using ::testing::HasSubstr;

std::string ReadBytes(const std::string& path) {
  return *ReadFileToString(*Env::Default(), path);
}
void WriteBytes(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(path, bytes).ok());
}

std::vector<std::string> SampleRecords() {
  std::mt19937_64 rng(1);
  std::vector<std::string> records = {"", "a", std::string(1 << 20, 'x')};
  for (int i = 0; i < 200; ++i) {
    std::string r(rng() % 5000, '\0');
    for (char& c : r) c = static_cast<char>(rng());
    records.push_back(r);
  }
  return records;
}

TEST(TfrecordTest, RoundTripWithSmallAndLargeBuffers) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("a.tfrecord");
  auto records = SampleRecords();
  WriteRecords(path, records);
  for (size_t buffer : {size_t{4096}, size_t{65536}, size_t{4} << 20}) {
    auto [got, status] = ReadAll(path, buffer);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(got, records) << "buffer " << buffer;
  }
}

TEST(TfrecordTest, RecordOffsetsAdvanceByFraming) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("a.tfrecord");
  WriteRecords(path, {"abc", "", "hello"});
  auto reader = *RecordReader::Open(path);
  std::vector<uint64_t> offsets;
  while (true) {
    auto r = reader->Next();
    ASSERT_TRUE(r.ok());
    if (!r->has_value()) break;
    offsets.push_back(reader->record_offset());
  }
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 19, 35}));
  EXPECT_EQ(reader->offset(), 56u);
}

TEST(TfrecordTest, KnownBytesOfOneRecord) {
  // "abc": length 3, masked CRC-32C of the 8 length bytes, data, masked CRC-32C of the data.
  ScopedTempDir tmp;
  std::string path = tmp.Join("a.tfrecord");
  WriteRecords(path, {"abc"});
  std::string bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 19u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(bytes.substr(12, 3), "abc");
}

// These two read ../shared/data/tfrecord and skip without it; tf_written_test.cc checks the same
// on files that TensorFlow writes at test time.
TEST(TfrecordTest, SharedFilesWrittenByTensorflowHaveTheirRecordCounts) {
  auto dir = SharedTfrecordDir();
  if (!dir.ok()) GTEST_SKIP() << dir.status().message();
  const std::vector<std::pair<std::string, size_t>> files = {
      {"titanic-train.tfrecord", 891}, {"titanic-test.tfrecord", 418},
      {"regression-train.tfrecord", 804}, {"regression-eval.tfrecord", 99},
      {"detection-test.tfrecord", 1}};
  for (const auto& [name, count] : files) {
    auto [got, status] = ReadAll(*dir + "/" + name);
    ASSERT_TRUE(status.ok()) << name << ": " << status;
    EXPECT_EQ(got.size(), count) << name;
  }
}

TEST(TfrecordTest, RewritingTensorflowFilesGivesIdenticalBytes) {
  auto dir = SharedTfrecordDir();
  if (!dir.ok()) GTEST_SKIP() << dir.status().message();
  ScopedTempDir tmp;
  for (const char* name : {"titanic-train.tfrecord", "detection-test.tfrecord"}) {
    std::string original = *dir + "/" + name;
    auto [records, status] = ReadAll(original);
    ASSERT_TRUE(status.ok()) << status;
    std::string copy = tmp.Join(name);
    WriteRecords(copy, records);
    EXPECT_EQ(ReadBytes(copy), ReadBytes(original)) << name;
  }
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_.Join("c.tfrecord");
    WriteRecords(path_, {"first record", "second record, the one we damage", "third"});
    bytes_ = ReadBytes(path_);
  }
  // Damages the file and reads it; checks the error's code and that it names file and offset.
  absl::Status ReadDamaged(const std::string& damaged, size_t expected_good) {
    WriteBytes(path_, damaged);
    auto [got, status] = ReadAll(path_);
    EXPECT_EQ(got.size(), expected_good);
    if (!status.ok()) {
      EXPECT_THAT(status.message(), HasSubstr(path_));
    }
    return status;
  }
  std::string Flipped(size_t at) {
    std::string b = bytes_;
    b[at] ^= 0x10;
    return b;
  }

  static constexpr size_t kSecond = 12 + 16;  // offset of the second record
  ScopedTempDir tmp_;
  std::string path_;
  std::string bytes_;
};

TEST_F(CorruptionTest, FlippedDataByte) {
  absl::Status s = ReadDamaged(Flipped(kSecond + 12 + 3), 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("corrupt record data at byte 28 of"));
}

TEST_F(CorruptionTest, FlippedLengthByte) {
  absl::Status s = ReadDamaged(Flipped(kSecond + 1), 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("corrupt record length at byte 28 of"));
}

TEST_F(CorruptionTest, FlippedLengthCrc) {
  absl::Status s = ReadDamaged(Flipped(kSecond + 9), 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("corrupt record length at byte 28 of"));
}

TEST_F(CorruptionTest, FlippedDataCrc) {
  size_t data_crc = kSecond + 12 + std::string("second record, the one we damage").size();
  absl::Status s = ReadDamaged(Flipped(data_crc), 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("corrupt record data at byte 28 of"));
}

TEST_F(CorruptionTest, TruncatedInsideData) {
  absl::Status s = ReadDamaged(bytes_.substr(0, kSecond + 20), 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("truncated record at byte 28 of"));
}

TEST_F(CorruptionTest, TruncatedInsideHeader) {
  absl::Status s = ReadDamaged(bytes_.substr(0, kSecond + 5), 1);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("truncated record at byte 28 of"));
  EXPECT_THAT(s.message(), HasSubstr("5 bytes into the 12-byte record header"));
}

TEST_F(CorruptionTest, TruncatedFooter) {
  absl::Status s = ReadDamaged(bytes_.substr(0, bytes_.size() - 1), 2);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("truncated record at byte"));
}

TEST_F(CorruptionTest, EmptyFileHasNoRecords) {
  absl::Status s = ReadDamaged("", 0);
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CorruptionTest, NotATfrecordFile) {
  absl::Status s = ReadDamaged("name,label\nalice,1\nbob,0\n", 0);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("corrupt record length at byte 0 of"));
  EXPECT_THAT(s.message(), HasSubstr("is this a TFRecord file?"));
}

TEST_F(CorruptionTest, EveryTruncationFailsCleanlyOrEndsOnARecordBoundary) {
  for (size_t cut = 0; cut < bytes_.size(); ++cut) {
    WriteBytes(path_, bytes_.substr(0, cut));
    auto [got, status] = ReadAll(path_);
    bool boundary = cut == 0 || cut == kSecond || cut == bytes_.size() - 21;
    EXPECT_EQ(status.ok(), boundary) << "cut at " << cut << ": " << status;
    if (!status.ok()) {
      EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    }
  }
}

TEST_F(CorruptionTest, EverySingleByteFlipIsDetected) {
  for (size_t at = 0; at < bytes_.size(); ++at) {
    WriteBytes(path_, Flipped(at));
    auto [got, status] = ReadAll(path_);
    EXPECT_TRUE(absl::IsDataLoss(status)) << "flip at " << at << ": " << status;
  }
}

TEST_F(CorruptionTest, ReaderStaysFailedAfterAnError) {
  WriteBytes(path_, Flipped(kSecond + 12));
  auto reader = *RecordReader::Open(path_);
  ASSERT_TRUE(reader->Next().ok());
  auto second = reader->Next();
  EXPECT_TRUE(absl::IsDataLoss(second.status()));
  auto third = reader->Next();
  EXPECT_EQ(third.status(), second.status());
}

TEST(TfrecordTest, MissingFileIsNotFound) {
  auto reader = RecordReader::Open("/nonexistent/x.tfrecord");
  EXPECT_TRUE(absl::IsNotFound(reader.status()));
  EXPECT_THAT(reader.status().message(), HasSubstr("/nonexistent/x.tfrecord"));
}

// Regression (fuzz/tfrecord_reader_fuzzer): a header whose length checksum matches but whose
// length claims up to 2^46 bytes made the reader allocate a buffer of that size before reading:
// a 16-byte file could abort the process (std::bad_alloc; ASan: allocation-size-too-big). The
// record index scan, and so CreateJob in the dispatcher, read through the same path.
TEST_F(CorruptionTest, AHugeLengthWithAValidChecksumIsATruncatedRecord) {
  for (uint64_t length : {uint64_t{1} << 40, (uint64_t{1} << 46) - 1}) {
    std::string file(kRecordHeaderBytes, '\0');
    tfrecord::EncodeHeader(file.data(), length);
    file += "four";
    absl::Status s = ReadDamaged(file, 0);
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("truncated record at byte 0 of ", path_,
                                                    ": the header says ", length)));
    auto index = BuildRecordIndex(*Env::Default(), path_);
    EXPECT_TRUE(absl::IsDataLoss(index.status())) << index.status();
  }
}

TEST(TfrecordTest, CheckRecordRejectsALengthThatDisagreesWithTheIndex) {
  ScopedTempDir tmp;
  std::string path = tmp.Join("a.tfrecord");
  WriteRecords(path, {"abcdef"});
  std::string framed = ReadBytes(path);
  auto ok = CheckRecord(framed, path, 0);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "abcdef");
  auto shorter = CheckRecord(framed.substr(0, framed.size() - 1), path, 0);
  EXPECT_TRUE(absl::IsDataLoss(shorter.status()));
  EXPECT_THAT(shorter.status().message(), HasSubstr("changed since it was indexed"));
}

}  // namespace
}  // namespace croupier
