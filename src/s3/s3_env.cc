#include "src/s3/s3_env.h"

#include <algorithm>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"

namespace croupier::s3 {
namespace {

// Thread-safe: immutable after Open.
class S3File final : public RandomAccessFile {
 public:
  S3File(std::shared_ptr<S3Client> client, S3Path path, std::string name, uint64_t size,
         std::string etag)
      : client_(std::move(client)),
        path_(std::move(path)),
        name_(std::move(name)),
        size_(size),
        etag_(std::move(etag)) {}

  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* dst) const override {
    if (offset >= size_) return 0;
    const uint64_t length = std::min<uint64_t>(n, size_ - offset);
    absl::StatusOr<size_t> got = client_->GetRange(path_, {offset, length}, dst, etag_);
    if (!got.ok()) return Replaced(got.status());
    return got;
  }
  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() const override { return size_; }
  absl::Status ReadRanges(absl::Span<Range> ranges) const override {
    return Replaced(client_->GetRanges(path_, size_, ranges, etag_));
  }
  bool remote() const override { return true; }

 private:
  // The store refuses a read that asks for an object of another ETag (412, ABORTED): the object
  // was written again since it was opened (or indexed).
  absl::Status Replaced(absl::Status status) const {
    if (!absl::IsAborted(status) || etag_.empty()) return status;
    return absl::DataLossError(
        absl::StrCat(name_, " changed since it was indexed (it is no longer the object of ETag ",
                     etag_, "): ", status.message()));
  }

  const std::shared_ptr<S3Client> client_;
  const S3Path path_;
  const std::string name_;
  // As HEAD said at open (or the Stat a record index was checked against): an object is
  // replaced whole, never grown in place, and every read asks for the object of this ETag.
  const uint64_t size_;
  const std::string etag_;
};

absl::Status ReadOnly(absl::string_view what, absl::string_view path) {
  return absl::UnimplementedError(
      absl::StrCat(what, " ", path, ": croupier reads object stores but does not write them"));
}

// s3:// paths to an S3Env made on first use, the rest to the local Env. Thread-safe.
class RoutingEnv final : public Env {
 public:
  explicit RoutingEnv(Env* local) : local_(local) {}

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->OpenForRead(p);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRandomRead(
      const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->OpenForRandomRead(p);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenKnown(const std::string& p,
                                                              const FileStat& known,
                                                              ReadPattern pattern) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->OpenKnown(p, known, pattern);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->OpenForWrite(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->OpenForAppend(p);
  }
  absl::Status Truncate(const std::string& p, uint64_t size) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->Truncate(p, size);
  }
  absl::Status SyncDir(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->SyncDir(p);
  }
  absl::StatusOr<FileStat> Stat(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->Stat(p);
  }
  absl::StatusOr<std::string> ReadWholeFile(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->ReadWholeFile(p);
  }
  absl::Status WriteFileAtomically(const std::string& p, absl::string_view c) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->WriteFileAtomically(p, c);
  }
  absl::Status CreateDirs(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->CreateDirs(p);
  }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->Glob(p);
  }
  absl::StatusOr<std::vector<Listed>> GlobWithStats(const std::string& p) override {
    ASSIGN_OR_RETURN(Env * env, For(p));
    return env->GlobWithStats(p);
  }
  std::string SharedDerivedPath(const std::string& p, absl::string_view suffix) override {
    absl::StatusOr<Env*> env = For(p);
    return env.ok() ? (*env)->SharedDerivedPath(p, suffix) : "";
  }

 private:
  absl::StatusOr<Env*> For(const std::string& path) {
    if (!IsS3Path(path)) return local_;
    absl::call_once(once_, [&] {
      absl::StatusOr<S3Options> options = S3OptionsFromEnvironment(ProcessEnvironment());
      absl::StatusOr<std::unique_ptr<S3Client>> client =
          options.ok() ? S3Client::Create(*std::move(options))
                       : absl::StatusOr<std::unique_ptr<S3Client>>(options.status());
      if (client.ok()) {
        s3_ = std::make_unique<S3Env>(std::shared_ptr<S3Client>(*std::move(client)));
      } else {
        failure_ = client.status();
      }
    });
    if (s3_ == nullptr) {
      return absl::Status(failure_.code(),
                          absl::StrCat("cannot read ", path, ": ", failure_.message()));
    }
    return s3_.get();
  }

  Env* const local_;
  absl::once_flag once_;
  // Written once under once_, read only after it.
  std::unique_ptr<S3Env> s3_;
  absl::Status failure_;
};

// What a HEAD or a listing tells of an object, as a Stat.
FileStat StatOf(const ObjectInfo& info) { return FileStat{info.size, info.mtime_ns, info.etag}; }

}  // namespace

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3Env::OpenForRead(const std::string& path) {
  ASSIGN_OR_RETURN(S3Path at, ParseS3Path(path));
  ASSIGN_OR_RETURN(ObjectInfo info, client_->Head(at));
  return std::make_unique<S3File>(client_, std::move(at), path, info.size, info.etag);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3Env::OpenKnown(const std::string& path,
                                                                   const FileStat& known,
                                                                   ReadPattern) {
  ASSIGN_OR_RETURN(S3Path at, ParseS3Path(path));
  return std::make_unique<S3File>(client_, std::move(at), path, known.size, known.etag);
}

absl::StatusOr<std::unique_ptr<WritableFile>> S3Env::OpenForWrite(const std::string& path) {
  return ReadOnly("writing", path);
}
absl::StatusOr<std::unique_ptr<WritableFile>> S3Env::OpenForAppend(const std::string& path) {
  return ReadOnly("appending to", path);
}
absl::Status S3Env::Truncate(const std::string& path, uint64_t) {
  return ReadOnly("truncating", path);
}
absl::Status S3Env::SyncDir(const std::string& path) { return ReadOnly("syncing", path); }
absl::Status S3Env::WriteFileAtomically(const std::string& path, absl::string_view contents) {
  ASSIGN_OR_RETURN(S3Path at, ParseS3Path(path));
  return client_->Put(at, contents);
}

absl::Status S3Env::CreateDirsOrNothing(const std::string& path) {
  // An object store has no directories: a key's prefix exists once an object has it.
  if (IsS3Path(path)) return absl::OkStatus();
  return ReadOnly("creating directories", path);
}

std::string S3Env::SharedDerivedPath(const std::string& path, absl::string_view suffix) {
  absl::StatusOr<S3Path> at = ParseS3Path(path);
  const std::string& prefix = client_->options().index_prefix;
  if (!at.ok() || prefix == "off") return "";
  const std::string root =
      prefix.empty() ? absl::StrCat("s3://", at->bucket, "/", kSharedDerivedDir) : prefix;
  return absl::StrCat(root, "/", at->bucket, "/", at->key, suffix);
}
absl::Status S3Env::CreateDirs(const std::string& path) { return CreateDirsOrNothing(path); }

absl::StatusOr<FileStat> S3Env::Stat(const std::string& path) {
  ASSIGN_OR_RETURN(S3Path at, ParseS3Path(path));
  ASSIGN_OR_RETURN(ObjectInfo info, client_->Head(at));
  return StatOf(info);
}

absl::StatusOr<std::string> S3Env::ReadWholeFile(const std::string& path) {
  ASSIGN_OR_RETURN(S3Path at, ParseS3Path(path));
  return client_->Get(at);
}

absl::StatusOr<std::vector<std::string>> S3Env::Glob(const std::string& pattern) {
  ASSIGN_OR_RETURN(std::vector<Listed> matches, GlobWithStats(pattern));
  std::vector<std::string> out;
  out.reserve(matches.size());
  for (Listed& match : matches) out.push_back(std::move(match.path));
  return out;
}

absl::StatusOr<std::vector<Env::Listed>> S3Env::GlobWithStats(const std::string& pattern) {
  ASSIGN_OR_RETURN(S3Path at, ParseS3Path(pattern));
  const std::string prefix = GlobPrefix(at.key);
  std::vector<Listed> out;
  if (prefix == at.key) {  // no wildcard: the object itself, if it exists
    absl::StatusOr<ObjectInfo> info = client_->Head(at);
    if (info.ok()) out.push_back({pattern, StatOf(*info)});
    if (!info.ok() && !absl::IsNotFound(info.status())) return info.status();
    return out;
  }
  ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, client_->List(at.bucket, prefix));
  for (const ObjectInfo& object : objects) {
    if (!s3::GlobMatch(at.key, object.key)) continue;
    out.push_back({S3Path{at.bucket, object.key}.ToString(), StatOf(object)});
  }
  std::sort(out.begin(), out.end(),
            [](const Listed& a, const Listed& b) { return a.path < b.path; });
  return out;
}

Env* WithObjectStores(Env* local) {
  static RoutingEnv* env = new RoutingEnv(local);
  return env;
}

}  // namespace croupier::s3
