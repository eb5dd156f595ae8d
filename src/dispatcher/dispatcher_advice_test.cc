// The dispatcher's side of the recommended number of producers: the rates it measures from
// heartbeats (consumers' batches/s and input-bound share, producers' batches/s and CPU cores),
// which producers and consumers count in the cluster's figure and in each job's, and the advice
// in GetStatus (the cluster's, and each job's in its summary).
#include <string>

#include "gtest/gtest.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

class DispatcherAdviceTest : public testing::DispatcherTest {
 protected:
  void SetUp() override {
    clock_ = std::make_unique<FakeClock>();
    DispatcherOptions options;
    options.advice = {.smoothing = absl::Seconds(5), .hold = absl::Seconds(5)};
    options.consumer_timeout = absl::Hours(1);
    options.producer_timeout = absl::Hours(1);
    Recreate(options);
    WriteData({400});
    ASSERT_TRUE(Create(Spec("train", 2, 2)).ok());
  }

  void ProducerBeat(uint64_t id, uint64_t made, double cpu_seconds, double make_seconds,
                    const std::string& address = "h:1", bool draining = false,
                    const std::string& source_job = "") {
    v1::ProducerHeartbeatRequest request;
    request.set_producer_id(id);
    if (id == 0) request.set_data_address(address);  // registers
    if (id == 0) request.set_source_job(source_job);
    request.set_draining(draining);
    request.mutable_stats()->set_batches_made(made);
    request.mutable_stats()->set_cpu_seconds(cpu_seconds);
    request.mutable_stats()->set_threads(4);
    request.mutable_stats()->set_make_seconds(make_seconds);
    request.mutable_stats()->set_buffer_capacity_bytes(1 << 20);
    ASSERT_TRUE(impl_->ProducerHeartbeat(request).ok());
  }

  void ConsumerBeat(uint64_t id, uint32_t rank, uint64_t batches, double waited,
                    const std::string& job = "train", uint32_t world = 2) {
    v1::ConsumerHeartbeatRequest request;
    request.set_consumer_id(id);
    request.set_job(job);
    request.set_rank(rank);
    request.set_world(world);
    request.set_batches_received(batches);
    request.set_wait_seconds(waited);
    if (id != 0) request.set_lease(Lease(id));
    auto r = impl_->ConsumerHeartbeat(request);
    ASSERT_TRUE(r.ok()) << r.status();
    if (id == 0) leases_[r->consumer_id()] = r->lease();
  }

  static v1::JobSpec MapSpec(const std::string& name) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.set_source(v1::SOURCE_KIND_MAP);
    spec.set_features("x:int64");
    spec.set_batch_size(4);
    spec.set_num_consumers(1);
    spec.set_num_records(1000);
    return spec;
  }

  // Job `name`'s advice, as GetStatus shows it.
  v1::ProducerAdvice JobAdvice(const std::string& name) {
    const v1::StatusResponse status = *impl_->GetStatus({});
    for (const v1::JobSummary& job : status.job_summaries()) {
      if (job.name() == name) return job.producer_advice();
    }
    ADD_FAILURE() << "no job " << name;
    return {};
  }

  // Twelve seconds of a TFRecord job "train" and map jobs "a" and "b", each with its own
  // consumers and producers, at different loads:
  //  - train: its 2 consumers get 5 batches/s each and wait half the time (20 wanted), the one
  //    generic producer makes 10 busy 3/4 of its time (13.3 possible): 1.5 producers, so 2;
  //  - a: its consumer gets 10 and waits 60% of the time (25 wanted), its producer makes 10
  //    busy 3/4 of its time (13.3 possible): 1.9 producers, so 2;
  //  - b: its consumer gets 10 and never waits, its producer makes 10 busy 3/4: 1 is enough.
  void RunThreeJobs() {
    ASSERT_TRUE(Create(MapSpec("a")).ok());
    ASSERT_TRUE(Create(MapSpec("b")).ok());
    ProducerBeat(0, 0, 0, 0);                                    // producer 1: generic
    ProducerBeat(0, 0, 0, 0, "h:2", false, /*source_job=*/"a");  // producer 2
    ProducerBeat(0, 0, 0, 0, "h:3", false, /*source_job=*/"b");  // producer 3
    ConsumerBeat(0, 0, 0, 0);                                    // consumer 1
    ConsumerBeat(0, 1, 0, 0);                                    // consumer 2
    ConsumerBeat(0, 0, 0, 0, "a", 1);                            // consumer 3
    ConsumerBeat(0, 0, 0, 0, "b", 1);                            // consumer 4
    for (int s = 1; s <= 12; ++s) {
      clock_->Advance(absl::Seconds(1));
      for (uint64_t producer : {1, 2, 3}) ProducerBeat(producer, 10 * s, 0.5 * s, 3.0 * s);
      ConsumerBeat(1, 0, 5 * s, 0.5 * s);
      ConsumerBeat(2, 1, 5 * s, 0.5 * s);
      ConsumerBeat(3, 0, 10 * s, 0.6 * s, "a", 1);
      ConsumerBeat(4, 0, 10 * s, 0, "b", 1);
      impl_->Tick();
    }
  }
};

TEST_F(DispatcherAdviceTest, MeasuresRatesFromHeartbeatsAndRecommends) {
  ProducerBeat(0, 0, 0, 0);  // producer 1
  ConsumerBeat(0, 0, 0, 0);  // consumer 1
  ConsumerBeat(0, 1, 0, 0);  // consumer 2
  // Each second: the producer makes 10 batches on 0.5 cores, its 4 workers busy 3 s of their 4;
  // each consumer gets 5 and waits half the time, so each would take 10: 20 in all. A producer
  // could make 10 / 0.75 = 13.3: 1.5 producers' worth, so 2.
  for (int s = 1; s <= 12; ++s) {
    clock_->Advance(absl::Seconds(1));
    ProducerBeat(1, 10 * s, 0.5 * s, 3.0 * s);
    ConsumerBeat(1, 0, 5 * s, 0.5 * s);
    ConsumerBeat(2, 1, 5 * s, 0.5 * s);
    impl_->Tick();
  }
  v1::StatusResponse status = *impl_->GetStatus({});
  ASSERT_EQ(status.consumers_size(), 2);
  EXPECT_NEAR(status.consumers(0).batches_per_second(), 5, 1e-9);
  EXPECT_NEAR(status.consumers(0).input_bound(), 0.5, 1e-9);
  ASSERT_EQ(status.producers_size(), 1);
  EXPECT_NEAR(status.producers(0).batches_per_second(), 10, 1e-9);
  EXPECT_NEAR(status.producers(0).cpu_cores(), 0.5, 1e-9);
  EXPECT_NEAR(status.producers(0).busy_share(), 0.75, 1e-9);
  EXPECT_EQ(status.producers(0).stats().threads(), 4u);
  const v1::ProducerAdvice& advice = status.producer_advice();
  EXPECT_NEAR(advice.demand_batches_per_second(), 20, 1e-9);
  EXPECT_NEAR(advice.capacity_batches_per_second(), 10 / 0.75, 1e-9);
  EXPECT_NEAR(advice.target(), 1.5, 1e-9);
  EXPECT_EQ(advice.recommended(), 2u) << advice.reason();
  EXPECT_EQ(advice.producers(), 1u);
}

TEST_F(DispatcherAdviceTest, ADrainingProducerDoesNotCount) {
  ProducerBeat(0, 0, 0, 0);          // producer 1
  ProducerBeat(0, 0, 0, 0, "h:2");  // producer 2
  for (int s = 1; s <= 12; ++s) {
    clock_->Advance(absl::Seconds(1));
    ProducerBeat(1, 10 * s, 0.1 * s, 0.1 * s);
    ProducerBeat(2, 10 * s, 0.1 * s, 0.1 * s, "h:2", /*draining=*/s > 6);
    impl_->Tick();
  }
  EXPECT_EQ(impl_->GetStatus({})->producer_advice().producers(), 1u);
}

TEST_F(DispatcherAdviceTest, APythonJobsSourcesAndConsumersDoNotCount) {
  ASSERT_TRUE(Create([] {
                v1::JobSpec spec;
                spec.set_name("py");
                spec.set_source(v1::SOURCE_KIND_PYTHON);
                spec.set_features("x:int64");
                spec.set_batch_size(1);
                spec.set_num_consumers(1);
                spec.set_source_batches_per_epoch(10);
                return spec;
              }())
                  .ok());
  v1::ProducerHeartbeatRequest source;
  source.set_data_address("py:1");
  source.set_source_job("py");
  ASSERT_TRUE(impl_->ProducerHeartbeat(source).ok());
  v1::ConsumerHeartbeatRequest reader;
  reader.set_job("py");
  reader.set_world(1);
  ASSERT_TRUE(impl_->ConsumerHeartbeat(reader).ok());
  impl_->Tick();
  const v1::ProducerAdvice advice = impl_->GetStatus({})->producer_advice();
  EXPECT_EQ(advice.producers(), 0u);
  EXPECT_EQ(advice.recommended(), 0u);
  EXPECT_NE(advice.reason().find("no consumer of a TFRecord job"), std::string::npos)
      << advice.reason();
  EXPECT_EQ(impl_->GetStatus({})->producers(0).source_job(), "py");
  // The stream job has no target: its producers cannot change.
  const v1::ProducerAdvice job = JobAdvice("py");
  EXPECT_TRUE(job.fixed());
  EXPECT_EQ(job.recommended(), 0u);
  EXPECT_EQ(job.producers(), 1u);
  EXPECT_NE(job.reason().find("has no producer target"), std::string::npos) << job.reason();
  EXPECT_FALSE(JobAdvice("train").fixed());
}

TEST_F(DispatcherAdviceTest, AMapJobsProducersCountOnlyInItsOwnJobsFigure) {
  RunThreeJobs();
  // The cluster's figure and the TFRecord job's count the generic producer only, and the
  // TFRecord job's consumers only.
  const v1::ProducerAdvice cluster = impl_->GetStatus({})->producer_advice();
  const v1::ProducerAdvice train = JobAdvice("train");
  for (const v1::ProducerAdvice& advice : {cluster, train}) {
    EXPECT_EQ(advice.producers(), 1u);
    EXPECT_NEAR(advice.demand_batches_per_second(), 20, 1e-9);
    EXPECT_NEAR(advice.capacity_batches_per_second(), 10 / 0.75, 1e-9);
    EXPECT_EQ(advice.recommended(), 2u) << advice.reason();
    EXPECT_FALSE(advice.fixed());
  }
  // Each map job counts its own producer and consumer.
  const v1::ProducerAdvice a = JobAdvice("a");
  EXPECT_EQ(a.producers(), 1u);
  EXPECT_NEAR(a.demand_batches_per_second(), 25, 1e-9);
  EXPECT_NEAR(a.capacity_batches_per_second(), 10 / 0.75, 1e-9);
  EXPECT_NEAR(a.target(), 1.875, 1e-9);
}

TEST_F(DispatcherAdviceTest, TwoJobsWithDifferentLoadsGetDifferentTargets) {
  RunThreeJobs();
  const v1::ProducerAdvice a = JobAdvice("a"), b = JobAdvice("b");
  EXPECT_EQ(a.recommended(), 2u) << a.reason();
  EXPECT_EQ(b.recommended(), 1u) << b.reason();
  EXPECT_NEAR(b.demand_batches_per_second(), 10, 1e-9);
  EXPECT_NEAR(b.target(), 0.75, 1e-9);
}

TEST_F(DispatcherAdviceTest, ADeletedJobDropsItsAdvisor) {
  RunThreeJobs();
  v1::DeleteJobRequest request;
  request.set_name("a");
  request.set_force(true);
  ASSERT_TRUE(impl_->DeleteJob(request).ok());
  // A job of the same name is another job: measured afresh, nothing of the old figure kept.
  ASSERT_TRUE(Create(MapSpec("a")).ok());
  v1::ProducerAdvice a = JobAdvice("a");
  EXPECT_EQ(a.recommended(), 0u);
  EXPECT_NE(a.reason().find("not measured yet"), std::string::npos) << a.reason();
  clock_->Advance(absl::Seconds(1));
  impl_->Tick();
  a = JobAdvice("a");
  EXPECT_EQ(a.recommended(), 0u);
  EXPECT_EQ(a.producers(), 0u);  // its producer went with the old job
  EXPECT_NE(a.reason().find("no consumer of job 'a'"), std::string::npos) << a.reason();
  // The other jobs keep theirs.
  EXPECT_EQ(JobAdvice("b").recommended(), 1u);
}

}  // namespace
}  // namespace croupier
