#include "src/common/env.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "src/common/file_mapping.h"
#include "src/common/status_macros.h"
#include "src/s3/s3_env.h"

namespace croupier {

absl::Status ErrnoToStatus(int err, absl::string_view what, absl::string_view path) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case EINTR:
    case EAGAIN:
      return absl::UnavailableError(msg);
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

namespace {

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  // `mapped` (OpenForRandomRead): small reads (a record, read at random) copy out of a mapping
  // of the file, made at the first one (FileMapping: a memcpy instead of a system call). Large
  // reads, reads past the size the file had then, and every read of a file that cannot be mapped
  // use pread; so does a small read whose bytes the file no longer holds, which then returns
  // what pread finds.
  PosixRandomAccessFile(std::string name, int fd, bool mapped)
      : name_(std::move(name)), fd_(fd), mapped_(mapped) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  static constexpr size_t kMaxMappedRead = size_t{64} << 10;

  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* dst) const override {
    if (mapped_ && n <= kMaxMappedRead) {
      const FileMapping* mapping = Mapping();
      if (mapping != nullptr && offset <= mapping->size() && n <= mapping->size() - offset &&
          mapping->CopyOut(offset, n, dst)) {
        return n;
      }
    }
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, absl::StrCat("reading at byte ", offset + done, " of"), name_);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    return done;
  }
  const std::string& name() const override { return name_; }
  void WillRead(uint64_t offset, size_t n) const override {
    if (!mapped_ || n > kMaxMappedRead) return;
    const FileMapping* mapping = Mapping();
    if (mapping != nullptr && offset <= mapping->size() && n <= mapping->size() - offset) {
      mapping->Prefetch(offset, n);
    }
  }
  absl::StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoToStatus(errno, "reading the size of", name_);
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  const FileMapping* Mapping() const {
    absl::call_once(map_once_, [this] {
      struct stat st;
      if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) return;
      auto mapping = FileMapping::Map(fd_, static_cast<uint64_t>(st.st_size), name_);
      if (mapping.ok()) mapping_ = *std::move(mapping);
    });
    return mapping_.get();
  }

  const std::string name_;
  const int fd_;
  const bool mapped_;
  mutable absl::once_flag map_once_;
  mutable std::unique_ptr<FileMapping> mapping_;  // set once, under map_once_
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string name, int fd) : name_(std::move(name)), fd_(fd) {}
  ~PosixWritableFile() override { Close().IgnoreError(); }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(name_, " is closed"));
    while (!data.empty()) {
      ssize_t w = ::write(fd_, data.data(), data.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, "writing", name_);
      }
      data.remove_prefix(static_cast<size_t>(w));
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(name_, " is closed"));
    if (::fdatasync(fd_) != 0) return ErrnoToStatus(errno, "syncing", name_);
    return absl::OkStatus();
  }
  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int r = ::close(fd_);
    fd_ = -1;
    if (r != 0) return ErrnoToStatus(errno, "closing", name_);
    return absl::OkStatus();
  }
  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  int fd_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) override {
    return Open(path, /*mapped=*/false);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRandomRead(
      const std::string& path) override {
    return Open(path, /*mapped=*/true);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoToStatus(errno, "creating", path);
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoToStatus(errno, "opening for append", path);
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  absl::Status Truncate(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("truncating to ", size, " bytes"), path);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "opening directory", path);
    int r = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (r != 0) return ErrnoToStatus(err, "syncing directory", path);
    return absl::OkStatus();
  }

  absl::StatusOr<FileStat> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat", path);
    FileStat out;
    out.size = static_cast<uint64_t>(st.st_size);
    out.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return out;
  }

  absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) override {
    // Unique to the call: two threads may write one path at once (two jobs opening one file's
    // index), and each must rename a whole file of its own.
    static std::atomic<uint64_t> calls{0};
    std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", calls++);
    {
      ASSIGN_OR_RETURN(auto file, OpenForWrite(tmp));
      absl::Status s = file->Append(contents);
      if (s.ok()) s = file->Sync();
      if (s.ok()) s = file->Close();
      if (!s.ok()) {
        ::unlink(tmp.c_str());
        return s;
      }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      absl::Status s = ErrnoToStatus(errno, "renaming onto", path);
      ::unlink(tmp.c_str());
      return s;
    }
    const size_t slash = path.rfind('/');
    return SyncDir(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
  }

  absl::Status CreateDirs(const std::string& path) override {
    if (path.empty()) return absl::OkStatus();
    for (size_t pos = 1; pos <= path.size(); ++pos) {
      if (pos != path.size() && path[pos] != '/') continue;
      std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoToStatus(errno, "creating directory", prefix);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override {
    glob_t g;
    std::memset(&g, 0, sizeof(g));
    int r = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
    std::vector<std::string> out;
    if (r == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    if (r != 0 && r != GLOB_NOMATCH) {
      return absl::InternalError(absl::StrCat("glob ", pattern, " failed (code ", r, ")"));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  static absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path,
                                                                bool mapped) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "opening", path);
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("opening ", path, ": is a directory"));
    }
    return std::make_unique<PosixRandomAccessFile>(path, fd, mapped);
  }
};

}  // namespace

absl::Status Env::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("renaming ", from, " onto"), to);
  }
  return absl::OkStatus();
}

absl::Status Env::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return ErrnoToStatus(errno, "removing", path);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Env::Listed>> Env::GlobWithStats(const std::string& pattern) {
  ASSIGN_OR_RETURN(std::vector<std::string> paths, Glob(pattern));
  std::vector<Listed> out;
  out.reserve(paths.size());
  for (std::string& path : paths) out.push_back({std::move(path), std::nullopt});
  return out;
}

Env* Env::Default() {
  // s3:// paths go to the S3 client (src/s3/s3_env.h), every other path to POSIX.
  static Env* env = s3::WithObjectStores(new PosixEnv());
  return env;
}

absl::StatusOr<std::string> Env::ReadWholeFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, OpenForRead(path));
  // The open file's size when it can tell, saving a Stat.
  absl::StatusOr<uint64_t> size = file->Size();
  if (!size.ok()) {
    ASSIGN_OR_RETURN(FileStat st, Stat(path));
    size = st.size;
  }
  std::string out(*size, '\0');
  ASSIGN_OR_RETURN(size_t n, file->Read(0, out.size(), out.data()));
  out.resize(n);
  return out;
}

}  // namespace croupier
