#include "src/s3/shared_reads.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "src/common/crc32c.h"
#include "src/common/logging.h"
#include "src/io/tfrecord_format.h"
#include "src/s3/sigv4.h"

namespace croupier::s3 {
namespace {

constexpr char kCopyMagic[4] = {'C', 'R', 'S', 'R'};
// A copy's header: the magic, the CRC-32C of the bytes, their length (little-endian).
constexpr size_t kCopyHeaderBytes = 16;
constexpr size_t kNameChars = 32;
constexpr absl::string_view kTmpPrefix = ".tmp-";
constexpr uint64_t kPageBytes = 4096;  // what tmpfs takes of memory for a file, per page

// A file descriptor closed when it goes (and with it the claim it may hold).
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  const int fd_;
};

// Takes the claim on fd (an exclusive OFD lock on the whole file), waiting up to `wait`.
bool TakeClaim(int fd, absl::Duration wait) {
  struct flock lock;
  std::memset(&lock, 0, sizeof(lock));
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  const absl::Time deadline = absl::Now() + wait;
  absl::Duration pause = absl::Milliseconds(1);
  while (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    if ((errno != EAGAIN && errno != EACCES && errno != EINTR) || absl::Now() >= deadline) {
      return false;
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
  return true;
}

bool PreadWhole(int fd, char* dst, size_t n, off_t offset) {
  while (n > 0) {
    ssize_t got = ::pread(fd, dst, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    dst += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

bool WriteWhole(int fd, const char* src, size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, src, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    src += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

bool IsRangeName(absl::string_view name) {
  return name.size() == kNameChars &&
         std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

// The pid in a ".tmp-<pid>-..." name, or 0.
int PidOfTmp(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kTmpPrefix)) return 0;
  int pid = 0;
  return absl::SimpleAtoi(name.substr(0, name.find('-')), &pid) ? pid : 0;
}

// Logs once per process that copies are not kept, and why.
void WarnNotKept(const std::string& directory, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  Log(LogLevel::kWarning, "s3",
      absl::StrCat("the reads shared by the processes of this producer are not kept in ", directory,
                   ": ", why, "; each process fetches what it reads (logged once)"));
}

// Makes `directory` (mode 0700), or takes the one there if it is this user's alone: a
// directory that others may write to, or that is not a directory, is not used.
absl::Status MakeDirectory(const std::string& directory) {
  if (::mkdir(directory.c_str(), 0700) == 0) return absl::OkStatus();
  const int err = errno;
  struct stat st;
  if (err != EEXIST || ::lstat(directory.c_str(), &st) != 0) {
    return absl::UnavailableError(absl::StrCat("making it failed: ", std::strerror(err)));
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        "it is there already, and not a directory of this user's alone (mode 0700)");
  }
  return absl::OkStatus();
}

}  // namespace

SharedReads::SharedReads(Options options) : options_(std::move(options)) {
  void* page = ::mmap(nullptr, sizeof(std::atomic<uint64_t>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  // Without the mapping, this process counts alone (and evicts by its own count).
  kept_ = page == MAP_FAILED ? new std::atomic<uint64_t>(0) : new (page) std::atomic<uint64_t>(0);
  shared_count_ = page != MAP_FAILED;
}

SharedReads::~SharedReads() {
  if (shared_count_) {
    ::munmap(kept_, sizeof(std::atomic<uint64_t>));
  } else {
    delete kept_;
  }
}

absl::StatusOr<SharedReads::Served> SharedReads::Read(
    const std::string& key, size_t length, char* dst,
    absl::FunctionRef<absl::Status(char* dst)> fetch) {
  if (length + kCopyHeaderBytes > options_.capacity || !DirectoryIsOurs()) {  // fetched alone
    absl::Status status = fetch(dst);
    if (!status.ok()) return status;
    return Served::kFetched;
  }
  const std::string path =
      absl::StrCat(options_.directory, "/", Sha256Hex(key).substr(0, kNameChars));
  if (ReadCopy(path, length, dst)) return Served::kShared;
  // The claim: while this process fetches, the others that need the range wait for its copy.
  // One that cannot take it in time (a fetch stuck in its retries) fetches the range itself.
  OwnedFd claim(::open(absl::StrCat(path, ".claim").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (claim.get() >= 0) {
    if (!TakeClaim(claim.get(), options_.claim_wait)) {
      Log(LogLevel::kWarning, "s3",
          absl::StrCat("another process of this producer has been fetching ", key, " for ",
                       absl::FormatDuration(options_.claim_wait),
                       " without an end; fetching it here"));
    } else if (ReadCopy(path, length, dst)) {
      return Served::kShared;
    }
  }
  absl::Status status = fetch(dst);
  if (!status.ok()) return status;
  Keep(path, length, dst);
  return Served::kFetched;
}

bool SharedReads::DirectoryIsOurs() {
  const int state = directory_.load(std::memory_order_acquire);
  if (state != kUnknown) return state == kOurs;
  absl::Status made = MakeDirectory(options_.directory);
  if (!made.ok()) WarnNotKept(options_.directory, std::string(made.message()));
  directory_.store(made.ok() ? kOurs : kRefused, std::memory_order_release);
  return made.ok();
}

bool SharedReads::ReadCopy(const std::string& path, size_t length, char* dst) const {
  OwnedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  char header[kCopyHeaderBytes];
  struct stat st;
  bool ok = ::fstat(fd.get(), &st) == 0 &&
            static_cast<uint64_t>(st.st_size) == kCopyHeaderBytes + length &&
            PreadWhole(fd.get(), header, kCopyHeaderBytes, 0) &&
            std::memcmp(header, kCopyMagic, sizeof(kCopyMagic)) == 0 &&
            tfrecord::DecodeU64(header + 8) == length &&
            PreadWhole(fd.get(), dst, length, kCopyHeaderBytes) &&
            crc32c::Value(dst, length) == tfrecord::DecodeU32(header + 4);
  if (!ok) {
    ::unlink(path.c_str());  // torn or corrupt: fetched again, never served
    return false;
  }
  ::futimens(fd.get(), nullptr);  // used now: the last to be evicted
  return true;
}

void SharedReads::Keep(const std::string& path, size_t length, const char* dst) {
  static std::atomic<uint64_t> serial{0};
  const std::string tmp =
      absl::StrCat(options_.directory, "/", kTmpPrefix, ::getpid(), "-",
                   std::hash<std::thread::id>()(std::this_thread::get_id()), "-", serial++);
  char header[kCopyHeaderBytes];
  std::memcpy(header, kCopyMagic, sizeof(kCopyMagic));
  tfrecord::EncodeU32(header + 4, crc32c::Value(dst, length));
  tfrecord::EncodeU64(header + 8, length);
  bool ok = false;
  int err = 0;
  {
    OwnedFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    ok = fd.get() >= 0 && WriteWhole(fd.get(), header, kCopyHeaderBytes) &&
         WriteWhole(fd.get(), dst, length);
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    WarnNotKept(options_.directory,
                absl::StrCat("writing ", length, " bytes failed: ", std::strerror(err)));
    return;
  }
  const uint64_t pages = (kCopyHeaderBytes + length + kPageBytes - 1) / kPageBytes * kPageBytes;
  if (kept_->fetch_add(pages, std::memory_order_relaxed) + pages > options_.capacity) Evict();
}

void SharedReads::Evict() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(options_.directory.c_str()), ::closedir);
  if (dir == nullptr) return;
  struct Copy {
    int64_t used_ns;
    uint64_t bytes;
    std::string name;
  };
  std::vector<Copy> copies;
  uint64_t total = 0;
  while (struct dirent* e = ::readdir(dir.get())) {
    const absl::string_view name = e->d_name;
    const std::string path = absl::StrCat(options_.directory, "/", name);
    if (const int pid = PidOfTmp(name); pid > 0) {
      // A copy that a process killed while writing it left behind.
      if (::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(path.c_str());
      continue;
    }
    struct stat st;
    if (!IsRangeName(name) || ::stat(path.c_str(), &st) != 0) continue;
    const uint64_t bytes =
        (static_cast<uint64_t>(st.st_size) + kPageBytes - 1) / kPageBytes * kPageBytes;
    copies.push_back(
        {int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, bytes, std::string(name)});
    total += bytes;
  }
  if (total > options_.capacity) {
    std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) {
      return std::tie(a.used_ns, a.name) < std::tie(b.used_ns, b.name);
    });
    for (const Copy& c : copies) {
      if (total <= options_.capacity) break;
      const std::string path = absl::StrCat(options_.directory, "/", c.name);
      ::unlink(path.c_str());
      ::unlink(absl::StrCat(path, ".claim").c_str());
      total -= c.bytes;
    }
  }
  kept_->store(total, std::memory_order_relaxed);
}

namespace {
SharedReads* process_shared_reads = nullptr;
}  // namespace

SharedReads* ProcessSharedReads() { return process_shared_reads; }

void SetProcessSharedReads(const std::string& directory, uint64_t capacity) {
  // A read may still hold the one replaced (on a thread that let go of the GIL): it is kept, not
  // deleted, among those replaced before (one a producer, small).
  static std::vector<std::unique_ptr<SharedReads>>* const replaced =
      new std::vector<std::unique_ptr<SharedReads>>();
  SharedReads* old = std::exchange(
      process_shared_reads, directory.empty() || capacity == 0
                                ? nullptr
                                : new SharedReads(SharedReads::Options{directory, capacity}));
  if (old != nullptr) replaced->emplace_back(old);
}

}  // namespace croupier::s3
