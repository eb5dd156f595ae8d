// S3Client::GetRanges: a ReadRanges call on an object as few GETs, run at once on the client's
// FetchPool.
#include <atomic>
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

// One GET of a GetRanges call: a part of a merged request, and where its bytes go.
struct Part {
  ByteRange range;
  char* dst;
};

// What the GETs of one GetRanges call share: its parts, which of them a thread has taken, the
// count not yet done and the first error.
struct Pending {
  std::vector<Part> parts;
  std::unique_ptr<std::atomic<bool>[]> taken;
  absl::Mutex mu;
  size_t running ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
};

}  // namespace

absl::Status S3Client::GetRanges(const S3Path& path, uint64_t size,
                                 absl::Span<RandomAccessFile::Range> ranges,
                                 absl::string_view if_match) {
  counters_.AddRanges(ranges.size());
  std::vector<RangeRequest> requests =
      PlanRangeRequests(ranges, size, options_.merge_gap_bytes, options_.max_request_bytes);
  // A request whose members are not laid out end to end is read into a buffer of its own.
  std::vector<std::unique_ptr<char[]>> staging(requests.size());
  auto pending = std::make_shared<Pending>();
  for (size_t i = 0; i < requests.size(); ++i) {
    const RangeRequest& req = requests[i];
    char* base = req.direct ? ranges[req.members.front()].dst : nullptr;
    if (!req.direct) {
      staging[i].reset(new char[req.range.length]);
      base = staging[i].get();
    }
    for (const ByteRange& part : req.parts) {
      pending->parts.push_back({part, base + (part.offset - req.range.offset)});
    }
  }
  const size_t n = pending->parts.size();
  pending->taken.reset(new std::atomic<bool>[n]);
  for (size_t i = 0; i < n; ++i) pending->taken[i].store(false);
  {
    absl::MutexLock lock(&pending->mu);
    pending->running = n;
  }
  // Part i, by whichever thread takes it first; once a part has failed the rest are skipped.
  auto run = [this, path, etag = std::string(if_match)](Pending& p, size_t i) {
    if (p.taken[i].exchange(true)) return;
    bool failed;
    {
      absl::MutexLock lock(&p.mu);
      failed = !p.status.ok();
    }
    absl::StatusOr<size_t> got =
        failed ? absl::StatusOr<size_t>(0)
               : GetRange(path, p.parts[i].range, p.parts[i].dst, etag);
    absl::MutexLock lock(&p.mu);
    if (!got.ok() && p.status.ok()) p.status = got.status();
    --p.running;
  };
  // The pool's threads (at most max_in_flight of the client's GETs at once) and the calling
  // thread share the parts, the pool from the first, the caller from the last: so a read whose
  // batch is waited for now moves on even while the pool is busy with reads ahead for others.
  for (size_t i = 0; i + 1 < n; ++i) {
    pool_->Run([run, pending, i] { run(*pending, i); });
  }
  for (size_t i = n; i-- > 0;) run(*pending, i);
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
