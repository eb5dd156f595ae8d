#include "src/metrics/prometheus.h"

#include <functional>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "src/job/job_settings.h"

namespace croupier::metrics {
namespace {

std::string Escape(const std::string& value) {
  return absl::StrReplaceAll(value, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string Number(double v) { return absl::StrFormat("%.17g", v); }

// One metric family: its HELP and TYPE lines, then one sample per labelled value.
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Add(const std::vector<std::pair<const char*, std::string>>& labels, double value) {
    std::string text;
    for (const auto& [key, v] : labels) {
      absl::StrAppend(&text, text.empty() ? "" : ",", key, "=\"", Escape(v), "\"");
    }
    absl::StrAppend(out_, name_, text.empty() ? "" : absl::StrCat("{", text, "}"), " ",
                    Number(value), "\n");
  }

 private:
  std::string* out_;
  const char* name_;
};

using Producer = v1::ProducerStatus;

// The producer families, from the dispatcher's view of every producer or from one producer's
// own; the heartbeat's age and the CPU cores only from the dispatcher's.
void AppendProducerFamilies(std::string& out, const std::vector<const Producer*>& producers,
                            bool from_dispatcher) {
  std::vector<std::tuple<const char*, const char*, const char*,
                         std::function<double(const Producer&)>>>
      producer_metrics = {
          {"croupier_producer_buffered_bytes", "gauge",
           "Bytes of finished batches a producer holds, waiting for consumers.",
           [](const Producer& p) { return static_cast<double>(p.stats().buffered_bytes()); }},
          {"croupier_producer_buffer_capacity_bytes", "gauge", "A producer's buffer bound.",
           [](const Producer& p) {
             return static_cast<double>(p.stats().buffer_capacity_bytes());
           }},
          {"croupier_producer_batches_made_total", "counter",
           "Batches a producer has made since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().batches_made()); }},
          {"croupier_producer_batches_served_total", "counter",
           "Batches a producer has served since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().batches_served()); }},
          {"croupier_producer_served_bytes_total", "counter",
           "Bytes a producer has served since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().bytes_served()); }},
          {"croupier_producer_cpu_seconds_total", "counter",
           "CPU time (user and system) the producer process has used since it started.",
           [](const Producer& p) { return p.stats().cpu_seconds(); }},
          {"croupier_producer_make_seconds_total", "counter",
           "Time a producer spent making batches since it started, over all its threads: its "
           "rate over the threads is the share of its capacity in use.",
           [](const Producer& p) { return p.stats().make_seconds(); }},
          {"croupier_producer_records_skipped_total", "counter",
           "Records a producer left out of their batches because their read or transform failed "
           "(a map job with skip_failing_records), since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().records_skipped()); }},
          {"croupier_producer_batches_evicted_total", "counter",
           "Made batches a producer dropped unserved because their rank fell behind or went past "
           "them; a rank that asks for one later has it made again.",
           [](const Producer& p) { return static_cast<double>(p.stats().batches_evicted()); }},
          {"croupier_producer_threads", "gauge",
           "A producer's worker threads (0 for the source of a Python job).",
           [](const Producer& p) { return static_cast<double>(p.stats().threads()); }},
          {"croupier_producer_tasks", "gauge", "Tasks a producer holds.",
           [](const Producer& p) { return static_cast<double>(p.tasks_size()); }},
      };
  if (from_dispatcher) {
    producer_metrics.push_back({"croupier_producer_heartbeat_age_seconds", "gauge",
                                "Seconds since a producer's last heartbeat.",
                                [](const Producer& p) { return p.seconds_since_heartbeat(); }});
  }
  for (const auto& [name, type, help, get] : producer_metrics) {
    Family f(&out, name, type, help);
    for (const Producer* p : producers) {
      f.Add({{"producer", absl::StrCat(p->producer_id())}, {"address", p->data_address()}},
            get(*p));
    }
  }
}

}  // namespace

std::string FormatProducerPrometheus(const v1::ProducerStatus& producer) {
  std::string out;
  AppendProducerFamilies(out, {&producer}, /*from_dispatcher=*/false);
  return out;
}

std::string FormatS3Prometheus(const s3::S3Stats& stats,
                               const std::optional<RecordFetcher::Stats>& batch_reads) {
  std::string out;
  Family(&out, "croupier_s3_requests_total", "counter",
         "Requests sent to the object store, retries included.")
      .Add({}, stats.requests);
  Family(&out, "croupier_s3_bytes_total", "counter",
         "Object bytes received by ranged GETs that succeeded.")
      .Add({}, stats.bytes);
  Family(&out, "croupier_s3_retries_total", "counter",
         "Object-store requests that failed and were tried again.")
      .Add({}, stats.retries);
  Family(&out, "croupier_s3_throttles_total", "counter",
         "Of the retries, the store's requests to slow down (503 SlowDown, 429).")
      .Add({}, stats.throttles);
  Family(&out, "croupier_s3_failures_total", "counter",
         "Object-store requests that failed for good.")
      .Add({}, stats.failures);
  Family(&out, "croupier_s3_ranges_total", "counter",
         "Byte ranges (records, mostly) asked for in batched reads; fewer requests than ranges "
         "is the merging of neighbours.")
      .Add({}, stats.ranges);
  Family(&out, "croupier_s3_shared_reads_total", "counter",
         "Ranges read from the copy that a process of this producer fetched before (a map "
         "job's worker processes share what they fetch): requests not sent to the store.")
      .Add({}, stats.shared);
  Family(&out, "croupier_s3_shared_read_bytes_total", "counter",
         "The bytes of those ranges: object bytes not fetched again.")
      .Add({}, stats.shared_bytes);
  if (!batch_reads.has_value()) return out;
  const RecordFetcher::Stats& reads = *batch_reads;
  Family(&out, "croupier_s3_batches_read_ahead_total", "counter",
         "Batches whose records were fetched ahead of their making and used.")
      .Add({}, reads.ahead_used);
  Family(&out, "croupier_s3_batches_ready_total", "counter",
         "Of the batches read ahead, those whose records were all there when their making began.")
      .Add({}, reads.ahead_ready);
  Family(&out, "croupier_s3_batches_fetched_by_maker_total", "counter",
         "Of the batches read ahead, those whose fetch had not started when their making began: "
         "the maker ran it at once instead of waiting behind the other reads ahead.")
      .Add({}, reads.ahead_by_maker);
  Family(&out, "croupier_s3_batches_fetched_now_total", "counter",
         "Batches whose records were fetched when they were made (not read ahead, or past the "
         "budget).")
      .Add({}, reads.fetched_now);
  Family(&out, "croupier_s3_batches_forgotten_total", "counter",
         "Batches read ahead and then dropped unmade (their task was taken away).")
      .Add({}, reads.forgotten);
  Family(&out, "croupier_s3_wait_seconds_total", "counter",
         "Time batch makers waited for the object store; over "
         "croupier_producer_make_seconds_total, the store's share of making batches.")
      .Add({}, reads.wait_seconds);
  return out;
}

std::string FormatRecordCachePrometheus(const RecordCacheFigures& cache) {
  std::string out;
  Family(&out, "croupier_producer_cache_hits_total", "counter",
         "Records the producer's record cache served (not read from the files again).")
      .Add({}, cache.hits);
  Family(&out, "croupier_producer_cache_misses_total", "counter",
         "Records looked up in the record cache and not there (read from the files).")
      .Add({}, cache.misses);
  Family(&out, "croupier_producer_cache_records", "gauge", "Records the record cache holds.")
      .Add({}, cache.records);
  Family(&out, "croupier_producer_cache_bytes", "gauge",
         "Bytes counted against the record cache's capacity.")
      .Add({}, cache.bytes);
  Family(&out, "croupier_producer_cache_capacity_bytes", "gauge",
         "The record cache's capacity (--cache-bytes).")
      .Add({}, cache.capacity_bytes);
  Family(&out, "croupier_producer_cache_rejected_total", "counter",
         "Records refused because the record cache was full (it admits while they fit).")
      .Add({}, cache.rejected);
  Family(&out, "croupier_producer_cache_read_errors_total", "counter",
         "Records of an on-disk record cache that could not be read back or failed their "
         "checksum (read from the files instead).")
      .Add({}, cache.read_errors);
  Family(&out, "croupier_producer_cache_loaded_records", "gauge",
         "Records a kept on-disk record cache (--cache-keep) held when this producer started.")
      .Add({}, cache.loaded);
  Family(&out, "croupier_producer_cache_evicted_total", "counter",
         "Records of a kept on-disk record cache, read back at start, of files no job of this "
         "producer opened, dropped when it was full to make room for its jobs' records.")
      .Add({}, cache.evicted);
  return out;
}

std::string FormatPrometheus(const v1::StatusResponse& status) {
  std::string out;
  Family(&out, "croupier_jobs", "gauge", "Jobs the dispatcher holds.")
      .Add({}, status.job_summaries_size());
  {
    Family state(&out, "croupier_job_state", "gauge",
                 "1 for a job's state (idle, running or done): one series per job.");
    for (const v1::JobSummary& j : status.job_summaries()) {
      state.Add({{"job", j.name()}, {"state", std::string(JobStateName(j.state()))}}, 1);
    }
  }
  {
    Family steps(&out, "croupier_job_steps_per_epoch", "gauge",
                 "Steps every consumer of a dealt job takes in a whole epoch.");
    for (const v1::JobSummary& j : status.job_summaries()) {
      steps.Add({{"job", j.name()}}, j.steps_per_epoch());
    }
  }
  {
    Family padding(&out, "croupier_job_padding_fraction", "gauge",
                   "A tokens job's share of padding tokens under its first weights.");
    for (const v1::JobSummary& j : status.job_summaries()) {
      if (j.source() == v1::SOURCE_KIND_TOKENS) {
        padding.Add({{"job", j.name()}}, j.padding_fraction());
      }
    }
  }
  {
    Family records(&out, "croupier_job_records", "gauge", "Records in a job's dataset.");
    for (const v1::JobSummary& j : status.job_summaries()) {
      records.Add({{"job", j.name()}}, j.num_records());
    }
  }
  {
    Family batches(&out, "croupier_job_batches_finished_total", "counter",
                   "Batches of a job served or delivered (its finished tasks' batches).");
    for (const v1::JobSummary& j : status.job_summaries()) {
      batches.Add({{"job", j.name()}}, j.batches_finished());
    }
  }
  Family(&out, "croupier_journal_writable", "gauge",
         "1 while the dispatcher can write its journal, 0 while every change fails.")
      .Add({}, status.journal_error().empty() ? 1 : 0);
  Family(&out, "croupier_journal_syncs_total", "counter",
         "fdatasyncs of the dispatcher's journal since it started (shared among calls).")
      .Add({}, status.journal_syncs());
  Family(&out, "croupier_journal_bytes", "gauge",
         "The size of the dispatcher's journal (it shrinks at each compaction).")
      .Add({}, status.journal_bytes());
  {
    Family epoch(&out, "croupier_rank_epoch", "gauge",
                 "The epoch of a rank's last acknowledged position (the next step it takes).");
    Family step(&out, "croupier_rank_step", "gauge",
                "The step of a rank's last acknowledged position (the next step it takes).");
    for (const v1::RankPosition& r : status.rank_positions()) {
      epoch.Add({{"job", r.job()}, {"rank", absl::StrCat(r.rank())}}, r.epoch());
      step.Add({{"job", r.job()}, {"rank", absl::StrCat(r.rank())}}, r.step());
    }
  }
  using Consumer = v1::ConsumerStatus;
  const std::vector<std::tuple<const char*, const char*, const char*,
                               std::function<double(const Consumer&)>>>
      consumer_metrics = {
          {"croupier_consumer_batches_received_total", "counter",
           "Batches a connected consumer has received since it connected.",
           [](const Consumer& c) { return static_cast<double>(c.batches_received()); }},
          {"croupier_consumer_received_bytes_total", "counter",
           "Bytes of batches a connected consumer has received since it connected.",
           [](const Consumer& c) { return static_cast<double>(c.bytes_received()); }},
          {"croupier_consumer_wait_seconds_total", "counter",
           "Time a connected consumer spent waiting for data: its rate over wall time is the "
           "input-bound share.",
           [](const Consumer& c) { return c.wait_seconds(); }},
          {"croupier_consumer_heartbeat_age_seconds", "gauge",
           "Seconds since a connected consumer's last heartbeat.",
           [](const Consumer& c) { return c.seconds_since_heartbeat(); }},
          {"croupier_consumer_input_bound_ratio", "gauge",
           "The share of wall time a connected consumer spent waiting for data, over its last "
           "heartbeats (smoothed over about 5 s).",
           [](const Consumer& c) { return c.input_bound(); }},
      };
  for (const auto& [name, type, help, get] : consumer_metrics) {
    Family f(&out, name, type, help);
    for (const Consumer& c : status.consumers()) {
      f.Add({{"job", c.job()}, {"rank", absl::StrCat(c.rank())}}, get(c));
    }
  }
  std::vector<const Producer*> producers;
  for (const Producer& p : status.producers()) producers.push_back(&p);
  AppendProducerFamilies(out, producers, /*from_dispatcher=*/true);
  const v1::ProducerAdvice& advice = status.producer_advice();
  Family(&out, "croupier_producers_recommended", "gauge",
         "The recommended number of producers for the TFRecord jobs' consumers (0 while "
         "measuring).")
      .Add({}, advice.recommended());
  Family(&out, "croupier_producers_target", "gauge",
         "The consumers' demand over one producer's capacity, smoothed: the fractional number "
         "of producers the recommendation rounds.")
      .Add({}, advice.target());
  Family(&out, "croupier_demand_batches_per_second", "gauge",
         "Batches per second the TFRecord jobs' consumers would take if never kept waiting.")
      .Add({}, advice.demand_batches_per_second());
  Family(&out, "croupier_producer_capacity_batches_per_second", "gauge",
         "Batches per second one producer makes when running flat out, on average.")
      .Add({}, advice.capacity_batches_per_second());
  // Each job's own figure (JobSummary.producer_advice); a stream job, which has none, has no
  // series.
  Family job_recommended(&out, "croupier_job_producers_recommended", "gauge",
                         "The recommended number of producers for one job's consumers: its own "
                         "producers for a map job, the shared ones for a TFRecord job (0 while "
                         "measuring).");
  for (const v1::JobSummary& j : status.job_summaries()) {
    if (j.producer_advice().fixed()) continue;
    job_recommended.Add({{"job", j.name()}}, j.producer_advice().recommended());
  }
  Family job_target(&out, "croupier_job_producers_target", "gauge",
                    "One job's consumers' demand over one of its producers' capacity, smoothed.");
  for (const v1::JobSummary& j : status.job_summaries()) {
    if (j.producer_advice().fixed()) continue;
    job_target.Add({{"job", j.name()}}, j.producer_advice().target());
  }
  return out;
}

}  // namespace croupier::metrics
