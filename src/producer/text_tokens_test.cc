#include "src/producer/text_tokens.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Documents of length d + 1 holding d, d, ...; the tokenizer waits for `release` once `entered`.
struct BlockingTokenizer {
  std::atomic<int> calls{0};
  absl::Notification entered, release;
  bool fail = false;
  DocumentTokenizer Function() {
    return [this](uint32_t,
                  absl::Span<const uint64_t> documents) -> absl::StatusOr<TokenizedDocuments> {
      ++calls;
      if (!entered.HasBeenNotified()) entered.Notify();
      release.WaitForNotification();
      if (fail) return absl::DataLossError("a.jsonl line 3: not JSON");
      TokenizedDocuments out;
      for (uint64_t d : documents) {
        out.tokens.insert(out.tokens.end(), d + 1, static_cast<int32_t>(d));
        out.lengths.push_back(d + 1);
      }
      return out;
    };
  }
};

constexpr uint32_t kLengths[] = {1, 2, 3, 4};

// A document that one call is tokenizing is waited for by the others, not tokenized again, and
// they get the same tokens.
TEST(ProducerTextTokensTest, ADocumentBeingTokenizedIsWaitedForNotTokenizedTwice) {
  BlockingTokenizer tokenizer;
  TextTokens text(0, "a.jsonl", kLengths, tokenizer.Function(), 1 << 20);
  absl::StatusOr<std::vector<TextTokens::Document>> first, second;
  std::thread a([&] { first = text.Get({2}); });
  tokenizer.entered.WaitForNotification();
  std::thread b([&] { second = text.Get({1, 2}); });
  absl::SleepFor(absl::Milliseconds(50));  // b has found document 2 pending (or waits for it)
  tokenizer.release.Notify();
  a.join();
  b.join();
  ASSERT_TRUE(first.ok() && second.ok()) << first.status() << second.status();
  EXPECT_EQ((*first)[0], (*second)[1]) << "the same tokens, tokenized once";
  EXPECT_EQ(*(*second)[0], std::vector<int32_t>({1, 1}));
  EXPECT_EQ(tokenizer.calls.load(), 2) << "document 2 once, document 1 by b";
  EXPECT_EQ(text.stats().tokenized, 2u);
  auto again = text.Get({1, 2});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(tokenizer.calls.load(), 2) << "both cached";
}

// A failed call's error reaches the calls that waited for its documents, and the next call
// tokenizes them again.
TEST(ProducerTextTokensTest, AFailedCallsErrorReachesItsWaitersAndTheNextCallTriesAgain) {
  BlockingTokenizer tokenizer;
  tokenizer.fail = true;
  TextTokens text(0, "a.jsonl", kLengths, tokenizer.Function(), 1 << 20);
  absl::StatusOr<std::vector<TextTokens::Document>> first, second;
  std::thread a([&] { first = text.Get({3}); });
  tokenizer.entered.WaitForNotification();
  std::thread b([&] { second = text.Get({3}); });
  absl::SleepFor(absl::Milliseconds(50));
  tokenizer.release.Notify();
  a.join();
  b.join();
  for (const auto* got : {&first, &second}) {
    EXPECT_EQ(got->status().code(), absl::StatusCode::kDataLoss) << got->status();
    EXPECT_THAT(std::string(got->status().message()),
                HasSubstr("text source a.jsonl: a.jsonl line 3: not JSON"));
  }
  tokenizer.fail = false;
  auto retried = text.Get({3});
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ((*retried)[0]->size(), 4u);
}

TEST(ProducerTextTokensTest, TheCacheKeepsAtMostItsBytesAndUnknownDocumentsAreNamed) {
  BlockingTokenizer tokenizer;
  tokenizer.release.Notify();
  // 3 tokens of room: documents 0 (1 token) and 1 (2 tokens) fit; 2 (3 tokens) pushes them out.
  TextTokens text(0, "a.jsonl", kLengths, tokenizer.Function(), 3 * sizeof(int32_t));
  ASSERT_TRUE(text.Get({0, 1}).ok());
  ASSERT_TRUE(text.Get({0, 1}).ok());
  EXPECT_EQ(tokenizer.calls.load(), 1);
  ASSERT_TRUE(text.Get({2}).ok());
  ASSERT_TRUE(text.Get({0}).ok());
  EXPECT_EQ(tokenizer.calls.load(), 3) << "document 0 was pushed out";
  auto unknown = text.Get({9});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("has 4 documents"));
}

}  // namespace
}  // namespace croupier
