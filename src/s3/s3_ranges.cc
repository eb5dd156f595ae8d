// S3Client::GetRanges: a ReadRanges call on an object as few GETs, run at once on the client's
// FetchPool.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "src/s3/fetch_pool.h"
#include "src/s3/range_plan.h"
#include "src/s3/s3_client.h"

namespace croupier::s3 {
namespace {

// What the GETs of one GetRanges call share: the count still running and the first error.
struct Pending {
  absl::Mutex mu;
  size_t running ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
};

}  // namespace

absl::Status S3Client::GetRanges(const S3Path& path, uint64_t size,
                                 absl::Span<RandomAccessFile::Range> ranges) {
  counters_.AddRanges(ranges.size());
  std::vector<RangeRequest> requests =
      PlanRangeRequests(ranges, size, options_.merge_gap_bytes, options_.max_request_bytes);
  // A request whose members are not laid out end to end is read into a buffer of its own.
  std::vector<std::unique_ptr<char[]>> staging(requests.size());
  auto pending = std::make_shared<Pending>();
  struct Part {
    ByteRange range;
    char* dst;
  };
  std::vector<Part> parts;
  for (size_t i = 0; i < requests.size(); ++i) {
    const RangeRequest& req = requests[i];
    char* base = req.direct ? ranges[req.members.front()].dst : nullptr;
    if (!req.direct) {
      staging[i].reset(new char[req.range.length]);
      base = staging[i].get();
    }
    for (const ByteRange& part : req.parts) {
      parts.push_back({part, base + (part.offset - req.range.offset)});
    }
  }
  {
    absl::MutexLock lock(&pending->mu);
    pending->running = parts.size();
  }
  // The last part runs in the calling thread, which would only wait otherwise.
  for (size_t i = 0; i < parts.size(); ++i) {
    auto fetch = [this, path, part = parts[i], pending] {
      absl::StatusOr<size_t> got = GetRange(path, part.range, part.dst);
      absl::MutexLock lock(&pending->mu);
      if (!got.ok() && pending->status.ok()) pending->status = got.status();
      --pending->running;
    };
    if (i + 1 == parts.size()) {
      fetch();
    } else {
      pool_->Run(std::move(fetch));
    }
  }
  absl::MutexLock lock(&pending->mu);
  // Every GET ends within the client's request deadline, so this wait is bounded.
  pending->mu.Await(absl::Condition(
      +[](Pending* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return p->running == 0; },
      pending.get()));
  if (!pending->status.ok()) return pending->status;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].direct) continue;
    for (size_t m : requests[i].members) {
      RandomAccessFile::Range& r = ranges[m];
      std::memcpy(r.dst, staging[i].get() + (r.offset - requests[i].range.offset), r.got);
    }
  }
  return absl::OkStatus();
}

}  // namespace croupier::s3
