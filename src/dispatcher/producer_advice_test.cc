#include "src/dispatcher/producer_advice.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace croupier {
namespace {

using ConsumerLoad = ProducerAdvisor::ConsumerLoad;
using ProducerLoad = ProducerAdvisor::ProducerLoad;

const absl::Time kStart = absl::FromUnixSeconds(1000000);

// `n` consumers that each train at `train_rate` batches/s when never starved, fed by producers
// that can each make `per_producer` batches/s: what the consumers receive and how long they wait.
std::vector<ConsumerLoad> Consumers(int n, double train_rate, int producers, double per_producer) {
  const double supply = producers * per_producer;
  const double rate = std::min(train_rate, supply / n);
  return std::vector<ConsumerLoad>(
      n, {.batches_per_second = rate, .input_bound = 1 - rate / train_rate});
}

// Producers of `per_producer` batches/s each, making what the consumers take: their rate, and
// the share of their time spent making.
std::vector<ProducerLoad> Producers(int producers, double per_producer, double consumed) {
  const double rate = std::min(per_producer, consumed / producers);
  return std::vector<ProducerLoad>(producers,
                                   {.batches_per_second = rate, .busy_share = rate / per_producer});
}

// Runs the closed loop for `seconds`: consumers demand `demand` batches/s in all, each producer
// makes up to 20 batches/s, and the number of producers follows the advice (as an autoscaler
// would) when `follow`. Returns the recommendations, one per second.
std::vector<uint32_t> Simulate(ProducerAdvisor& advisor, double demand, int& producers, int seconds,
                               bool follow, absl::Time& now) {
  std::vector<uint32_t> out;
  for (int i = 0; i < seconds; ++i) {
    auto consumers = Consumers(4, demand / 4, producers, 20);
    double consumed = 0;
    for (const auto& c : consumers) consumed += c.batches_per_second;
    advisor.Update(now, consumers, Producers(producers, 20, consumed));
    out.push_back(advisor.advice().recommended);
    if (follow) producers = advisor.advice().recommended;
    now += absl::Seconds(1);
  }
  return out;
}

TEST(ProducerAdvisor, ConsumersDemandingThreeTimesOneProducerGetThree) {
  ProducerAdvisor advisor({.smoothing = absl::Seconds(10), .hold = absl::Seconds(10)});
  absl::Time now = kStart;
  // One producer makes 20 batches/s; the consumers would take 60: they wait 2/3 of the time.
  ProducerAdvisor::Advice first =
      advisor.Update(now, Consumers(4, 15, 1, 20), Producers(1, 20, 20));
  EXPECT_EQ(first.recommended, 0u) << "no figure before the hold";
  EXPECT_NE(first.reason.find("measuring"), std::string::npos) << first.reason;
  EXPECT_NEAR(first.demand, 60, 1e-9);
  EXPECT_NEAR(first.capacity, 20, 1e-9);
  EXPECT_NEAR(first.target, 3, 1e-9);
  EXPECT_EQ(first.producers, 1u);
  now += absl::Seconds(1);
  int producers = 1;
  auto one = Simulate(advisor, 60, producers, 10, /*follow=*/false, now);
  EXPECT_EQ(one[8], 0u);
  EXPECT_EQ(one[9], 3u) << advisor.advice().reason;
  // Three producers then keep up: the consumers stop waiting and the figure stays.
  producers = 3;
  auto after = Simulate(advisor, 60, producers, 120, /*follow=*/false, now);
  for (uint32_t r : after) EXPECT_EQ(r, 3u);
}

TEST(ProducerAdvisor, RisesOnlyAfterTheHold) {
  ProducerAdvisor advisor({.smoothing = absl::Seconds(5), .hold = absl::Seconds(10)});
  absl::Time now = kStart;
  int producers = 1;
  // Demand one producer can meet.
  auto steady = Simulate(advisor, 18, producers, 30, /*follow=*/false, now);
  EXPECT_EQ(steady.back(), 1u);
  // Demand triples: the figure rises, but not within the hold, and settles at 3.
  auto rising = Simulate(advisor, 54, producers, 60, /*follow=*/true, now);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(rising[i], 1u) << "second " << i;
  EXPECT_EQ(rising.back(), 3u) << advisor.advice().reason;
  EXPECT_EQ(producers, 3);
}

TEST(ProducerAdvisor, DoesNotFlapUnderNoise) {
  ProducerAdvisor advisor;
  absl::Time now = kStart;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(1.0, 0.15);  // 15% noise on every figure
  int changes = 0;
  uint32_t last = 0;
  // Demand near a boundary: 3.0 producers' worth, measured with noise, for ten minutes, with the
  // autoscaler following the advice.
  int producers = 3;
  for (int i = 0; i < 600; ++i) {
    std::vector<ConsumerLoad> consumers = Consumers(4, 15, producers, 20);
    double consumed = 0;
    for (auto& c : consumers) {
      c.batches_per_second *= noise(rng);
      consumed += c.batches_per_second;
    }
    std::vector<ProducerLoad> made = Producers(producers, 20, consumed);
    for (auto& p : made) p.batches_per_second *= noise(rng);
    const uint32_t r = advisor.Update(now, consumers, made).recommended;
    if (last != 0 && r != last) ++changes;
    last = r;
    if (r != 0) producers = r;
    now += absl::Seconds(1);
  }
  EXPECT_EQ(changes, 0) << advisor.advice().reason;
  EXPECT_EQ(last, 3u);
}

TEST(ProducerAdvisor, WithoutDampingTheSameNoiseWouldFlap) {
  // The check above can fail: with no smoothing and no hold, the same noise moves the figure.
  ProducerAdvisor advisor({.smoothing = absl::Milliseconds(1), .hold = absl::ZeroDuration()});
  absl::Time now = kStart;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(1.0, 0.15);
  int changes = 0;
  uint32_t last = 0;
  for (int i = 0; i < 600; ++i) {
    std::vector<ConsumerLoad> consumers = Consumers(4, 15.5, 3, 20);
    for (auto& c : consumers) c.batches_per_second *= noise(rng);
    const uint32_t r = advisor.Update(now, consumers, Producers(3, 20, 60)).recommended;
    if (last != 0 && r != last) ++changes;
    last = r;
    now += absl::Seconds(1);
  }
  EXPECT_GT(changes, 10);
}

TEST(ProducerAdvisor, RecommendsFewerWhenProducersIdle) {
  ProducerAdvisor advisor({.smoothing = absl::Seconds(5), .hold = absl::Seconds(10)});
  absl::Time now = kStart;
  int producers = 4;
  // Four producers of 20 batches/s each for consumers that take 15 in all: one is enough.
  for (int i = 0; i <= 10; ++i) {
    advisor.Update(now + absl::Seconds(i), Consumers(4, 15.0 / 4, 4, 20), Producers(4, 20, 15));
  }
  EXPECT_EQ(advisor.advice().recommended, 1u) << advisor.advice().reason;
  now += absl::Seconds(11);
  // From a figure of 4 (a previous load), it comes down after the hold.
  ProducerAdvisor from_four({.smoothing = absl::Seconds(5), .hold = absl::Seconds(10)});
  Simulate(from_four, 80, producers, 60, /*follow=*/true, now);
  EXPECT_EQ(from_four.advice().recommended, 4u);
  auto falling = Simulate(from_four, 15, producers, 60, /*follow=*/true, now);
  EXPECT_EQ(falling[5], 4u);
  EXPECT_EQ(falling.back(), 1u) << from_four.advice().reason;
}

TEST(ProducerAdvisor, ProducersThatDoNotReportBusyTimeCountAtTheirRate) {
  // Python sources report no busy time: their rate is their capacity, which may understate it,
  // so the figure does not go below the producers there are.
  ProducerAdvisor advisor({.smoothing = absl::Seconds(10), .hold = absl::Seconds(10)});
  std::vector<ProducerLoad> producers(2, {.batches_per_second = 5, .busy_share = std::nullopt});
  advisor.Update(kStart, Consumers(2, 5, 2, 100), producers);
  advisor.Update(kStart + absl::Seconds(10), Consumers(2, 5, 2, 100), producers);
  EXPECT_EQ(advisor.advice().recommended, 2u);
  EXPECT_NEAR(advisor.advice().capacity, 5, 1e-9);
}

TEST(ProducerAdvisor, ConsumersWaitingOnIdleProducersAreNotAskedMoreProducers) {
  // The producer makes what is asked in a tenth of its time, yet the consumer waits half the
  // time: the batches are slow to arrive for another reason, and more producers would not help.
  ProducerAdvisor advisor({.smoothing = absl::Seconds(10), .hold = absl::Seconds(10)});
  for (int i = 0; i <= 10; i += 10) {
    advisor.Update(kStart + absl::Seconds(i), {{.batches_per_second = 10, .input_bound = 0.5}},
                   {{.batches_per_second = 10, .busy_share = 0.1}});
  }
  EXPECT_NEAR(advisor.advice().capacity, 100, 1e-9);
  EXPECT_EQ(advisor.advice().recommended, 1u) << advisor.advice().reason;
  EXPECT_NE(advisor.advice().reason.find("the limit is not the producers"), std::string::npos)
      << advisor.advice().reason;
}

TEST(ProducerAdvisor, ProducersThatMadeNothingAreNotMeasured) {
  // An idle producer (no task yet) says nothing of what a producer can make.
  ProducerAdvisor advisor({.smoothing = absl::Seconds(10), .hold = absl::Seconds(10)});
  advisor.Update(kStart, {{.batches_per_second = 20, .input_bound = 0}},
                 {{.batches_per_second = 20, .busy_share = 1.0},
                  {.batches_per_second = 0, .busy_share = 0.0}});
  EXPECT_NEAR(advisor.advice().capacity, 20, 1e-9);
  EXPECT_EQ(advisor.advice().producers, 2u);
}

TEST(ProducerAdvisor, StarvedConsumersCountAsCappedDemand) {
  ProducerAdvisor advisor({.smoothing = absl::Seconds(10), .hold = absl::Seconds(10)});
  // Always waiting: demand is taken as 1 / (1 - kMaxInputBound) = 10 times the rate.
  for (int i = 0; i <= 10; i += 10) {
    advisor.Update(kStart + absl::Seconds(i), {{.batches_per_second = 2, .input_bound = 1.0}},
                   {{.batches_per_second = 4, .busy_share = {}}});
  }
  EXPECT_NEAR(advisor.advice().demand, 20, 1e-9);
  EXPECT_EQ(advisor.advice().recommended, 5u);
}

TEST(ProducerAdvisor, NoProducerAsksForOneAndNoMeasurementKeepsTheFigure) {
  ProducerAdvisor advisor;
  EXPECT_EQ(advisor.Update(kStart, {{.batches_per_second = 0, .input_bound = 1}}, {}).recommended,
            1u);
  EXPECT_NE(advisor.advice().reason.find("no producer"), std::string::npos);
  // Producers that made nothing yet: still 1.
  EXPECT_EQ(advisor
                .Update(kStart + absl::Seconds(1), {{.batches_per_second = 0, .input_bound = 1}},
                        {{.batches_per_second = 0, .busy_share = {}}})
                .recommended,
            1u);
  // No consumers: nothing measured, the figure stays.
  EXPECT_EQ(
      advisor.Update(kStart + absl::Seconds(2), {}, {{.batches_per_second = 10, .busy_share = {}}})
          .recommended,
      1u);
  EXPECT_NE(advisor.advice().reason.find("no consumer"), std::string::npos);
}

TEST(ProducerAdvisor, NeverRecommendsMoreThanTheMaximum) {
  ProducerAdvisor advisor(
      {.smoothing = absl::Seconds(1), .hold = absl::ZeroDuration(), .max_producers = 8});
  for (int i = 0; i < 2; ++i) {
    advisor.Update(kStart + absl::Seconds(i), {{.batches_per_second = 1000, .input_bound = 0.9}},
                   {{.batches_per_second = 1, .busy_share = {}}});
  }
  EXPECT_EQ(advisor.advice().recommended, 8u);
}

}  // namespace
}  // namespace croupier
