// An Env that passes every call to another (Env::Default() unless told), for tests: a test's Env
// overrides only the calls it changes (a slow Stat, files that say they are remote, a place for
// shared derived files) and inherits the rest.
#ifndef CROUPIER_SRC_TESTING_FORWARDING_ENV_H_
#define CROUPIER_SRC_TESTING_FORWARDING_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "src/common/env.h"

namespace croupier::testing {

class ForwardingEnv : public Env {
 public:
  explicit ForwardingEnv(Env* base = Env::Default()) : base_(base) {}

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    return base_->OpenForRead(p);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRandomRead(
      const std::string& p) override {
    return base_->OpenForRandomRead(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& p) override {
    return base_->OpenForWrite(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& p) override {
    return base_->OpenForAppend(p);
  }
  absl::Status Truncate(const std::string& p, uint64_t n) override { return base_->Truncate(p, n); }
  absl::Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  absl::StatusOr<FileStat> Stat(const std::string& p) override { return base_->Stat(p); }
  absl::Status WriteFileAtomically(const std::string& p, absl::string_view c) override {
    return base_->WriteFileAtomically(p, c);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  absl::Status RemoveFile(const std::string& p) override { return base_->RemoveFile(p); }
  absl::Status CreateDirs(const std::string& p) override { return base_->CreateDirs(p); }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& p) override {
    return base_->Glob(p);
  }
  absl::StatusOr<std::vector<Listed>> GlobWithStats(const std::string& p) override {
    return base_->GlobWithStats(p);
  }
  std::string SharedDerivedPath(const std::string& p, absl::string_view suffix) override {
    return base_->SharedDerivedPath(p, suffix);
  }

 protected:
  Env* base() const { return base_; }

 private:
  Env* const base_;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TESTING_FORWARDING_ENV_H_
