// The journal written by this format stays readable: src/dispatcher/testdata/journal-v2 is a
// journal of every kind of update, written once by this code (kJournalVersion 2), and committed.
// Every later dispatcher must replay it into the same state (journal-v2.state, committed beside
// it). A change of the journal's encoding or of Apply's meaning fails here, and must either keep
// replaying it or bump kJournalVersion (and add a fixture of the new version).
//
// To write the fixture anew (only with a new journal version): run this test with
// CROUPIER_WRITE_JOURNAL_FIXTURE=1.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using namespace ::croupier::testing;  // NOLINT: the update builders

std::string Fixture(const std::string& name) {
  return std::string(CROUPIER_SOURCE_DIR) + "/src/dispatcher/testdata/" + name;
}

// Every kind of update, in an order the state accepts.
std::vector<journal::Update> Updates() {
  v1::JobInfo resumed = FakeJob("resumed", 12, 3, 6, 3);
  resumed.mutable_spec()->set_start_epoch(1);
  resumed.mutable_spec()->set_start_batch(5);
  resumed.mutable_spec()->set_compression("zstd");
  return {
      JobCreated(FakeJob("train", 8, 2, 4, 2)),
      JobCreated(FakeJob("any", 6, 3, 3, 0, "first_come")),
      JobCreated(FakePythonJob("py", 4, 2, 2, 1)),
      JobCreated(resumed),
      ProducerRegistered(1, "10.0.0.1:7000"),
      ProducerRegistered(2, "10.0.0.2:7000", "py", 0),
      ConsumerRegistered(1, "train", 0),
      ConsumerRegistered(2, "train", 1),
      TaskAssigned(MakeTask(1, "train", 0, 0, 4), 1),
      TaskAssigned(MakeTask(2, "train", 0, 4, 4), 1),
      TaskAssigned(MakeTask(3, "py", 0, 0, 2), 2),
      TaskFinished(1, 1),
      ConsumerAcknowledged(1, 0, 2),
      ConsumerAcknowledged(2, 0, 2),
      TasksDelivered("train", 0, 2),
      ConsumerRemoved(2),
      TaskRemade("train", 0, 0),
      ProducerRemoved(1),
  };
}

std::string Replay(const std::string& path) {
  DispatcherState state;
  auto replay = ReadJournal(*Env::Default(), path,
                            [&](const journal::Update& u, uint64_t) { return state.Apply(u); });
  EXPECT_TRUE(replay.ok()) << replay.status();
  if (replay.ok()) {
    EXPECT_EQ(replay->entries, Updates().size());
    EXPECT_EQ(replay->valid_bytes, replay->file_bytes) << replay->torn;
  }
  return state.DebugString();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(JournalCompatTest, AJournalOfTheCurrentVersionReplaysIntoTheSameState) {
  if (const char* write = std::getenv("CROUPIER_WRITE_JOURNAL_FIXTURE"); write && *write == '1') {
    std::filesystem::remove(Fixture("journal-v2"));
    auto writer = JournalWriter::Open(*Env::Default(), Fixture("journal-v2"), 0, {.sync = false});
    ASSERT_TRUE(writer.ok()) << writer.status();
    DispatcherState state;
    for (const journal::Update& u : Updates()) {
      ASSERT_TRUE(state.Apply(u).ok()) << u.ShortDebugString();
      ASSERT_TRUE((*writer)->Append(u).ok());
    }
    writer->reset();
    std::ofstream(Fixture("journal-v2.state")) << state.DebugString();
  }
  ASSERT_EQ(kJournalVersion, 2) << "a new journal version needs a fixture of its own";
  const std::string expected = ReadText(Fixture("journal-v2.state"));
  ASSERT_FALSE(expected.empty()) << Fixture("journal-v2.state") << " is missing";
  EXPECT_EQ(Replay(Fixture("journal-v2")), expected);
}

// The same updates applied now give the state the fixture holds: the fixture is not stale.
TEST(JournalCompatTest, TheFixtureIsWhatThisCodeWouldWrite) {
  DispatcherState state;
  for (const journal::Update& u : Updates())
    ASSERT_TRUE(state.Apply(u).ok()) << u.ShortDebugString();
  EXPECT_EQ(state.DebugString(), ReadText(Fixture("journal-v2.state")));
}

}  // namespace
}  // namespace croupier
