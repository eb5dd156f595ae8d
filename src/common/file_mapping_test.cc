#include "src/common/file_mapping.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;

constexpr size_t kPage = 4096;

// A file of `pages` pages, byte i holding i % 251, mapped.
struct MappedFile {
  explicit MappedFile(size_t pages) : path(tmp.Join("data")) {
    std::string bytes(pages * kPage, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i % 251);
    EXPECT_TRUE(Env::Default()->WriteFileAtomically(path, bytes).ok());
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    auto m = FileMapping::Map(fd, bytes.size(), path);
    close(fd);  // the mapping outlives the descriptor
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) mapping = *std::move(m);
  }
  ScopedTempDir tmp;
  std::string path;
  std::unique_ptr<FileMapping> mapping;
};

bool HoldsPattern(const std::vector<char>& got, uint64_t offset) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != static_cast<char>((offset + i) % 251)) return false;
  }
  return true;
}

#define SKIP_WITHOUT_MAPPINGS()                                                        \
  if (!FileMapping::Supported()) GTEST_SKIP() << "no file mappings under ThreadSanitizer"

TEST(FileMappingTest, CopiesOutAnyRange) {
  SKIP_WITHOUT_MAPPINGS();
  MappedFile f(4);
  ASSERT_NE(f.mapping, nullptr);
  EXPECT_EQ(f.mapping->size(), 4 * kPage);
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, kPage - 3, 3 * kPage}) {
    std::vector<char> got(kPage);
    ASSERT_TRUE(f.mapping->CopyOut(offset, got.size(), got.data()));
    EXPECT_TRUE(HoldsPattern(got, offset)) << offset;
  }
}

TEST(FileMappingTest, AFileCutShortUnderTheMappingIsAFailedCopyNotACrash) {
  SKIP_WITHOUT_MAPPINGS();
  MappedFile f(8);
  ASSERT_NE(f.mapping, nullptr);
  ASSERT_EQ(truncate(f.path.c_str(), 2 * kPage), 0);
  std::vector<char> got(2 * kPage);
  // Twice on this thread (the handler must leave SIGBUS unblocked), then on another.
  EXPECT_FALSE(f.mapping->CopyOut(4 * kPage, got.size(), got.data()));
  EXPECT_FALSE(f.mapping->CopyOut(kPage, got.size(), got.data()));  // runs past the new end
  std::thread([&] { EXPECT_FALSE(f.mapping->CopyOut(6 * kPage, 16, got.data())); }).join();
  // What the file still holds is read as before.
  ASSERT_TRUE(f.mapping->CopyOut(0, got.size(), got.data()));
  EXPECT_TRUE(HoldsPattern(got, 0));
}

TEST(FileMappingTest, ZeroBytesIsInvalidArgument) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join("empty");
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(path, "").ok());
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto m = FileMapping::Map(fd, 0, path);
  close(fd);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find(path), std::string::npos);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CROUPIER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CROUPIER_ASAN 1
#endif

// The handler hands on a SIGBUS that is not a guarded copy's to the handler before it: a bus
// error outside a copy still ends the process as a bus error (or, under AddressSanitizer, whose
// handler was there first, as its report).
TEST(FileMappingDeathTest, OtherBusErrorsGoToTheHandlerBefore) {
  SKIP_WITHOUT_MAPPINGS();
  MappedFile f(1);  // installs the handler
  ASSERT_NE(f.mapping, nullptr);
#ifdef CROUPIER_ASAN
  EXPECT_DEATH(raise(SIGBUS), "AddressSanitizer: BUS");
#else
  EXPECT_EXIT(raise(SIGBUS), ::testing::KilledBySignal(SIGBUS), "");
#endif
}

}  // namespace
}  // namespace croupier
