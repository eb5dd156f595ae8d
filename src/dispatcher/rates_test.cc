#include "src/dispatcher/rates.h"

#include "gtest/gtest.h"

namespace croupier {
namespace {

v1::ProducerStats Stats(uint64_t made, double cpu, double making, uint32_t threads) {
  v1::ProducerStats s;
  s.set_batches_made(made);
  s.set_cpu_seconds(cpu);
  s.set_make_seconds(making);
  s.set_threads(threads);
  return s;
}

TEST(ProducerRatesTest, MeasuresBetweenReportsASpanApartAndZeroesACounterThatWentBack) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ProducerRates rates;
  rates.Report(Stats(0, 0, 0, 2), t0);
  EXPECT_FALSE(rates.measured());
  rates.Report(Stats(50, 0.1, 0.2, 2), t0 + absl::Milliseconds(400));  // too soon: ignored
  EXPECT_FALSE(rates.measured());
  rates.Report(Stats(200, 1.5, 1.0, 2), t0 + absl::Seconds(2));
  ASSERT_TRUE(rates.measured());
  EXPECT_DOUBLE_EQ(rates.batches_per_second(), 100);
  EXPECT_DOUBLE_EQ(rates.cpu_cores(), 0.75);
  EXPECT_DOUBLE_EQ(rates.busy_share(), 0.25);  // 1 s of making over 2 threads for 2 s
  rates.Report(Stats(10, 0.1, 0.1, 2), t0 + absl::Seconds(3));  // restarted
  EXPECT_EQ(rates.batches_per_second(), 0);
  EXPECT_EQ(rates.cpu_cores(), 0);
  EXPECT_EQ(rates.busy_share(), 0);
}

TEST(ConsumerRatesTest, TakesTheFirstRatesWholeThenSmoothsThem) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ConsumerRates rates;
  rates.Report(0, 0, t0);
  rates.Report(100, 0.5, t0 + absl::Seconds(1));
  ASSERT_TRUE(rates.measured());
  EXPECT_DOUBLE_EQ(rates.batches_per_second(), 100);
  EXPECT_DOUBLE_EQ(rates.input_bound(), 0.5);
  rates.Report(100, 0.5, t0 + absl::Seconds(2));  // a second with nothing received
  EXPECT_GT(rates.batches_per_second(), 0);
  EXPECT_LT(rates.batches_per_second(), 100);
  const double smoothed = rates.batches_per_second();
  rates.Report(5, 0, t0 + absl::Seconds(3));  // counters went back: the measure starts again
  EXPECT_DOUBLE_EQ(rates.batches_per_second(), smoothed);
  rates.Report(5, 1.0, t0 + absl::Seconds(4));
  EXPECT_GT(rates.input_bound(), 0.5);
  EXPECT_LE(rates.input_bound(), 1.0);
}

}  // namespace
}  // namespace croupier
