// An Env that passes every call to another (Env::Default() unless told), for tests: a test's Env
// overrides only the calls it changes (a slow Stat, files that say they are remote, a place for
// shared derived files) and inherits the rest.
#ifndef CROUPIER_SRC_TESTING_FORWARDING_ENV_H_
#define CROUPIER_SRC_TESTING_FORWARDING_ENV_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
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

// Env::Default(), counting the opens for reading of each path: a scan of a data file to index
// it opens it once, a read of its index from a cache opens the cache's file. Its Stat gives
// every file the ETag `etag` (when set), as an object store's would, so that a local file can
// stand for an object a job names with that ETag.
class OpenCountingEnv final : public ForwardingEnv {
 public:
  explicit OpenCountingEnv(std::string etag = "") : etag_(std::move(etag)) {}
  absl::StatusOr<FileStat> Stat(const std::string& p) override {
    absl::StatusOr<FileStat> st = base()->Stat(p);
    if (st.ok() && !etag_.empty()) st->etag = etag_;
    return st;
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    {
      absl::MutexLock lock(&mu_);
      ++opened_[p];
    }
    return base()->OpenForRead(p);
  }
  int opened(const std::string& p) {
    absl::MutexLock lock(&mu_);
    auto it = opened_.find(p);
    return it == opened_.end() ? 0 : it->second;
  }

 private:
  const std::string etag_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> opened_ ABSL_GUARDED_BY(mu_);
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TESTING_FORWARDING_ENV_H_
