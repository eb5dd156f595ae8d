// Test helpers shared by the unit tests.
#ifndef CROUPIER_SRC_COMMON_TESTING_H_
#define CROUPIER_SRC_COMMON_TESTING_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace croupier::testing {

// A fresh directory under /tmp, removed with everything in it when the object goes away.
// Thread-compatible.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "croupier_test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The folder of TFRecord files written by TensorFlow, beside the repository (../shared/data).
inline std::string SharedDataDir() { return CROUPIER_SHARED_DATA_DIR; }

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_COMMON_TESTING_H_
