#include "src/common/memory.h"

#include <malloc.h>

#include <climits>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace croupier {

absl::Status KeepLargeAllocationsMapped(size_t bytes) {
  if (bytes == 0 || bytes > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("mmap threshold of ", bytes, " bytes"));
  }
#if defined(__GLIBC__)
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) != 1) {
    return absl::InternalError(absl::StrCat("the allocator refused an mmap threshold of ", bytes,
                                            " bytes"));
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError("the allocator's mmap threshold is set only with glibc");
#endif
}

absl::Status KeepFreedMemoryForReuse(size_t keep_bytes) {
  if (keep_bytes == 0 || keep_bytes > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("trim threshold of ", keep_bytes, " bytes"));
  }
#if defined(__GLIBC__)
  constexpr int kLargestMmapThreshold = 32 << 20;  // glibc's maximum on 64-bit systems
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr &&
      mallopt(M_MMAP_THRESHOLD, kLargestMmapThreshold) != 1) {
    return absl::InternalError("the allocator refused an mmap threshold of 32 MiB");
  }
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr &&
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(keep_bytes)) != 1) {
    return absl::InternalError(absl::StrCat("the allocator refused a trim threshold of ",
                                            keep_bytes, " bytes"));
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError("the allocator's thresholds are set only with glibc");
#endif
}

}  // namespace croupier
