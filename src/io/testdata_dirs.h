// The folders of TFRecord files written by TensorFlow that the io tests read, and how they read a
// whole file (ReadAll). A test that needs a folder skips, naming it and why, when it is absent:
//   auto dir = SharedTfrecordDir();
//   if (!dir.ok()) GTEST_SKIP() << dir.status().message();
#ifndef CROUPIER_SRC_IO_TESTDATA_DIRS_H_
#define CROUPIER_SRC_IO_TESTDATA_DIRS_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "croupier/example.h"
#include "croupier/tfrecord.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/testing.h"

namespace croupier::testing {

// Files that TensorFlow wrote in public projects (see their README): ../shared/data/tfrecord beside
// the repository, or $CROUPIER_SHARED_TFRECORD. NOT_FOUND naming the folder when it is absent (a
// plain clone has none).
inline absl::StatusOr<std::string> SharedTfrecordDir() {
  const char* env = ::getenv("CROUPIER_SHARED_TFRECORD");
  std::string dir = env != nullptr && *env != '\0' ? env : SharedDataDir() + "/tfrecord";
  if (!std::filesystem::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " is missing (the TFRecord files of ../shared/data/tfrecord beside the repository; "
        "CROUPIER_SHARED_TFRECORD may name another folder)"));
  }
  return dir;
}

// Files that the TensorFlow of the build's Python wrote at test time:
// $CROUPIER_TF_WRITTEN_TFRECORD, which ctest sets and fills through its fixture tf_written_tfrecord
// (tests/tf_records.py, run by src/io/CMakeLists.txt). NOT_FOUND with the reason when the variable
// is unset or the script wrote nothing (e.g. TensorFlow is not importable: the script's SKIPPED
// file says so).
inline absl::StatusOr<std::string> TfWrittenTfrecordDir() {
  const char* env = ::getenv("CROUPIER_TF_WRITTEN_TFRECORD");
  if (env == nullptr || *env == '\0') {
    return absl::NotFoundError(
        "CROUPIER_TF_WRITTEN_TFRECORD is not set: ctest sets it, after running tests/tf_records.py "
        "(its fixture tf_written_tfrecord)");
  }
  std::string dir = env;
  auto skipped = ReadFileToString(*Env::Default(), dir + "/SKIPPED");
  if (skipped.ok()) {
    return absl::NotFoundError(
        absl::StrCat("no TensorFlow-written files in ", dir, ": ", *skipped));
  }
  if (!std::filesystem::exists(dir + "/mixed.tfrecord")) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        "/mixed.tfrecord is missing: tests/tf_records.py (ctest's fixture tf_written_tfrecord) "
        "writes it"));
  }
  return dir;
}

// Every record of the TFRecord file `path`, read until its end or the first error (a CRC that
// does not match is one): the records read, and the final status.
inline std::pair<std::vector<std::string>, absl::Status> ReadAll(const std::string& path,
                                                                 size_t buffer_bytes = 4 << 20) {
  std::vector<std::string> out;
  RecordReaderOptions options;
  options.buffer_bytes = buffer_bytes;
  auto reader = RecordReader::Open(path, options);
  if (!reader.ok()) return {out, reader.status()};
  while (true) {
    auto r = (*reader)->Next();
    if (!r.ok()) return {out, r.status()};
    if (!r->has_value()) return {out, absl::OkStatus()};
    out.emplace_back(**r);
  }
}

// A test of the files in the folder that `Folder` finds (SharedTfrecordDir, TfWrittenTfrecordDir):
// each test skips, naming the folder and why, when it is absent.
template <absl::StatusOr<std::string> (*Folder)()>
class TestdataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = Folder();
    if (!dir.ok()) GTEST_SKIP() << dir.status().message();
    dir_ = *std::move(dir);
  }

  // The path of the file `name` of the folder.
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

// The names of the example's features, in its order.
inline std::vector<std::string> FeatureNames(const ::croupier::Example& example) {
  std::vector<std::string> names;
  for (const auto& [name, feature] : example) names.push_back(name);
  return names;
}

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_IO_TESTDATA_DIRS_H_
