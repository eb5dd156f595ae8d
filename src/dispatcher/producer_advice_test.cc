#include "src/dispatcher/producer_advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
    if (follow && advisor.advice().recommended != 0) producers = advisor.advice().recommended;
    now += absl::Seconds(1);
  }
  return out;
}

// The seconds (from the start of `recommended`) at which the figure changed.
std::vector<int> Changes(const std::vector<uint32_t>& recommended) {
  std::vector<int> out;
  for (size_t i = 1; i < recommended.size(); ++i) {
    if (recommended[i] != recommended[i - 1] && recommended[i - 1] != 0) out.push_back(i);
  }
  return out;
}

TEST(ProducerAdvisor, ConsumersDemandingThreeTimesOneProducerGetThree) {
  ProducerAdvisor advisor({.smoothing = absl::Seconds(10), .hold = absl::Seconds(10)});
  absl::Time now = kStart;
  // One producer makes 20 batches/s; the consumers would take 60: they wait 2/3 of the time.
  ProducerAdvisor::Advice first =
      advisor.Update(now, Consumers(4, 15, 1, 20), Producers(1, 20, 20));
  EXPECT_EQ(first.recommended, 0u) << "no figure before up_hold";
  EXPECT_NE(first.reason.find("measuring"), std::string::npos) << first.reason;
  EXPECT_NEAR(first.demand, 60, 1e-9);
  EXPECT_NEAR(first.capacity, 20, 1e-9);
  EXPECT_NEAR(first.target, 3, 1e-9);
  EXPECT_EQ(first.producers, 1u);
  now += absl::Seconds(1);
  int producers = 1;
  auto one = Simulate(advisor, 60, producers, 3, /*follow=*/false, now);
  EXPECT_EQ(one[0], 0u);
  EXPECT_EQ(one[1], 3u) << advisor.advice().reason;
  // Three producers then keep up: the consumers stop waiting and the figure stays.
  producers = 3;
  auto after = Simulate(advisor, 60, producers, 120, /*follow=*/false, now);
  for (uint32_t r : after) EXPECT_EQ(r, 3u);
}

TEST(ProducerAdvisor, RisesWithinSecondsWhileConsumersWaitOnSaturatedProducers) {
  ProducerAdvisor advisor;  // the defaults: up_hold 2 s, cooldown 8 s
  absl::Time now = kStart;
  int producers = 1;
  auto steady = Simulate(advisor, 18, producers, 30, /*follow=*/true, now);
  EXPECT_EQ(steady.back(), 1u);
  // Demand triples: the figure rises after up_hold (2 s), not before, and settles at 3 at once
  // (the model's figure), then stays for two minutes.
  auto rising = Simulate(advisor, 54, producers, 120, /*follow=*/true, now);
  EXPECT_EQ(rising[0], 1u);
  EXPECT_EQ(rising[1], 1u);
  EXPECT_EQ(rising[3], 3u) << advisor.advice().reason;
  EXPECT_EQ(Changes(rising), std::vector<int>{2}) << advisor.advice().reason;
  EXPECT_EQ(producers, 3);
}

TEST(ProducerAdvisor, ARiseIsAtMostTwiceTheProducersAndTheCooldownSpacesThem) {
  ProducerAdvisor advisor({.cooldown = absl::Seconds(8), .max_producers = 8});
  absl::Time now = kStart;
  int producers = 1;
  // Consumers that would take 400 batches/s, producers of 20: they wait 95% of the time, so
  // their demand is only a bound. 8 producers (the maximum), reached by doubling, a change at
  // most every cooldown.
  auto rising = Simulate(advisor, 400, producers, 60, /*follow=*/true, now);
  const std::vector<int> changes = Changes(rising);
  ASSERT_EQ(changes.size(), 2u) << advisor.advice().reason;
  EXPECT_EQ(rising[changes[0] - 1], 2u) << "the first figure is twice the one producer";
  EXPECT_EQ(rising[changes[0]], 4u);
  EXPECT_EQ(rising[changes[1]], 8u);
  EXPECT_GE(changes[1] - changes[0], 8);
  EXPECT_EQ(rising.back(), 8u);
}

TEST(ProducerAdvisor, AQuickRiseIsNotUndoneByTheDemandMeasuredWhileTheConsumersWaited) {
  ProducerAdvisor advisor;  // the defaults: smoothing 30 s, hold 15 s, cooldown 8 s
  absl::Time now = kStart;
  int producers = 1;
  // Consumers that would take 2,000 batches/s, producers of 20: 100 are needed. From one, the
  // figure doubles while the consumers wait nearly all the time, their demand then only a bound
  // (at most 10 times what they get). Once it has reached 100 it must stay: a fall read from
  // averages that still hold those bounds starves the consumers again (it fell to 89, then
  // rose to 102, in bench_hollow --autoscale).
  auto run = Simulate(advisor, 2000, producers, 300, /*follow=*/true, now);
  const auto reached = std::find_if(run.begin(), run.end(), [](uint32_t r) { return r >= 100; });
  ASSERT_NE(reached, run.end()) << advisor.advice().reason;
  EXPECT_LE(reached - run.begin(), 90) << "seconds to reach the 100 producers needed";
  EXPECT_EQ(*std::min_element(reached, run.end()), 100u) << advisor.advice().reason;
  EXPECT_EQ(run.back(), 100u) << advisor.advice().reason;
}

TEST(ProducerAdvisor, ConsumersStillWaitingOnSaturatedProducersGetOneMore) {
  // The model says one producer is enough (target 0.95), but the consumers wait 20% of the time
  // while the producer is busy 90% of its time: one more.
  ProducerAdvisor advisor;
  absl::Time now = kStart;
  for (int i = 0; i <= 2; ++i) {
    advisor.Update(now + absl::Seconds(i), {{.batches_per_second = 15.2, .input_bound = 0.2}},
                   {{.batches_per_second = 18, .busy_share = 0.9}});
  }
  EXPECT_EQ(advisor.advice().recommended, 2u) << advisor.advice().reason;
}

TEST(ProducerAdvisor, AFallingWaitIsTheLastChangeShowingAndAddsNoProducer) {
  // Saturated producers; the model asks for no more than there are. A wait that stays at 30%
  // adds one producer; a wait that then falls (the consumers' smoothed rates catching up with
  // the change) adds none, even above kStillStarved; a wait that stays at 15% adds one more.
  ProducerAdvisor advisor;
  absl::Time now = kStart;
  const auto feed = [&](double bound, double target) {
    const double rate = 20 * target * (1 - bound);  // demand: target producers of 20 batches/s
    return advisor
        .Update(now, {{.batches_per_second = rate, .input_bound = bound}},
                {{.batches_per_second = 20, .busy_share = 1.0},
                 {.batches_per_second = 20, .busy_share = 1.0}})
        .recommended;
  };
  for (int i = 0; i <= 2; ++i, now += absl::Seconds(1)) feed(0.3, 1.5);
  ASSERT_EQ(advisor.advice().recommended, 3u) << advisor.advice().reason;
  for (int i = 0; i < 60; ++i, now += absl::Seconds(1)) {
    EXPECT_EQ(feed(0.3 * std::exp(-i / 10.0), 2.5), 3u)
        << "second " << i << ": " << advisor.advice().reason;
  }
  std::vector<uint32_t> steady;
  for (int i = 0; i < 6; ++i, now += absl::Seconds(1)) steady.push_back(feed(0.15, 2.5));
  EXPECT_EQ(steady[0], 3u);
  EXPECT_EQ(steady.back(), 4u) << advisor.advice().reason;
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

TEST(ProducerAdvisor, WithoutHysteresisHoldAndCooldownNoiseAtTheLineWouldFlap) {
  // Consumers that need 2.9 producers of 20 batches/s, with the autoscaler following: at 3 they
  // wait 5% of the time, give or take noise; at 4 almost never; at 2 or fewer a third of it. All
  // rates carry 15% noise. With the damping the figure moves at most once; with none, the noisy
  // waits and the falls that follow each rise move it many times.
  const auto run = [](ProducerAdvisor::Options options) {
    ProducerAdvisor advisor(options);
    absl::Time now = kStart;
    std::mt19937_64 rng(7);
    std::normal_distribution<double> noise(1.0, 0.15);
    std::normal_distribution<double> wait(0.0, 0.03);
    int changes = 0, producers = 3;
    uint32_t last = 0;
    for (int i = 0; i < 600; ++i) {
      const double mean_wait = producers >= 4 ? 0.0 : producers == 3 ? 0.05 : 0.33;
      const double bound = std::clamp(mean_wait + wait(rng), 0.0, 1.0);
      const double taken = 58 * (1 - bound);
      std::vector<ProducerLoad> made = Producers(producers, 20, taken);
      for (auto& p : made) p.batches_per_second *= noise(rng);
      const uint32_t r =
          advisor
              .Update(now, {{.batches_per_second = taken * noise(rng), .input_bound = bound}}, made)
              .recommended;
      if (last != 0 && r != last) ++changes;
      last = r;
      if (r != 0) producers = r;
      now += absl::Seconds(1);
    }
    return changes;
  };
  const int damped = run({});
  const int undamped = run({.smoothing = absl::Milliseconds(1),
                            .hold = absl::ZeroDuration(),
                            .up_hold = absl::ZeroDuration(),
                            .cooldown = absl::ZeroDuration()});
  std::printf("changes in ten minutes: %d damped, %d undamped\n", damped, undamped);
  EXPECT_LE(damped, 2);
  EXPECT_GT(undamped, 10 * damped);
}

TEST(ProducerAdvisor, FallsOnlyAfterASustainedMargin) {
  ProducerAdvisor advisor({.smoothing = absl::Seconds(5), .hold = absl::Seconds(10)});
  absl::Time now = kStart;
  int producers = 4;
  // Four producers of 20 batches/s each for consumers that take 15 in all: one is enough, and
  // the first figure says so.
  for (int i = 0; i <= 10; ++i) {
    advisor.Update(now + absl::Seconds(i), Consumers(4, 15.0 / 4, 4, 20), Producers(4, 20, 15));
    EXPECT_EQ(advisor.advice().recommended, i < 10 ? 0u : 1u) << advisor.advice().reason;
  }
  now += absl::Seconds(11);
  // From a figure of 4 (a previous load), it comes down after the hold, not before.
  ProducerAdvisor from_four({.smoothing = absl::Seconds(5), .hold = absl::Seconds(10)});
  Simulate(from_four, 80, producers, 60, /*follow=*/true, now);
  EXPECT_EQ(from_four.advice().recommended, 4u);
  auto falling = Simulate(from_four, 15, producers, 60, /*follow=*/true, now);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(falling[i], 4u) << "second " << i;
  EXPECT_EQ(falling.back(), 1u) << from_four.advice().reason;
  // A margin too thin (the smoothed target at 1.85 of 2 producers) keeps 2.
  ProducerAdvisor thin({.smoothing = absl::Seconds(5), .hold = absl::Seconds(10)});
  producers = 2;
  Simulate(thin, 37, producers, 120, /*follow=*/true, now);
  EXPECT_EQ(thin.advice().recommended, 2u) << thin.advice().reason;
}

TEST(ProducerAdvisor, NoFallWhileTheConsumersWait) {
  // Producers that look idle on the average, but consumers that wait now: no fall.
  ProducerAdvisor advisor({.smoothing = absl::Seconds(5), .hold = absl::Seconds(5)});
  absl::Time now = kStart;
  int producers = 4;
  Simulate(advisor, 80, producers, 30, /*follow=*/true, now);
  ASSERT_EQ(advisor.advice().recommended, 4u);
  for (int i = 0; i < 60; ++i) {
    advisor.Update(now, {{.batches_per_second = 10, .input_bound = 0.3}},
                   {{.batches_per_second = 5, .busy_share = 0.25}});
    now += absl::Seconds(1);
  }
  EXPECT_EQ(advisor.advice().recommended, 4u) << advisor.advice().reason;
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
  for (int i = 0; i <= 2; ++i) {
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
  // Always waiting: demand is taken as 1 / (1 - kMaxInputBound) = 10 times the rate: 5
  // producers, but a first figure at most twice the one running.
  for (int i = 0; i <= 2; ++i) {
    advisor.Update(kStart + absl::Seconds(i), {{.batches_per_second = 2, .input_bound = 1.0}},
                   {{.batches_per_second = 4, .busy_share = {}}});
  }
  EXPECT_NEAR(advisor.advice().demand, 20, 1e-9);
  EXPECT_EQ(advisor.advice().recommended, 2u);
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
  ProducerAdvisor advisor({.smoothing = absl::Seconds(1),
                           .hold = absl::ZeroDuration(),
                           .up_hold = absl::ZeroDuration(),
                           .cooldown = absl::ZeroDuration(),
                           .max_producers = 8});
  for (int i = 0; i < 6; ++i) {
    advisor.Update(kStart + absl::Seconds(i), {{.batches_per_second = 1000, .input_bound = 0.9}},
                   {{.batches_per_second = 1, .busy_share = {}}});
  }
  EXPECT_EQ(advisor.advice().recommended, 8u);
}

}  // namespace
}  // namespace croupier
