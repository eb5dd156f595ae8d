#include "src/node/status_history.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

v1::StatusResponse Status(double rate, double fill_bytes) {
  v1::StatusResponse status;
  status.add_job_summaries()->set_name("tr\"ain");
  for (int rank = 0; rank < 2; ++rank) {
    v1::ConsumerStatus* c = status.add_consumers();
    c->set_job("tr\"ain");
    c->set_batches_per_second(rate);
    c->set_input_bound(rank == 0 ? 0.5 : 0.25);
  }
  v1::ProducerStatus* p = status.add_producers();
  p->set_batches_per_second(2 * rate);
  p->mutable_stats()->set_buffered_bytes(fill_bytes);
  p->mutable_stats()->set_buffer_capacity_bytes(1000);
  status.mutable_producer_advice()->set_recommended(3);
  return status;
}

TEST(StatusHistoryTest, SumsRatesPerJobAndAveragesInputBound) {
  StatusHistory history;
  history.Add(absl::FromUnixMillis(1500), Status(4, 250));
  history.Add(absl::FromUnixMillis(1795080000123), Status(4, 250));
  EXPECT_EQ(history.ToJson(),
            "{\"samples\": [\n{\"t\": 1.500, \"jobs\": {\"tr\\\"ain\": {\"batches_per_second\": 8, "
            "\"input_bound\": 0.375, \"consumers\": 2}}, \"producer_batches_per_second\": 8, "
            "\"buffer_fill\": 0.25, \"producers\": 1, \"recommended_producers\": 3},\n{\"t\": "
            "1795080000.123, "
            "\"jobs\": {\"tr\\\"ain\": {\"batches_per_second\": 8, \"input_bound\": 0.375, "
            "\"consumers\": 2}}, \"producer_batches_per_second\": 8, \"buffer_fill\": 0.25, "
            "\"producers\": 1, \"recommended_producers\": 3}]}\n");
}

TEST(StatusHistoryTest, KeepsTheLastSamples) {
  StatusHistory history(3);
  for (int i = 0; i < 5; ++i) history.Add(absl::FromUnixSeconds(i), Status(i, 0));
  const std::string json = history.ToJson();
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"t\": 1.000,")));
  EXPECT_THAT(json, HasSubstr("\"t\": 2.000,"));
  EXPECT_THAT(json, HasSubstr("\"t\": 4.000,"));
}

}  // namespace
}  // namespace croupier
