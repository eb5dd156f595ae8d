// Process-wide allocator settings for long-running croupier processes.
#ifndef CROUPIER_SRC_COMMON_MEMORY_H_
#define CROUPIER_SRC_COMMON_MEMORY_H_

#include <cstddef>

#include "absl/status/status.h"

namespace croupier {

// The size from which the producer's allocations are mapped on their own (128 KiB, glibc's
// starting value): a batch, a receive buffer, a decoded column.
inline constexpr size_t kLargeAllocationBytes = size_t{128} << 10;

// Makes every allocation of at least `bytes` a mapping of its own, returned to the system when it
// is freed. glibc starts so, but raises the threshold to the size of each mapped block that is
// freed (up to 32 MiB): after the first batches, batch-sized blocks come from the heap arenas, and
// the memory of freed batches stays in the process, scattered among live ones. A producer whose
// buffer holds 64 MiB of batches then grew to over 150 MiB of RSS while a consumer stalled
// (bench/bench_scale.py); with the threshold fixed it stayed at 85 MiB. Setting it also turns
// off glibc's dynamic adjustment. Call once, early, from a process's main. Fails where the
// allocator refuses (it is not glibc's, or `bytes` is above its maximum).
absl::Status KeepLargeAllocationsMapped(size_t bytes = kLargeAllocationBytes);

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_MEMORY_H_
