// How a ReadRanges call on an object becomes requests: ranges sorted by offset, neighbours merged
// into one GET (touching or overlapping ranges, or gaps of at most max_gap bytes), and a merged
// request longer than max_request cut into parts that run in parallel. Pure functions, so that
// the coalescing is tested without a store.
#ifndef CROUPIER_SRC_S3_RANGE_PLAN_H_
#define CROUPIER_SRC_S3_RANGE_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "src/common/env.h"
#include "src/s3/byte_range.h"

namespace croupier::s3 {

// One merged request: the object's bytes `range`, which serve the caller's ranges `members`
// (indexes into the ranges planned, ascending by offset). `direct` when the members lie end to
// end both in the object and in memory, so the answer lands in their buffers with no copy;
// otherwise it is read into a buffer of its own and each member copied out of it. Plain value.
struct RangeRequest {
  ByteRange range;
  std::vector<size_t> members;
  bool direct = false;
  // The parts fetched by separate GETs, each at most max_request bytes, end to end over range.
  std::vector<ByteRange> parts;
};

// The requests that read `ranges` of an object of `size` bytes. A range is clipped to the object
// (its `got` is what will be read; a range past the end reads nothing and is in no request).
// Sets each range's `got`.
std::vector<RangeRequest> PlanRangeRequests(absl::Span<RandomAccessFile::Range> ranges,
                                            uint64_t size, uint64_t max_gap, uint64_t max_request);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_RANGE_PLAN_H_
