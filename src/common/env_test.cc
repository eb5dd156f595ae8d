#include "src/common/env.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"

namespace croupier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::croupier::testing::ScopedTempDir;

TEST(EnvTest, WriteAtomicallyThenReadBack) {
  Env& env = *Env::Default();
  ScopedTempDir tmp;
  std::string dir = tmp.Join("a/b");
  ASSERT_TRUE(env.CreateDirs(dir).ok());
  ASSERT_TRUE(env.WriteFileAtomically(dir + "/f", "hello").ok());
  auto got = ReadFileToString(env, dir + "/f");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello");
  auto st = env.Stat(dir + "/f");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, 5u);
}

TEST(EnvTest, MissingFileIsNotFoundAndNamesThePath) {
  auto f = Env::Default()->OpenForRead("/nonexistent/croupier/x.tfrecord");
  EXPECT_TRUE(absl::IsNotFound(f.status()));
  EXPECT_THAT(f.status().message(), HasSubstr("/nonexistent/croupier/x.tfrecord"));
}

TEST(EnvTest, DirectoryIsInvalidArgument) {
  auto f = Env::Default()->OpenForRead("/tmp");
  EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
}

TEST(EnvTest, GlobIsSortedAndEmptyOnNoMatch) {
  Env& env = *Env::Default();
  ScopedTempDir tmp;
  const std::string& dir = tmp.path();
  for (const char* n : {"c.rec", "a.rec", "b.rec", "z.txt"}) {
    ASSERT_TRUE(env.WriteFileAtomically(dir + "/" + n, "x").ok());
  }
  auto got = env.Glob(dir + "/*.rec");
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, ElementsAre(dir + "/a.rec", dir + "/b.rec", dir + "/c.rec"));
  auto none = env.Glob(dir + "/*.none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(EnvTest, ReadPastEndIsShort) {
  Env& env = *Env::Default();
  ScopedTempDir tmp;
  std::string path = tmp.Join("short");
  ASSERT_TRUE(env.WriteFileAtomically(path, "abc").ok());
  auto f = env.OpenForRead(path);
  ASSERT_TRUE(f.ok());
  char buf[8];
  auto n = (*f)->Read(1, sizeof(buf), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2u);
}

// Small reads of a file opened for random reads copy out of a mapping of the file made at the
// first one: they still see the file as it is, cut short or grown since (to within the page a cut
// ends in, which may read as zeros: Size() tells).
TEST(EnvTest, SmallReadsFollowAFileCutShortOrGrownAfterTheFirstRead) {
  Env& env = *Env::Default();
  ScopedTempDir tmp;
  const std::string path = tmp.Join("changing");
  ASSERT_TRUE(env.WriteFileAtomically(path, std::string(3 * 4096, 'a')).ok());
  auto f = env.OpenForRandomRead(path);
  ASSERT_TRUE(f.ok());
  char buf[100];
  ASSERT_EQ(*(*f)->Read(0, sizeof(buf), buf), sizeof(buf));  // maps the file
  EXPECT_EQ(*(*f)->Size(), 3u * 4096);

  ASSERT_TRUE(env.Truncate(path, 4096).ok());
  EXPECT_EQ(*(*f)->Size(), 4096u);
  auto n = (*f)->Read(4096 - 10, sizeof(buf), buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 10u);
  n = (*f)->Read(2 * 4096, sizeof(buf), buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);

  // Grown past the size it had when mapped: the new bytes are read too.
  {
    auto w = env.OpenForAppend(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(std::string(3 * 4096, 'b')).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  n = (*f)->Read(3 * 4096, sizeof(buf), buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, sizeof(buf));
  EXPECT_EQ(std::string(buf, 3), "bbb");
}

TEST(EnvTest, AppendKeepsContentsAndTruncateCuts) {
  Env& env = *Env::Default();
  ScopedTempDir tmp;
  const std::string path = tmp.Join("log");
  {
    auto f = env.OpenForAppend(path);  // created
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE((*f)->Append("abc").ok());
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Close().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition((*f)->Sync()));
  }
  {
    auto f = env.OpenForAppend(path);  // kept
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE((*f)->Append("def").ok());
  }
  EXPECT_EQ(*ReadFileToString(env, path), "abcdef");
  ASSERT_TRUE(env.Truncate(path, 4).ok());
  EXPECT_EQ(*ReadFileToString(env, path), "abcd");
  {
    // Appends go to the end as it is now, after a truncation by someone else.
    auto f = env.OpenForAppend(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(env.Truncate(path, 2).ok());
    ASSERT_TRUE((*f)->Append("Z").ok());
  }
  EXPECT_EQ(*ReadFileToString(env, path), "abZ");
  EXPECT_TRUE(env.SyncDir(tmp.path()).ok());
}

TEST(EnvTest, TruncateAndSyncDirNameThePath) {
  Env& env = *Env::Default();
  absl::Status t = env.Truncate("/nonexistent/croupier/journal", 0);
  EXPECT_TRUE(absl::IsNotFound(t)) << t;
  EXPECT_THAT(t.message(), HasSubstr("/nonexistent/croupier/journal"));
  absl::Status d = env.SyncDir("/nonexistent/croupier");
  EXPECT_TRUE(absl::IsNotFound(d)) << d;
  EXPECT_THAT(d.message(), HasSubstr("/nonexistent/croupier"));
  auto a = env.OpenForAppend("/nonexistent/croupier/journal");
  EXPECT_TRUE(absl::IsNotFound(a.status())) << a.status();
}

}  // namespace
}  // namespace croupier
