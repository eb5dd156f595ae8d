#include "src/metrics/prometheus.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsPrometheusTest, EveryFigureOfTheStatusIsAMetricWithItsLabels) {
  v1::StatusResponse status;
  v1::JobSummary* job = status.add_job_summaries();
  job->set_name("train");
  job->set_state(v1::JOB_STATE_DONE);
  job->set_steps_per_epoch(78);
  job->set_num_records(20000);
  job->set_batches_finished(156);
  v1::ConsumerStatus* c = status.add_consumers();
  c->set_job("train");
  c->set_rank(3);
  c->set_batches_received(12);
  c->set_bytes_received(4096);
  c->set_wait_seconds(1.5);
  v1::ProducerStatus* p = status.add_producers();
  p->set_producer_id(2);
  p->set_data_address("10.0.0.7:4000");
  p->mutable_stats()->set_buffered_bytes(1 << 20);
  p->mutable_stats()->set_batches_served(40);
  v1::RankPosition* r = status.add_rank_positions();
  r->set_job("train");
  r->set_rank(3);
  r->set_epoch(1);
  r->set_step(5);

  status.set_journal_syncs(42);
  status.set_journal_bytes(4096);
  const std::string text = FormatPrometheus(status);
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_jobs gauge\ncroupier_jobs 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_journal_syncs_total counter\n"
                              "croupier_journal_syncs_total 42\n"));
  EXPECT_THAT(text, HasSubstr("croupier_journal_bytes 4096\n"));
  EXPECT_THAT(text, HasSubstr("croupier_job_steps_per_epoch{job=\"train\"} 78\n"));
  EXPECT_THAT(text, HasSubstr("croupier_job_state{job=\"train\",state=\"done\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("croupier_job_batches_finished_total{job=\"train\"} 156\n"));
  EXPECT_THAT(text, HasSubstr("croupier_journal_writable 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_consumer_batches_received_total counter\n"));
  EXPECT_THAT(text,
              HasSubstr("croupier_consumer_batches_received_total{job=\"train\",rank=\"3\"} 12\n"));
  EXPECT_THAT(text, HasSubstr("croupier_consumer_wait_seconds_total{job=\"train\",rank=\"3\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_buffered_bytes{producer=\"2\",address=\"10.0.0.7:"
                              "4000\"} 1048576\n"));
  EXPECT_THAT(text, HasSubstr("croupier_rank_step{job=\"train\",rank=\"3\"} 5\n"));
  // Every sample line belongs to a family declared before it.
  EXPECT_THAT(text, ::testing::Not(HasSubstr("\n\n")));
}

TEST(MetricsPrometheusTest, TheAdviceAndCpuAreMetrics) {
  v1::StatusResponse status;
  status.mutable_producer_advice()->set_recommended(3);
  status.mutable_producer_advice()->set_target(2.75);
  v1::ProducerStatus* p = status.add_producers();
  p->set_producer_id(4);
  p->set_data_address("h:1");
  p->mutable_stats()->set_cpu_seconds(12.5);
  p->mutable_stats()->set_threads(8);
  p->mutable_stats()->set_make_seconds(40.25);
  p->mutable_stats()->set_records_skipped(7);
  v1::ConsumerStatus* c = status.add_consumers();
  c->set_job("train");
  c->set_rank(0);
  c->set_input_bound(0.25);
  v1::JobSummary* map = status.add_job_summaries();
  map->set_name("m");
  map->mutable_producer_advice()->set_recommended(4);
  map->mutable_producer_advice()->set_target(3.5);
  v1::JobSummary* stream = status.add_job_summaries();
  stream->set_name("s");
  stream->mutable_producer_advice()->set_fixed(true);
  const std::string text = FormatPrometheus(status);
  // Each job's own figure, but none for a stream job, which has no target.
  EXPECT_THAT(text, HasSubstr("croupier_job_producers_recommended{job=\"m\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("croupier_job_producers_target{job=\"m\"} 3.5\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("croupier_job_producers_recommended{job=\"s\"}")));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_producers_recommended gauge\n"
                              "croupier_producers_recommended 3\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producers_target 2.75\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_producer_cpu_seconds_total counter\n"
                              "croupier_producer_cpu_seconds_total{producer=\"4\",address=\"h:1\"} "
                              "12.5\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_threads{producer=\"4\",address=\"h:1\"} 8\n"));
  EXPECT_THAT(text,
              HasSubstr("croupier_producer_records_skipped_total{producer=\"4\",address=\"h:1\"} 7"));
  EXPECT_THAT(text,
              HasSubstr("croupier_producer_make_seconds_total{producer=\"4\",address=\"h:1\"} "
                        "40.25\n"));
  EXPECT_THAT(text,
              HasSubstr("croupier_consumer_input_bound_ratio{job=\"train\",rank=\"0\"} 0.25\n"));
}

TEST(MetricsPrometheusTest, AProducersOwnMetricsHaveTheDispatchersNamesAndLabels) {
  v1::ProducerStatus p;
  p.set_producer_id(7);
  p.set_data_address("10.0.0.8:4100");
  p.mutable_stats()->set_batches_made(99);
  p.add_tasks(1);
  p.add_tasks(2);
  const std::string text = FormatProducerPrometheus(p);
  EXPECT_THAT(text, HasSubstr("croupier_producer_batches_made_total{producer=\"7\",address=\""
                              "10.0.0.8:4100\"} 99\n"));
  EXPECT_THAT(text,
              HasSubstr("croupier_producer_tasks{producer=\"7\",address=\"10.0.0.8:4100\"} 2\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("heartbeat_age")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("croupier_jobs")));
}

TEST(MetricsPrometheusTest, ObjectStoreCountersAreMetrics) {
  s3::S3Stats stats;
  stats.requests = 12;
  stats.bytes = 4096;
  stats.retries = 3;
  stats.throttles = 2;
  stats.failures = 1;
  stats.ranges = 40;
  stats.shared = 6;
  stats.shared_bytes = 6000;
  RecordFetcher::Stats reads;
  reads.ahead_used = 30;
  reads.ahead_ready = 25;
  reads.fetched_now = 2;
  reads.ahead_by_maker = 3;
  reads.forgotten = 7;
  reads.wait_seconds = 1.5;
  const std::string text = FormatS3Prometheus(stats, reads);
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_s3_requests_total counter\n"
                              "croupier_s3_requests_total 12\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_bytes_total 4096\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_retries_total 3\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_throttles_total 2\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_failures_total 1\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_ranges_total 40\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_shared_reads_total 6\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_shared_read_bytes_total 6000\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_batches_read_ahead_total 30\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_batches_ready_total 25\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_batches_fetched_now_total 2\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_batches_fetched_by_maker_total 3\n"));
  EXPECT_THAT(text, HasSubstr("croupier_s3_batches_forgotten_total 7\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_s3_wait_seconds_total counter\n"
                              "croupier_s3_wait_seconds_total 1.5\n"));
}

TEST(MetricsPrometheusTest, AProcessThatMakesNoBatchShowsItsRequestsOnly) {
  s3::S3Stats stats;
  stats.requests = 5;
  const std::string text = FormatS3Prometheus(stats);
  EXPECT_THAT(text, HasSubstr("croupier_s3_requests_total 5\n"));
  EXPECT_THAT(text, Not(HasSubstr("croupier_s3_batches")));
  EXPECT_THAT(text, Not(HasSubstr("croupier_s3_wait_seconds_total")));
}

TEST(MetricsPrometheusTest, RecordCacheFiguresAreMetrics) {
  const std::string text = FormatRecordCachePrometheus(
      {.hits = 90, .misses = 10, .records = 10, .bytes = 5000, .capacity_bytes = 8192,
       .rejected = 3, .read_errors = 1, .loaded = 4, .evicted = 2});
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_producer_cache_hits_total counter\n"
                              "croupier_producer_cache_hits_total 90\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_cache_misses_total 10\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_producer_cache_records gauge\n"
                              "croupier_producer_cache_records 10\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_cache_bytes 5000\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_cache_capacity_bytes 8192\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_cache_rejected_total 3\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_cache_read_errors_total 1\n"));
  EXPECT_THAT(text, HasSubstr("croupier_producer_cache_loaded_records 4\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE croupier_producer_cache_evicted_total counter\n"
                              "croupier_producer_cache_evicted_total 2\n"));
}

TEST(MetricsPrometheusTest, LabelValuesAreEscaped) {
  v1::StatusResponse status;
  status.add_job_summaries()->set_name("a\"b\\c");
  EXPECT_THAT(FormatPrometheus(status), HasSubstr("{job=\"a\\\"b\\\\c\"}"));
}

}  // namespace
}  // namespace croupier::metrics
