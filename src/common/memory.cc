#include "src/common/memory.h"

#include <malloc.h>

#include <climits>

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

}  // namespace croupier
