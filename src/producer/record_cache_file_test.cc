#include "src/producer/record_cache_file.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/common/testing.h"
#include "src/io/tfrecord_format.h"

namespace croupier::record_cache_file {
namespace {

using ::croupier::testing::ScopedTempDir;
using ::testing::HasSubstr;

class ProducerRecordCacheFileTest : public ::testing::Test {
 protected:
  Scanned ScanBytes(const std::string& bytes) {
    const std::string path = tmp_.Join("shard.records");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto file = Env::Default()->OpenForRead(path);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return Scanned{};
    auto scanned = Scan(**file, bytes.size());
    EXPECT_TRUE(scanned.ok()) << scanned.status();
    return scanned.ok() ? *std::move(scanned) : Scanned{};
  }

  ScopedTempDir tmp_;
};

// A frame's header with its fields set to `data_len` and `data_crc`, its header checksum made
// right again: a frame that passes its check but that the writer would not write as such.
std::string WithData(std::string frame, uint32_t data_len, uint32_t data_crc) {
  tfrecord::EncodeU32(frame.data() + 9, data_len);
  tfrecord::EncodeU32(frame.data() + 13, data_crc);
  tfrecord::EncodeU32(frame.data(), crc32c::Value(frame.data() + 4, frame.size() - 4));
  return frame;
}

TEST_F(ProducerRecordCacheFileTest, TheWritersFramesScanBackAsWritten) {
  const std::string record = "record bytes";
  const uint32_t crc = crc32c::Value(record);
  const std::string bytes = FileFrame(7, "a/b.tfrecord 100 5") +
                            RecordHeader(7, 42, record.size(), crc) + record + FileFrame(8, "c");
  const Scanned s = ScanBytes(bytes);
  EXPECT_EQ(s.good_bytes, bytes.size());
  EXPECT_EQ(s.stopped, "");
  ASSERT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.files[0].local_id, 7u);
  EXPECT_EQ(s.files[0].identity, "a/b.tfrecord 100 5");
  EXPECT_EQ(s.files[1].identity, "c");
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_EQ(s.records[0].record, 42u);
  EXPECT_EQ(s.records[0].crc, crc);
  EXPECT_EQ(bytes.substr(s.records[0].data_offset, s.records[0].size), record);
}

// A file frame carries no data. One whose header says otherwise, even with a header checksum
// that matches, ends the scan there: what is kept is exactly what the writer wrote (a fuzzer
// found a file frame with a data checksum that the scan kept and a rewrite did not give back).
TEST_F(ProducerRecordCacheFileTest, AFileFrameWithDataFieldsEndsTheScan) {
  const std::string good = FileFrame(1, "kept");
  for (const auto& [len, crc] : {std::pair<uint32_t, uint32_t>{0, 9}, {3, 0}}) {
    const std::string bad = WithData(FileFrame(2, "not kept"), len, crc) + "xyz";
    const Scanned s = ScanBytes(good + bad);
    EXPECT_EQ(s.good_bytes, good.size());
    EXPECT_EQ(s.files.size(), 1u);
    EXPECT_THAT(s.stopped, HasSubstr("a frame the writer does not write (kind 1"));
    EXPECT_THAT(s.stopped, HasSubstr("at byte " + std::to_string(good.size())));
  }
}

TEST_F(ProducerRecordCacheFileTest, ACutFrameEndsTheScanAtItsStart) {
  const std::string good = FileFrame(1, "kept");
  const std::string record = RecordHeader(1, 0, 10, 0) + "short";
  const Scanned s = ScanBytes(good + record);
  EXPECT_EQ(s.good_bytes, good.size());
  EXPECT_TRUE(s.records.empty());
  EXPECT_THAT(s.stopped, HasSubstr("at byte " + std::to_string(good.size())));
}

}  // namespace
}  // namespace croupier::record_cache_file
