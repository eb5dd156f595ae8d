// Shared-memory segments: sealed memfds holding one batch each (see shm_transport.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"
#include "src/net/socket.h"
#include "src/transport/memfd_bytes.h"
#include "src/transport/shm_transport.h"

namespace croupier {
namespace {

// The longest abstract name that fits a sockaddr_un with its leading '@'.
constexpr size_t kMaxNameBytes = 100;

}  // namespace

std::string ShmAddressFor(absl::string_view tcp_address) {
  std::string name = absl::StrCat("@croupier-shm/", tcp_address);
  if (name.size() <= kMaxNameBytes) return name;
  return absl::StrCat("@croupier-shm/h", absl::Hex(ContentHash(tcp_address), absl::kZeroPad16));
}

absl::StatusOr<ShmMode> ParseShmMode(absl::string_view text) {
  std::string value(text);
  if (value.empty()) {
    const char* env = std::getenv("CROUPIER_SHM");
    if (env == nullptr || *env == '\0') return ShmMode::kAuto;
    value = env;
  }
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "auto") return ShmMode::kAuto;
  if (v == "on" || v == "1" || v == "true") return ShmMode::kOn;
  if (v == "off" || v == "0" || v == "false") return ShmMode::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "shared-memory mode '", value, "' (", text.empty() ? "$CROUPIER_SHM" : "option",
      ") is not auto, on or off"));
}

uint64_t NextShmSegmentId() {
  static std::atomic<uint64_t> next_id{1};
  return next_id.fetch_add(1);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(size_t capacity) {
  const size_t page = static_cast<size_t>(::getpagesize());
  capacity = std::max(page, (capacity + page - 1) / page * page);
  auto failed = [&](absl::string_view doing) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot make a shared-memory segment of ",
                                                     capacity, " bytes: ", doing, ": ",
                                                     std::strerror(errno)));
  };
  net::Socket fd(::memfd_create("croupier-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return failed("memfd_create");
  if (::ftruncate(fd.fd(), static_cast<off_t>(capacity)) != 0) return failed("ftruncate");
  // Sealed against shrinking: a client's mapping can never lose its pages (SIGBUS).
  if (::fcntl(fd.fd(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) return failed("seal");
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd(), 0);
  if (p == MAP_FAILED) return failed("mmap");
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(NextShmSegmentId(), std::move(fd), static_cast<uint8_t*>(p), capacity));
}

ShmSegment::~ShmSegment() { ::munmap(data_, capacity_); }

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegmentPool::Get(size_t size) {
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= std::max<size_t>(4 * size, 64 << 10)) {
      std::unique_ptr<ShmSegment> segment = std::move(it->second);
      free_bytes_ -= it->first;
      free_.erase(it);
      return segment;
    }
  }
  return ShmSegment::Create(size);
}

void ShmSegmentPool::Put(std::unique_ptr<ShmSegment> segment) {
  absl::MutexLock lock(&mu_);
  // Full: drop the largest free segments first, which keeps the sizes in use.
  while (!free_.empty() && free_bytes_ + segment->capacity() > max_free_bytes_) {
    auto last = std::prev(free_.end());
    free_bytes_ -= last->first;
    free_.erase(last);
  }
  if (free_bytes_ + segment->capacity() > max_free_bytes_) return;
  free_bytes_ += segment->capacity();
  free_.emplace(segment->capacity(), std::move(segment));
}

absl::StatusOr<std::shared_ptr<ShmMapping>> ShmMapping::Map(net::Socket fd, uint64_t min_size,
                                                             absl::string_view peer) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("bad shared-memory segment from ", peer, ": ", why));
  };
  const int seals = ::fcntl(fd.fd(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return bad("not a memfd sealed against shrinking");
  }
  struct stat st {};
  if (::fstat(fd.fd(), &st) != 0 || static_cast<uint64_t>(st.st_size) < min_size) {
    return bad(absl::StrCat("its size is ", st.st_size, " bytes, the frame says at least ",
                            min_size));
  }
  if (st.st_size == 0) return bad("empty");
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd.fd(), 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map a shared-memory segment of ", size,
                                                     " bytes from ", peer, ": ",
                                                     std::strerror(errno)));
  }
  return std::shared_ptr<ShmMapping>(new ShmMapping(static_cast<const uint8_t*>(p), size));
}

ShmMapping::~ShmMapping() { ::munmap(const_cast<uint8_t*>(data_), size_); }

absl::StatusOr<net::Socket> MakeShmSegment(absl::string_view bytes) {
  net::Socket fd(::memfd_create("croupier-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid() ||
      ::pwrite(fd.fd(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()) ||
      ::fcntl(fd.fd(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot make a shared-memory segment: ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<Batch> MapShmSegment(net::Socket fd, uint64_t size, absl::string_view peer) {
  ASSIGN_OR_RETURN(std::shared_ptr<ShmMapping> mapping,
                   ShmMapping::Map(std::move(fd), size, peer));
  const uint8_t* data = mapping->data();
  absl::StatusOr<Batch> batch = Batch::FromBuffer(
      std::shared_ptr<const uint8_t>(data, [mapping](const uint8_t*) mutable { mapping.reset(); }),
      size);
  if (!batch.ok()) {
    return absl::DataLossError(absl::StrCat("bad shared-memory segment from ", peer, ": ",
                                            batch.status().message()));
  }
  return batch;
}

}  // namespace croupier
