// The dispatcher's figures in Prometheus' text exposition format (version 0.0.4): what
// `croupier status` shows, for scraping. A pure function of a StatusResponse, so that it is
// tested without a server; src/node/metrics_server.h serves it over HTTP.
#ifndef CROUPIER_SRC_METRICS_PROMETHEUS_H_
#define CROUPIER_SRC_METRICS_PROMETHEUS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "proto/croupier.pb.h"
#include "src/io/record_fetch.h"
#include "src/s3/s3_stats.h"

namespace croupier::metrics {

// The metrics, each with # HELP and # TYPE lines, names croupier_..., counters ending in
// _total, units in the name (_bytes, _seconds). Label values are escaped as the format requires.
// docs/metrics.md lists them.
std::string FormatPrometheus(const v1::StatusResponse& status);

// A producer's own metrics (`croupier producer --metrics-port`): the croupier_producer_* families
// with the same names and labels as the dispatcher's, from its own figures (its id, data
// address, stats and held tasks), without the heartbeat's age.
std::string FormatProducerPrometheus(const v1::ProducerStatus& producer);

// What this process asked of an object store (croupier_s3_* counters: requests, bytes, retries,
// throttles, failures), from its S3 clients' counters (s3::ProcessS3Counters, which count those
// of its forked children too: a map job's workers), and, in a process that
// makes batches (a producer), how its batch makers' reads ahead went (`batch_reads`,
// RecordFetcher::ProcessStats: batches read ahead, ready when made, fetched by the maker or when
// made, forgotten, and the time makers waited for the store; without it, none of those families);
// all 0 in a process that read no s3:// path.
std::string FormatS3Prometheus(const s3::S3Stats& stats,
                               const std::optional<RecordFetcher::Stats>& batch_reads = {});

// A producer's record cache (`--cache-bytes`, src/producer/record_cache.h): hits, misses, what it
// holds against its capacity, the records refused once it was full and, on disk, those that could
// not be read back and those a kept cache held when the producer started.
struct RecordCacheFigures {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t rejected = 0;
  uint64_t read_errors = 0;
  uint64_t loaded = 0;  // kept on disk (--cache-keep): the records read back at start
  uint64_t evicted = 0;  // of those, dropped to make room for the records of this producer's jobs
};
std::string FormatRecordCachePrometheus(const RecordCacheFigures& cache);

}  // namespace croupier::metrics

#endif  // CROUPIER_SRC_METRICS_PROMETHEUS_H_
