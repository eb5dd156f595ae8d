// The dispatcher's side of the recommended number of producers: the rates it measures from
// heartbeats (consumers' batches/s and input-bound share, producers' batches/s and CPU cores),
// which producers and consumers count, and the advice in GetStatus.
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
                    const std::string& address = "h:1", bool draining = false) {
    v1::ProducerHeartbeatRequest request;
    request.set_producer_id(id);
    if (id == 0) request.set_data_address(address);  // registers
    request.set_draining(draining);
    request.mutable_stats()->set_batches_made(made);
    request.mutable_stats()->set_cpu_seconds(cpu_seconds);
    request.mutable_stats()->set_threads(4);
    request.mutable_stats()->set_make_seconds(make_seconds);
    request.mutable_stats()->set_buffer_capacity_bytes(1 << 20);
    ASSERT_TRUE(impl_->ProducerHeartbeat(request).ok());
  }

  void ConsumerBeat(uint64_t id, uint32_t rank, uint64_t batches, double waited) {
    v1::ConsumerHeartbeatRequest request;
    request.set_consumer_id(id);
    request.set_job("train");
    request.set_rank(rank);
    request.set_world(2);
    request.set_batches_received(batches);
    request.set_wait_seconds(waited);
    if (id != 0) request.set_lease(Lease(id));
    auto r = impl_->ConsumerHeartbeat(request);
    ASSERT_TRUE(r.ok()) << r.status();
    if (id == 0) leases_[r->consumer_id()] = r->lease();
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
}

}  // namespace
}  // namespace croupier
