#include "src/s3/range_plan.h"

#include <algorithm>
#include <numeric>

namespace croupier::s3 {

std::vector<RangeRequest> PlanRangeRequests(absl::Span<RandomAccessFile::Range> ranges,
                                            uint64_t size, uint64_t max_gap, uint64_t max_request) {
  std::vector<size_t> order;
  for (size_t i = 0; i < ranges.size(); ++i) {
    RandomAccessFile::Range& r = ranges[i];
    r.got =
        r.offset >= size ? 0 : static_cast<size_t>(std::min<uint64_t>(r.length, size - r.offset));
    if (r.got > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].offset < ranges[b].offset; });
  std::vector<RangeRequest> out;
  for (size_t i : order) {
    const RandomAccessFile::Range& r = ranges[i];
    const uint64_t end = r.offset + r.got;
    if (!out.empty() && r.offset <= out.back().range.end() + max_gap) {
      RangeRequest& req = out.back();
      const RandomAccessFile::Range& prev = ranges[req.members.back()];
      req.direct = req.direct && r.offset == prev.offset + prev.got && r.dst == prev.dst + prev.got;
      req.range.length = std::max(req.range.end(), end) - req.range.offset;
      req.members.push_back(i);
      continue;
    }
    RangeRequest req;
    req.range = {r.offset, r.got};
    req.members.push_back(i);
    req.direct = true;
    out.push_back(std::move(req));
  }
  if (max_request == 0) max_request = 1;
  for (RangeRequest& req : out) {
    for (uint64_t at = req.range.offset; at < req.range.end(); at += max_request) {
      req.parts.push_back({at, std::min(max_request, req.range.end() - at)});
    }
  }
  return out;
}

}  // namespace croupier::s3
