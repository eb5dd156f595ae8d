#include "src/plan/token_plan.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Lengths drawn from a long-tailed distribution, as documents are: many short, a few long.
std::vector<uint32_t> Lengths(size_t n, uint32_t seed, uint32_t max = 5000) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> dist(5.0, 1.2);
  std::vector<uint32_t> out(n);
  for (auto& v : out) v = std::clamp<uint32_t>(static_cast<uint32_t>(dist(rng)), 1, max);
  return out;
}

TokenPlanSpec Spec(Packing packing, std::vector<WeightChange> schedule, uint32_t L = 256,
                   uint32_t window = 64, uint32_t global_batch = 120) {
  TokenPlanSpec spec;
  spec.seed = 17;
  spec.sequence_length = L;
  spec.packing = packing;
  spec.window = window;
  spec.global_batch = global_batch;
  spec.schedule = std::move(schedule);
  return spec;
}

std::unique_ptr<TokenPlan> Plan(const TokenPlanSpec& spec,
                                const std::vector<std::vector<uint32_t>>& lengths) {
  std::vector<TokenSource> sources;
  for (size_t k = 0; k < lengths.size(); ++k) {
    sources.push_back({"source" + std::to_string(k), absl::MakeConstSpan(lengths[k])});
  }
  auto plan = TokenPlan::Create(spec, std::move(sources));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : nullptr;
}

TEST(PlanTokenTest, TheMixtureKeepsEveryWindowWithinOneSequenceOfItsShare) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(500, 1), Lengths(300, 2),
                                                      Lengths(200, 3)};
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  auto plan = Plan(Spec(Packing::kBestFit, {{0, weights}}), lengths);
  ASSERT_NE(plan, nullptr);
  constexpr uint64_t kSequences = 10000;
  std::vector<uint32_t> source(kSequences);
  for (uint64_t i = 0; i < kSequences; ++i) source[i] = plan->SourceOf(i);
  // Every prefix: within one sequence of the share (the deficit rule's bound).
  std::vector<uint64_t> count(3, 0);
  for (uint64_t i = 0; i < kSequences; ++i) {
    ++count[source[i]];
    for (int k = 0; k < 3; ++k) {
      ASSERT_LT(std::abs(static_cast<double>(count[k]) - weights[k] * (i + 1)), 1.0 + 1e-9)
          << "source " << k << " after " << i + 1 << " sequences";
    }
  }
  // And the whole: within 1% of the weight (the bar), here far closer.
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(count[k] / double(kSequences), weights[k], 0.0001);
  // CountsBefore agrees with the stream, from any point (checkpoints and all).
  for (uint64_t i : {0ull, 1ull, 4095ull, 4096ull, 4097ull, 9999ull}) {
    std::vector<uint64_t> before(3, 0);
    for (uint64_t t = 0; t < i; ++t) ++before[source[t]];
    EXPECT_EQ(plan->CountsBefore(i), before) << i;
  }
}

TEST(PlanTokenTest, AWeightOfZeroIsNeverChosenAndAChangeContinuesEverySource) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(100, 1), Lengths(100, 2)};
  // Steps of 120 sequences: from step 10 on, only source 1; from step 20, half and half.
  auto plan = Plan(Spec(Packing::kConcat, {{0, {1, 0}}, {10, {0, 1}}, {20, {1, 1}}}), lengths);
  ASSERT_NE(plan, nullptr);
  for (uint64_t i = 0; i < 1200; ++i) ASSERT_EQ(plan->SourceOf(i), 0u) << i;
  for (uint64_t i = 1200; i < 2400; ++i) ASSERT_EQ(plan->SourceOf(i), 1u) << i;
  std::vector<uint64_t> at = plan->CountsBefore(2400);
  EXPECT_EQ(at, (std::vector<uint64_t>{1200, 1200}));
  // Each source's sequences continue where they were: source 0's next is its 1,200th.
  std::vector<uint64_t> next = at;
  for (uint64_t i = 2400; i < 3000; ++i) {
    const SequencePlan s = plan->Sequence(i);
    const uint64_t j = next[s.source]++;
    const uint64_t per_epoch = plan->SequencesInEpoch(s.source, 0);
    ASSERT_EQ(s.source_epoch * per_epoch + s.source_sequence, j) << i;
  }
  EXPECT_EQ(next[0] - at[0], 300u);
  EXPECT_EQ(next[1] - at[1], 300u);
}

// Over each source epoch, the pieces of its sequences are a partition of the epoch's documents:
// every token of every document once (concat: the first L of each sequence's L + 1), no document
// twice, none missing; with best_fit no document of at most L tokens is split and no sequence
// holds more than L tokens.
void CheckPartition(Packing packing) {
  SCOPED_TRACE(PackingName(packing));
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(400, 5, 900), Lengths(150, 6, 900),
                                                      Lengths(90, 7, 900)};
  constexpr uint32_t L = 256;
  auto plan = Plan(Spec(packing, {{0, {0.6, 0.3, 0.1}}}, L), lengths);
  ASSERT_NE(plan, nullptr);
  // (source, source epoch) -> document -> the tokens covered, as [offset, offset + length).
  std::map<std::pair<uint32_t, uint64_t>, std::map<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>>>
      seen;
  std::map<std::pair<uint32_t, uint64_t>, std::set<uint64_t>> sequences;
  for (uint64_t i = 0; i < 6000; ++i) {
    const SequencePlan s = plan->Sequence(i);
 const auto key = std::make_pair(s.source, s.source_epoch);
    ASSERT_TRUE(sequences[key].insert(s.source_sequence).second)
        << "sequence " << s.source_sequence << " of source " << s.source << " twice";
    uint32_t budget = L;  // concat: the first L tokens belong to this sequence
    uint64_t tokens = 0;
    for (const Piece& p : s.pieces) {
      ASSERT_EQ(p.source, s.source);
      ASSERT_LE(p.offset + p.length, lengths[p.source][p.document]);
      const uint32_t mine = packing == Packing::kConcat ? std::min(budget, p.length) : p.length;
      if (mine > 0) seen[key][p.document].push_back({p.offset, mine});
      budget -= mine;
      tokens += p.length;
      if (packing == Packing::kBestFit && lengths[p.source][p.document] <= L) {
        ASSERT_EQ(p.offset, 0u);
        ASSERT_EQ(p.length, lengths[p.source][p.document]) << "a short document was split";
      }
    }
    ASSERT_LE(tokens, packing == Packing::kConcat ? L + 1 : L);
  }
  // Every source epoch completed in the stream: all its documents, every token once.
  int whole_epochs = 0;
  for (const auto& [where, docs] : seen) {
    const auto [k, e] = where;
    if (sequences[where].size() != plan->SequencesInEpoch(k, e)) continue;  // a partial epoch
    ++whole_epochs;
    ASSERT_EQ(docs.size(), lengths[k].size()) << "source " << k << " epoch " << e;
    for (const auto& [doc, pieces] : docs) {
      std::vector<std::pair<uint32_t, uint32_t>> sorted = pieces;
      std::sort(sorted.begin(), sorted.end());
      uint32_t next = 0;
      for (const auto& [offset, length] : sorted) {
        ASSERT_EQ(offset, next) << "source " << k << " epoch " << e << " document " << doc;
        next += length;
      }
      ASSERT_EQ(next, lengths[k][doc]) << "source " << k << " epoch " << e << " document " << doc;
    }
  }
  EXPECT_GE(whole_epochs, 6) << "too few whole source epochs to check";
}

TEST(PlanTokenTest, ConcatPartitionsEachSourceEpoch) { CheckPartition(Packing::kConcat); }
TEST(PlanTokenTest, BestFitPartitionsEachSourceEpoch) { CheckPartition(Packing::kBestFit); }

TEST(PlanTokenTest, EachSourceEpochIsItsOwnPermutationAndTheSeedChangesIt) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(1000, 1)};
  auto plan = Plan(Spec(Packing::kBestFit, {{0, {1}}}), lengths);
  auto other = Plan([] {
    TokenPlanSpec s = Spec(Packing::kBestFit, {{0, {1}}});
    s.seed = 18;
    return s;
  }(), lengths);
  ASSERT_NE(plan, nullptr);
  ASSERT_NE(other, nullptr);
  std::vector<uint64_t> e0, e1, seed18;
  for (uint64_t p = 0; p < 1000; ++p) {
    e0.push_back(plan->DocumentAt(0, 0, p));
    e1.push_back(plan->DocumentAt(0, 1, p));
    seed18.push_back(other->DocumentAt(0, 0, p));
  }
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, seed18);
  std::vector<uint64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t p = 0; p < 1000; ++p) ASSERT_EQ(sorted[p], p);
}

// The same spec and lengths give the same sequences, whatever order they are asked in and from
// however many threads (the caches are invisible).
TEST(PlanTokenTest, SequencesAreAPureFunctionOfTheSpecAndTheLengths) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(300, 1), Lengths(300, 2)};
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    SCOPED_TRACE(PackingName(packing));
    auto a = Plan(Spec(packing, {{0, {0.7, 0.3}}, {5, {0.2, 0.8}}}), lengths);
    auto b = Plan(Spec(packing, {{0, {0.7, 0.3}}, {5, {0.2, 0.8}}}), lengths);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    std::vector<SequencePlan> forward;
    for (uint64_t i = 0; i < 3000; ++i) forward.push_back(a->Sequence(i));
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 2999 - t; i < 3000; i -= 4) {  // backwards, interleaved
          const SequencePlan s = b->Sequence(i);
          if (s.pieces != forward[i].pieces || s.source != forward[i].source) ++mismatches[t];
          if (i < 4) break;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(mismatches, std::vector<int>(4, 0));
    // A batch's sequences found together are the same, across a weight change (step 5: 600).
    for (uint64_t first : {0ull, 590ull, 4090ull}) {
      const std::vector<SequencePlan> run = b->Sequences(first, 20);
      for (uint64_t t = 0; t < 20 && first + t < 3000; ++t) {
        ASSERT_EQ(run[t].pieces, forward[first + t].pieces) << first + t;
        ASSERT_EQ(run[t].source_sequence, forward[first + t].source_sequence) << first + t;
      }
    }
  }
}

// Walks of the mixture resume where earlier ones ended (kept cursors): batches made one after
// another by several threads, and out of order, across weight changes (steps 5 and 40: sequences
// 600 and 4,800) and a checkpoint (4,096), equal the sequences found one at a time from the
// checkpoints alone.
TEST(PlanTokenTest, WalksResumedWhereOthersEndedFindTheSameSequences) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(400, 3), Lengths(300, 4),
                                                      Lengths(200, 5)};
  const std::vector<WeightChange> schedule = {
      {0, {0.5, 0.3, 0.2}}, {5, {0.1, 0.1, 0.8}}, {40, {0.4, 0.0, 0.6}}};
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    SCOPED_TRACE(PackingName(packing));
    auto reference = Plan(Spec(packing, schedule), lengths);
    auto walked = Plan(Spec(packing, schedule), lengths);
    ASSERT_NE(reference, nullptr);
    ASSERT_NE(walked, nullptr);
    constexpr uint64_t kSequences = 6000, kBatch = 8;
    std::vector<SequencePlan> expected;
    for (uint64_t i = 0; i < kSequences; ++i) expected.push_back(reference->Sequence(i));
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        // Thread t makes the batches of its quarter in order, then every 7th batch of all
        // backwards, starting between the others' walks.
        std::vector<uint64_t> firsts;
        for (uint64_t b = t * kSequences / 4; b < (t + 1) * kSequences / 4; b += kBatch) {
          firsts.push_back(b);
        }
        for (int64_t b = kSequences - kBatch - 3 * t; b >= 0; b -= 7 * kBatch) {
          firsts.push_back(static_cast<uint64_t>(b));
        }
        for (uint64_t first : firsts) {
          const uint64_t count = std::min(kBatch, kSequences - first);
          const std::vector<SequencePlan> run = walked->Sequences(first, count);
          for (uint64_t r = 0; r < count; ++r) {
            const SequencePlan& want = expected[first + r];
            if (run[r].source != want.source || run[r].pieces != want.pieces ||
                run[r].source_sequence != want.source_sequence) {
              ++mismatches[t];
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(mismatches, std::vector<int>(4, 0));
    // And one at a time after the walks, from whatever cursors they left.
    for (uint64_t i : {0ull, 599ull, 600ull, 601ull, 4095ull, 4096ull, 4799ull, 4800ull, 5999ull}) {
      EXPECT_EQ(walked->Sequence(i).pieces, expected[i].pieces) << i;
      EXPECT_EQ(walked->SourceOf(i), expected[i].source) << i;
    }
  }
}

// The plan of a tokens job is part of its batches: a change that moves one piece makes other
// batches of the same job (a resume across versions would repeat or skip documents). These values
// were computed when the packing was first made faster, and must never change alone.
TEST(PlanTokenTest, GoldenValues) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(2000, 7, 9000), Lengths(1500, 8),
                                                      Lengths(700, 9)};
  const std::vector<WeightChange> schedule = {{0, {0.5, 0.3, 0.2}}, {7, {0.2, 0.2, 0.6}}};
  auto hash_of = [&](Packing packing) {
    auto plan = Plan(Spec(packing, schedule, /*L=*/512, /*window=*/300), lengths);
    uint64_t h = 1469598103934665603ull;  // FNV-1a over every piece of 5,000 sequences
    auto mix = [&h](uint64_t v) {
      for (int b = 0; b < 8; ++b) {
        h ^= (v >> (8 * b)) & 0xff;
        h *= 1099511628211ull;
      }
    };
    for (const SequencePlan& s : plan->Sequences(0, 5000)) {
      mix(s.source);
      mix(s.source_epoch);
      mix(s.source_sequence);
      for (const Piece& p : s.pieces) {
        mix(p.source);
        mix(p.document);
        mix(p.offset);
        mix(p.length);
      }
    }
    return h;
  };
  EXPECT_EQ(hash_of(Packing::kConcat), 7540583536223741854u);
  EXPECT_EQ(hash_of(Packing::kBestFit), 4900810876818860609u);
}

// best_fit leaves less padding than cutting without splitting would (one document a sequence),
// and concat leaves only the end of each source epoch.
TEST(PlanTokenTest, PaddingIsReportedFromLengthsAlone) {
  const std::vector<std::vector<uint32_t>> lengths = {Lengths(2000, 9, 256)};
  auto concat = Plan(Spec(Packing::kConcat, {{0, {1}}}), lengths);
  auto fit = Plan(Spec(Packing::kBestFit, {{0, {1}}}, 256, 512), lengths);
  ASSERT_NE(concat, nullptr);
  ASSERT_NE(fit, nullptr);
  uint64_t tokens = 0;
  for (uint32_t v : lengths[0]) tokens += v;
  const double one_per_sequence = 1.0 - tokens / (2000.0 * 256);
  EXPECT_LT(concat->PaddingFraction(0, 0), 256.0 / tokens + 1e-9);
  EXPECT_LT(fit->PaddingFraction(0, 0), one_per_sequence / 4);
  // The reported figure is what the sequences hold.
  uint64_t held = 0;
  const uint64_t n = fit->SequencesInEpoch(0, 0);
  for (uint64_t i = 0; i < n; ++i) held += fit->Sequence(i).tokens();
  EXPECT_EQ(held, tokens);
  EXPECT_NEAR(fit->PaddingFraction(0, 0), 1.0 - double(tokens) / double(n * 256), 1e-12);
}

TEST(PlanTokenTest, ABadSpecIsRefusedNamingTheSetting) {
  const std::vector<uint32_t> ok = Lengths(10, 1), empty, zeros(5, 0);
  auto refused = [&](TokenPlanSpec spec, std::vector<TokenSource> sources) {
    auto plan = TokenPlan::Create(std::move(spec), std::move(sources));
    EXPECT_TRUE(absl::IsInvalidArgument(plan.status())) << plan.status();
    return std::string(plan.status().message());
  };
  const TokenSource a{"web", absl::MakeConstSpan(ok)};
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {1}}}, 0), {a}), HasSubstr("sequence length"));
  EXPECT_THAT(refused(Spec(Packing::kBestFit, {{0, {1}}}, 8, 0), {a}), HasSubstr("window"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {}), {a}), HasSubstr("weights"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{3, {1}}}), {a}), HasSubstr("step 0"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {1}}, {0, {1}}}), {a}), HasSubstr("increase"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {1, 1}}}), {a}), HasSubstr("2 weights for 1"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {-1}}}), {a}), HasSubstr("source 'web'"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {0}}}), {a}), HasSubstr("every weight is 0"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {1}}}), {{"code", absl::MakeConstSpan(empty)}}),
              HasSubstr("'code' has no document"));
  EXPECT_THAT(refused(Spec(Packing::kConcat, {{0, {1}}}), {{"code", absl::MakeConstSpan(zeros)}}),
              HasSubstr("0 tokens only"));
  EXPECT_THAT(ParsePacking("first_fit").status().message(), HasSubstr("concat, best_fit"));
}

}  // namespace
}  // namespace croupier
