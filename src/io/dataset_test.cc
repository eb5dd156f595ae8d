#include "croupier/dataset.h"

#include "croupier/tfrecord.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;

TEST(DatasetTest, GlobalIdsRunThroughTheFilesInOrder) {
  ScopedTempDir tmp;
  std::vector<std::string> files;
  std::vector<int> counts = {3, 0, 5, 1};
  for (size_t f = 0; f < counts.size(); ++f) {
    files.push_back(tmp.Join("f" + std::to_string(f)));
    auto w = *RecordWriter::Create(files.back());
    for (int r = 0; r < counts[f]; ++r) ASSERT_TRUE(w->Write(std::to_string(f * 100 + r)).ok());
    ASSERT_TRUE(w->Close().ok());
  }
  IndexCache cache(tmp.Join("cache"));
  auto ds = Dataset::Open(files, cache);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_records(), 9u);
  EXPECT_EQ((*ds)->num_files(), 4u);
  std::vector<std::pair<size_t, uint64_t>> expected = {{0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1},
                                                       {2, 2}, {2, 3}, {2, 4}, {3, 0}};
  for (uint64_t id = 0; id < 9; ++id) {
    auto loc = (*ds)->Locate(id);
    EXPECT_EQ(loc.file, expected[id].first) << id;
    EXPECT_EQ(loc.record, expected[id].second) << id;
  }
}

TEST(DatasetTest, MissingFileIsNotFound) {
  ScopedTempDir tmp;
  IndexCache cache(tmp.Join("cache"));
  auto ds = Dataset::Open({tmp.Join("absent.tfrecord")}, cache);
  EXPECT_TRUE(absl::IsNotFound(ds.status())) << ds.status();
}

}  // namespace
}  // namespace croupier
