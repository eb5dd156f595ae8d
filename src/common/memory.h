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

// What a process that makes one batch after another keeps of the memory it frees (a map job's
// worker, python/croupier/map/zygote.py): up to this much at the top of its heap.
inline constexpr size_t kReusedBytes = size_t{256} << 20;

// The opposite choice, for a process that makes one batch after another: allocations below
// 32 MiB (glibc's largest threshold) come from the heap, and up to `keep_bytes` of freed memory
// stays there for the next batch instead of going back to the system. A worker holds a batch's
// records at once, then frees them all; with glibc's defaults that memory is given back (trimmed
// or unmapped) and the next batch faults every page in again, zeroed: 146 page faults a record,
// and 15-30% more CPU, on 64 records of 602 KB (bench/bench_map.py's large workload). The cost
// is memory: the process keeps the peak of a batch's work, and up to `keep_bytes` more once
// freed. A threshold that the environment sets (glibc's MALLOC_MMAP_THRESHOLD_ or
// MALLOC_TRIM_THRESHOLD_) is left as it is. Call once, early, from a process's main. Fails as
// KeepLargeAllocationsMapped does.
absl::Status KeepFreedMemoryForReuse(size_t keep_bytes = kReusedBytes);

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_MEMORY_H_
