#include "src/producer/token_maker.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/common/testing.h"
#include "src/dispatcher/job_builder.h"
#include "src/dispatcher/job_spec.h"
#include "src/testing/forwarding_env.h"
#include "src/testing/token_data.h"

namespace croupier {
namespace {

using ::croupier::testing::ScopedTempDir;
using ::croupier::testing::TokenJobSpec;
using ::croupier::testing::TokenPlace;
using ::croupier::testing::WriteTokenSource;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The JobInfo the dispatcher would make of `spec`.
absl::StatusOr<v1::JobInfo> Build(const v1::JobSpec& spec) {
  absl::StatusOr<v1::JobSpec> normal = NormalizeJobSpec(spec);
  if (!normal.ok()) return normal.status();
  IndexCache cache;
  return BuildJobInfo(*normal, cache, *Env::Default(), /*rounds_per_task=*/0);
}

std::vector<int32_t> Row(const Batch& batch, const char* column, uint64_t record) {
  const ColumnView* view = batch.view().Find(column);
  const uint64_t length = view->dims[0];
  auto values = view->values_as<int32_t>().subspan(record * length, length);
  return {values.begin(), values.end()};
}

TEST(ProducerTokenMakerTest, ConcatCutsTheStreamEveryLTokensWithTheNextTokenAsLabel) {
  ScopedTempDir dir;
  const std::string prefix = dir.Join("one");
  ASSERT_TRUE(WriteIndexedDataset(prefix, TokenDType::kInt32, {{10, 11, 12, 13, 14, 15, 16}}).ok());
  auto info = Build(TokenJobSpec("lm", {prefix}, /*L=*/4, /*B=*/1, /*steps=*/2, /*N=*/1));
  ASSERT_TRUE(info.ok()) << info.status();
  auto maker = TokenBatchMaker::Create(*info);
  ASSERT_TRUE(maker.ok()) << maker.status();
  auto first = (*maker)->Make(0, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(Row(*first, "input_ids", 0), ElementsAre(10, 11, 12, 13));
  EXPECT_THAT(Row(*first, "labels", 0), ElementsAre(11, 12, 13, 14));
  EXPECT_THAT(Row(*first, "position_ids", 0), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Row(*first, "segment_ids", 0), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(Row(*first, "loss_mask", 0), ElementsAre(1, 1, 1, 1));
  // The end of the source epoch: 3 tokens, padded; the last has no next token.
  auto second = (*maker)->Make(0, 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(Row(*second, "input_ids", 0), ElementsAre(14, 15, 16, -1));
  EXPECT_THAT(Row(*second, "labels", 0), ElementsAre(15, 16, -100, -100));
  EXPECT_THAT(Row(*second, "position_ids", 0), ElementsAre(4, 5, 6, 0));
  EXPECT_THAT(Row(*second, "segment_ids", 0), ElementsAre(1, 1, 1, 0));
  EXPECT_THAT(Row(*second, "loss_mask", 0), ElementsAre(1, 1, 0, 0));
}

TEST(ProducerTokenMakerTest, BestFitLabelsASplitDocumentsLastInputWithTheTokenInTheNextPiece) {
  ScopedTempDir dir;
  const std::string prefix = dir.Join("one");
  // Document 0 is longer than L = 4: pieces [1 2 3 4] and [5 6]; document 1 fits beside [5 6].
  ASSERT_TRUE(WriteIndexedDataset(prefix, TokenDType::kUInt16, {{1, 2, 3, 4, 5, 6}, {7, 8}}).ok());
  auto info = Build(TokenJobSpec("lm", {prefix}, 4, 2, 1, 1, v1::PACKING_BEST_FIT));
  ASSERT_TRUE(info.ok()) << info.status();
  auto maker = TokenBatchMaker::Create(*info);
  ASSERT_TRUE(maker.ok()) << maker.status();
  auto batch = (*maker)->Make(0, 0);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->num_records(), 2u);
  // Which bin comes first depends on the permutation: find the one with the first piece.
  const uint64_t full = Row(*batch, "input_ids", 0)[0] == 1 ? 0 : 1;
  EXPECT_THAT(Row(*batch, "input_ids", full), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(Row(*batch, "labels", full), ElementsAre(2, 3, 4, 5));
  EXPECT_THAT(Row(*batch, "loss_mask", full), ElementsAre(1, 1, 1, 1));
  const uint64_t shared = 1 - full;
  std::vector<int32_t> inputs = Row(*batch, "input_ids", shared);
  std::vector<int32_t> labels = Row(*batch, "labels", shared);
  std::vector<int32_t> positions = Row(*batch, "position_ids", shared);
  std::vector<int32_t> segments = Row(*batch, "segment_ids", shared);
  std::map<int32_t, std::pair<int32_t, int32_t>> by_input;  // input -> (label, position)
  for (int j = 0; j < 4; ++j) by_input[inputs[j]] = {labels[j], positions[j]};
  EXPECT_EQ(by_input[5], std::make_pair(6, 4));
  EXPECT_EQ(by_input[6], std::make_pair(-100, 5));
  EXPECT_EQ(by_input[7], std::make_pair(8, 0));
  EXPECT_EQ(by_input[8], std::make_pair(-100, 1));
  EXPECT_EQ(std::set<int32_t>(segments.begin(), segments.end()), (std::set<int32_t>{1, 2}));
}

// Over whole source epochs, of each packing, of two sources of either dtype mixed: every batch
// holds what the documents say (CheckTokenBatch), and every token of the first source epoch of
// each source is an input exactly once.
TEST(ProducerTokenMakerTest, EveryTokenOfASourceEpochIsAnInputOnceAndEachColumnSaysWhereItIsFrom) {
  ScopedTempDir dir;
  const std::vector<std::string> prefixes = {
      WriteTokenSource(dir.Join("a"), 0, 120, TokenDType::kInt32),
      WriteTokenSource(dir.Join("b"), 1, 80, TokenDType::kUInt16)};
  for (v1::Packing packing : {v1::PACKING_CONCAT, v1::PACKING_BEST_FIT}) {
    SCOPED_TRACE(v1::Packing_Name(packing));
    v1::JobSpec spec = TokenJobSpec("lm", prefixes, 64, 8, 60, 2, packing);
    spec.mutable_tokens()->set_packing_window(16);
    auto info = Build(spec);
    ASSERT_TRUE(info.ok()) << info.status();
    auto maker = TokenBatchMaker::Create(*info);
    ASSERT_TRUE(maker.ok()) << maker.status();
    const TokenPlan& plan = (*maker)->plan();
    std::vector<std::vector<TokenPlace>> places;  // by global sequence
    for (uint64_t b = 0; b < info->batches_per_epoch(); ++b) {
      auto batch = (*maker)->Make(0, b);
      ASSERT_TRUE(batch.ok()) << batch.status();
      testing::CheckTokenBatch(batch->view(), packing == v1::PACKING_BEST_FIT, &places);
      ASSERT_FALSE(HasFatalFailure());
    }
    // The job's 480 sequences reach past each source's first source epoch.
    for (uint32_t k = 0; k < 2; ++k) {
      ASSERT_GT(plan.CountsBefore(info->num_records())[k], plan.SequencesInEpoch(k, 0));
    }
    // The inputs of the sequences of each source's first source epoch (the batch's records are
    // global sequences in order: batch b of B/N holds sequences b*B/N onwards).
    ASSERT_EQ(places.size(), info->num_records());
    std::map<TokenPlace, int> seen;
    for (uint64_t i = 0; i < places.size(); ++i) {
      if (plan.Sequence(i).source_epoch != 0) continue;
      for (const TokenPlace& p : places[i]) ++seen[p];
    }
    uint64_t expected = 0;
    for (uint32_t k = 0; k < 2; ++k) {
      const uint64_t documents = k == 0 ? 120 : 80;
      for (uint64_t d = 0; d < documents; ++d) {
        for (uint32_t p = 0; p < testing::DocumentLength(k, d); ++p) {
          ASSERT_EQ(seen[(TokenPlace{k, d, p})], 1) << k << " " << d << " " << p;
          ++expected;
        }
      }
    }
    EXPECT_EQ(seen.size(), expected);
    // The padding the job reports for each source (from lengths, at creation) is what the
    // batches hold over that source's first source epoch.
    std::vector<uint64_t> inputs(2), sequences(2);
    for (uint64_t i = 0; i < places.size(); ++i) {
      const SequencePlan sequence = plan.Sequence(i);
      if (sequence.source_epoch != 0) continue;
      inputs[sequence.source] += places[i].size();
      ++sequences[sequence.source];
    }
    for (uint32_t k = 0; k < 2; ++k) {
      EXPECT_EQ(sequences[k], plan.SequencesInEpoch(k, 0));
      EXPECT_NEAR(info->token_sources(k).padding_fraction(),
                  1.0 - static_cast<double>(inputs[k]) / (64.0 * sequences[k]), 1e-12)
          << "source " << k;
    }
  }
}

TEST(ProducerTokenMakerTest, TheSameBatchIsTheSameBytesFromAnyMakerInAnyOrder) {
  ScopedTempDir dir;
  const std::vector<std::string> prefixes = {WriteTokenSource(dir.Join("a"), 0, 200),
                                             WriteTokenSource(dir.Join("b"), 1, 150)};
  v1::JobSpec spec = TokenJobSpec("lm", prefixes, 32, 12, 20, 3, v1::PACKING_BEST_FIT);
  auto info = Build(spec);
  ASSERT_TRUE(info.ok()) << info.status();
  auto one = TokenBatchMaker::Create(*info);
  auto two = TokenBatchMaker::Create(*info);
  ASSERT_TRUE(one.ok() && two.ok());
  const uint64_t batches = info->batches_per_epoch();
  std::vector<uint64_t> forward, backward(batches);
  for (uint64_t b = 0; b < batches; ++b) forward.push_back((*one)->Make(0, b)->ContentHash());
  for (uint64_t b = batches; b-- > 0;) backward[b] = (*two)->Make(0, b)->ContentHash();
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(std::set<uint64_t>(forward.begin(), forward.end()).size(), batches);
}

// The default Env, whose files read for random access say they are remote (as an object
// store's), counting the reads of each kind.
class RemoteTokensEnv final : public croupier::testing::ForwardingEnv {
 public:
  class File final : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> inner, RemoteTokensEnv* env)
        : inner_(std::move(inner)), env_(env) {}
    absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* dst) const override {
      ++env_->reads;
      return inner_->Read(offset, n, dst);
    }
    absl::Status ReadRanges(absl::Span<Range> ranges) const override {
      ++env_->range_calls;
      for (Range& r : ranges) {
        absl::StatusOr<size_t> got = inner_->Read(r.offset, r.length, r.dst);
        if (!got.ok()) return got.status();
        r.got = *got;
      }
      return absl::OkStatus();
    }
    const std::string& name() const override { return inner_->name(); }
    absl::StatusOr<uint64_t> Size() const override { return inner_->Size(); }
    bool remote() const override { return true; }

   private:
    std::unique_ptr<RandomAccessFile> inner_;
    RemoteTokensEnv* env_;
  };
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRandomRead(
      const std::string& p) override {
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> inner, base()->OpenForRandomRead(p));
    return std::unique_ptr<RandomAccessFile>(new File(std::move(inner), this));
  }

  std::atomic<int> reads{0};
  std::atomic<int> range_calls{0};
};

// Sources in an object store: a batch's tokens of each source are fetched with one ReadRanges
// (which the store's file merges into few requests run at once), never a request per piece; the
// batches are the same bytes as read in place, for both packings and both token types.
TEST(ProducerTokenMakerTest, RemoteSourcesAreReadOnceABatchAndMakeTheSameBytes) {
  ScopedTempDir dir;
  const std::vector<std::string> prefixes = {
      WriteTokenSource(dir.Join("a"), 0, 200, TokenDType::kUInt16),
      WriteTokenSource(dir.Join("b"), 1, 150, TokenDType::kInt32)};
  for (v1::Packing packing : {v1::PACKING_CONCAT, v1::PACKING_BEST_FIT}) {
    v1::JobSpec spec = TokenJobSpec("lm", prefixes, 32, 12, 20, 3, packing);
    auto info = Build(spec);
    ASSERT_TRUE(info.ok()) << info.status();
    RemoteTokensEnv remote;
    auto local = TokenBatchMaker::Create(*info);
    auto fetched = TokenBatchMaker::Create(*info, &remote);
    ASSERT_TRUE(local.ok() && fetched.ok());
    for (uint64_t b = 0; b < info->batches_per_epoch(); ++b) {
      const int calls = remote.range_calls.load();
      auto want = (*local)->Make(0, b);
      auto got = (*fetched)->Make(0, b);
      ASSERT_TRUE(want.ok() && got.ok()) << got.status();
      EXPECT_EQ(got->ContentHash(), want->ContentHash()) << "batch " << b;
      EXPECT_GE(remote.range_calls.load() - calls, 1);
      EXPECT_LE(remote.range_calls.load() - calls, 2) << "one call a source";
    }
    EXPECT_EQ(remote.reads.load(), 0) << "no read of a piece alone";
  }
}

// A resumed job that adds a weight change at step 20 (1:1, then 1:4): the steps before it are the
// first job's, bit for bit; two makers of the new job agree; and across the change every token
// of each source's first source epoch is an input exactly once (the sources' counters carry
// over: nothing lost or repeated).
TEST(ProducerTokenMakerTest, AWeightChangeAddedAtAResumeKeepsTheStepsBeforeItAndRepeatsNothing) {
  ScopedTempDir dir;
  const std::vector<std::string> prefixes = {WriteTokenSource(dir.Join("a"), 0, 120),
                                             WriteTokenSource(dir.Join("b"), 1, 80)};
  constexpr uint64_t kChange = 20, kBatch = 8;
  v1::JobSpec first = TokenJobSpec("lm", prefixes, 64, kBatch, 60, 2, v1::PACKING_BEST_FIT);
  v1::JobSpec resumed = first;
  resumed.set_name("lm-resumed");
  resumed.set_start_batch(kChange * 2);
  for (auto [step, a, b] : {std::tuple{uint64_t{0}, 1.0, 1.0}, std::tuple{kChange, 1.0, 4.0}}) {
    v1::WeightChange* change = resumed.mutable_tokens()->add_weights();
    change->set_first_step(step);
    change->add_weights(a);
    change->add_weights(b);
  }
  auto before = Build(first);
  auto after = Build(resumed);
  ASSERT_TRUE(before.ok() && after.ok()) << before.status() << after.status();
  auto old_maker = TokenBatchMaker::Create(*before);
  auto new_maker = TokenBatchMaker::Create(*after);
  auto again = TokenBatchMaker::Create(*after);
  ASSERT_TRUE(old_maker.ok() && new_maker.ok() && again.ok());
  // Batch g of a 2-rank job holds sequences 4g to 4g + 3: step s is batches 2s and 2s + 1.
  for (uint64_t b = 0; b < 2 * kChange; ++b) {
    EXPECT_EQ((*old_maker)->Make(0, b)->ContentHash(), (*new_maker)->Make(0, b)->ContentHash())
        << "batch " << b;
  }
  std::vector<std::vector<TokenPlace>> places;
  for (uint64_t b = 0; b < after->batches_per_epoch(); ++b) {
    auto made = b < 2 * kChange ? (*old_maker)->Make(0, b) : (*new_maker)->Make(0, b);
    ASSERT_TRUE(made.ok()) << made.status();
    if (b >= 2 * kChange) {
      EXPECT_EQ(made->ContentHash(), (*again)->Make(0, b)->ContentHash());
    }
    testing::CheckTokenBatch(made->view(), /*best_fit=*/true, &places);
  }
  const TokenPlan& plan = (*new_maker)->plan();
  EXPECT_NE(plan.CountsBefore(after->num_records()),
            (*old_maker)->plan().CountsBefore(after->num_records()))
      << "the change moved the mixture";
  std::map<TokenPlace, int> seen;
  for (uint64_t i = 0; i < places.size(); ++i) {
    if (plan.Sequence(i).source_epoch != 0) continue;
    for (const TokenPlace& p : places[i]) ++seen[p];
  }
  for (uint32_t k = 0; k < 2; ++k) {
    ASSERT_GT(plan.CountsBefore(after->num_records())[k], plan.SequencesInEpoch(k, 0));
    for (uint64_t d = 0; d < (k == 0 ? 120u : 80u); ++d) {
      for (uint32_t p = 0; p < testing::DocumentLength(k, d); ++p) {
        ASSERT_EQ(seen[(TokenPlace{k, d, p})], 1) << k << " " << d << " " << p;
      }
    }
  }
}

TEST(ProducerTokenMakerTest, ASourceRewrittenSinceTheJobWasCreatedIsRefusedNamingIt) {
  ScopedTempDir dir;
  const std::string prefix = WriteTokenSource(dir.Join("a"), 0, 50);
  auto info = Build(TokenJobSpec("lm", {prefix}, 16, 4, 5, 2));
  ASSERT_TRUE(info.ok()) << info.status();
  WriteTokenSource(prefix, 0, 51);
  auto maker = TokenBatchMaker::Create(*info);
  EXPECT_EQ(maker.status().code(), absl::StatusCode::kFailedPrecondition) << maker.status();
  EXPECT_THAT(std::string(maker.status().message()),
              HasSubstr("token source " + prefix + " changed since the job was created"));
  ASSERT_TRUE(::unlink((prefix + ".bin").c_str()) == 0);
  maker = TokenBatchMaker::Create(*info);
  EXPECT_EQ(maker.status().code(), absl::StatusCode::kNotFound) << maker.status();
  EXPECT_THAT(std::string(maker.status().message()), HasSubstr(prefix + ".bin"));
}

// A text source (TokenSpec.text) of the documents of WriteTokenSource(source 0): its lengths
// index at `lengths` (no .bin), a text file and a tokenizer file that only need to exist (the
// tokenizer below knows the documents), as source `k` of `spec`.
void AddTextSource(ScopedTempDir& dir, v1::JobSpec& spec, uint32_t k, uint64_t documents) {
  const std::string lengths = WriteTokenSource(dir.Join("lengths"), 0, documents);
  ASSERT_EQ(::unlink((lengths + ".bin").c_str()), 0);
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(dir.Join("corpus.jsonl"), "{}\n").ok());
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(dir.Join("tokenizer.json"), "{}").ok());
  v1::TokenSpec& tokens = *spec.mutable_tokens();
  if (static_cast<int>(k) >= tokens.sources_size()) tokens.add_sources();
  tokens.set_sources(static_cast<int>(k), lengths);
  v1::TextSource& text = *tokens.add_text();
  text.set_source(k);
  text.add_files(dir.Join("corpus.jsonl"));
  text.set_tokenizer(dir.Join("tokenizer.json"));
  text.set_eod_id(-1);
}

// Tokenizes documents of source 0 as WriteTokenSource wrote them, counting the calls; `extra`
// tokens more for document `wrong` (a text that changed).
struct FakeTokenizer {
  std::atomic<int> calls{0};
  std::atomic<int> documents{0};
  uint64_t wrong = ~uint64_t{0};
  absl::StatusOr<TokenizedDocuments> operator()(uint32_t source, absl::Span<const uint64_t> docs) {
    ++calls;
    documents += static_cast<int>(docs.size());
    TokenizedDocuments out;
    for (uint64_t d : docs) {
      uint32_t length = testing::DocumentLength(0, d) + (d == wrong ? 1 : 0);
      for (uint32_t p = 0; p < length; ++p) out.tokens.push_back(testing::TokenAt(0, d, p));
      out.lengths.push_back(length);
    }
    EXPECT_EQ(source, 0u);
    return out;
  }
  DocumentTokenizer Function() {
    return
        [this](uint32_t source, absl::Span<const uint64_t> docs) { return (*this)(source, docs); };
  }
};

// What a batch holds is a function of the plan: a text source tokenized by the producer gives
// the same bytes as the indexed dataset of the same documents, for both packings, and a
// document cut over several sequences is tokenized once while it is cached.
TEST(ProducerTokenMakerTest, ATextSourceTokenizedByTheProducerIsTheIndexedDatasetOfItsDocuments) {
  for (v1::Packing packing : {v1::PACKING_CONCAT, v1::PACKING_BEST_FIT}) {
    ScopedTempDir dir;
    const std::string indexed = WriteTokenSource(dir.Join("indexed"), 0, 150);
    auto from_index = Build(TokenJobSpec("lm", {indexed}, 32, 6, 25, 3, packing));
    v1::JobSpec text_spec = TokenJobSpec("lm", {}, 32, 6, 25, 3, packing);
    AddTextSource(dir, text_spec, 0, 150);
    auto from_text = Build(text_spec);
    ASSERT_TRUE(from_index.ok() && from_text.ok()) << from_index.status() << from_text.status();
    EXPECT_EQ(from_text->token_sources(0).dtype(), "text");
    EXPECT_EQ(from_text->token_sources(0).bin_bytes(), 0u);
    EXPECT_EQ(from_text->token_sources(0).text_bytes_size(), 1);
    auto index_maker = TokenBatchMaker::Create(*from_index);
    FakeTokenizer tokenizer;
    auto text_maker = TokenBatchMaker::Create(*from_text, nullptr, tokenizer.Function());
    ASSERT_TRUE(index_maker.ok() && text_maker.ok()) << text_maker.status();
    for (uint64_t b = 0; b < from_index->batches_per_epoch(); ++b) {
      auto a = (*index_maker)->Make(0, b);
      auto t = (*text_maker)->Make(0, b);
      ASSERT_TRUE(a.ok() && t.ok()) << t.status();
      EXPECT_EQ(a->ContentHash(), t->ContentHash()) << "batch " << b;
    }
    const TextTokens::Stats stats = (*text_maker)->text(0)->stats();
    EXPECT_EQ(stats.tokenized, static_cast<uint64_t>(tokenizer.documents.load()));
    EXPECT_LE(stats.tokenized, 150u) << "each document tokenized once (all stay cached)";
    EXPECT_EQ(stats.tokenizer_calls, static_cast<uint64_t>(tokenizer.calls.load()));
    EXPECT_LE(stats.tokenizer_calls, from_index->batches_per_epoch()) << "one call a batch";
  }
}

TEST(ProducerTokenMakerTest, ATextSourceNeedsATokenizerAndItsDocumentsTheirLengths) {
  ScopedTempDir dir;
  v1::JobSpec spec = TokenJobSpec("lm", {}, 16, 4, 60, 2);  // past a source epoch
  AddTextSource(dir, spec, 0, 60);
  auto info = Build(spec);
  ASSERT_TRUE(info.ok()) << info.status();
  // A producer of every job (croupier producer) has no tokenizer.
  auto without = TokenBatchMaker::Create(*info);
  EXPECT_EQ(without.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(without.status().message()),
              HasSubstr("source 0 (" + dir.Join("corpus.jsonl") + ") is text"));
  // A document whose text now tokenizes to another length fails its batch, naming it.
  FakeTokenizer tokenizer;
  auto maker = TokenBatchMaker::Create(*info, nullptr, tokenizer.Function(), /*cache=*/0);
  ASSERT_TRUE(maker.ok()) << maker.status();
  tokenizer.wrong = 7;
  bool failed = false;
  for (uint64_t b = 0; b < info->batches_per_epoch() && !failed; ++b) {
    auto made = (*maker)->Make(0, b);
    if (made.ok()) continue;
    failed = true;
    EXPECT_EQ(made.status().code(), absl::StatusCode::kDataLoss) << made.status();
    EXPECT_THAT(
        std::string(made.status().message()),
        HasSubstr("document 7 tokenizes to " + std::to_string(testing::DocumentLength(0, 7) + 1) +
                  " tokens, not " + std::to_string(testing::DocumentLength(0, 7))));
    EXPECT_THAT(std::string(made.status().message()), HasSubstr(dir.Join("corpus.jsonl")));
  }
  EXPECT_TRUE(failed) << "the batch with document 7 failed";
  // A tokenizer file changed since the job was created is refused before anything is made.
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(dir.Join("tokenizer.json"), "{ }").ok());
  auto changed = TokenBatchMaker::Create(*info, nullptr, tokenizer.Function());
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(changed.status().message()),
              HasSubstr("the tokenizer " + dir.Join("tokenizer.json") + " has CRC-32C"));
}

}  // namespace
}  // namespace croupier
