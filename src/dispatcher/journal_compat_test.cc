// Journals written by earlier formats stay readable. Each fixture in src/dispatcher/testdata is a
// journal of every kind of update, written once by the code of its version and committed:
//   journal-v2  the settings of a job as text (kJournalVersion 2); journal-v2.state is the state
//               the version-2 dispatcher replayed it into (DebugString, settings as text).
//   journal-v3  the same updates written by this code (kJournalVersion 3, the settings as enums);
//               journal-v3.state is the state they replay into.
// Every later dispatcher must replay both into the same state: a change of the journal's
// encoding or of Apply's meaning fails here, and must either keep replaying them or bump
// kJournalVersion (and add a fixture of the new version).
//
// To write the current version's fixture anew (only with a new journal version): run this test
// with CROUPIER_WRITE_JOURNAL_FIXTURE=1.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/testing.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/journal_upgrade.h"
#include "src/dispatcher/test_util.h"
#include "src/job/job_settings.h"

namespace croupier {
namespace {

using namespace ::croupier::testing;  // NOLINT: the update builders

std::string Fixture(const std::string& name) {
  return std::string(CROUPIER_SOURCE_DIR) + "/src/dispatcher/testdata/" + name;
}

// Every kind of update, in an order the state accepts. journal-v2 was written from this list with
// the settings as text: keep it as it is.
std::vector<journal::Update> Updates() {
  v1::JobInfo resumed = FakeJob("resumed", 12, 3, 6, 3);
  resumed.mutable_spec()->set_start_epoch(1);
  resumed.mutable_spec()->set_start_batch(5);
  resumed.mutable_spec()->set_compression(v1::COMPRESSION_ZSTD);
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

struct Replayed {
  uint32_t version = 0;
  std::string state;
};

Replayed Replay(const std::string& path) {
  DispatcherState state;
  auto replay = ReadJournal(*Env::Default(), path,
                            [&](const journal::Update& u, uint64_t) { return state.Apply(u); });
  EXPECT_TRUE(replay.ok()) << replay.status();
  if (!replay.ok()) return {};
  EXPECT_EQ(replay->entries, Updates().size());
  EXPECT_EQ(replay->valid_bytes, replay->file_bytes) << replay->torn;
  return {replay->version, state.DebugString()};
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string kCurrent = absl::StrCat("journal-v", kJournalVersion);

TEST(JournalCompatTest, AJournalOfTheCurrentVersionReplaysIntoTheSameState) {
  if (const char* write = std::getenv("CROUPIER_WRITE_JOURNAL_FIXTURE"); write && *write == '1') {
    std::filesystem::remove(Fixture(kCurrent));
    auto writer = JournalWriter::Open(*Env::Default(), Fixture(kCurrent), 0, {.sync = false});
    ASSERT_TRUE(writer.ok()) << writer.status();
    DispatcherState state;
    for (const journal::Update& u : Updates()) {
      ASSERT_TRUE(state.Apply(u).ok()) << u.ShortDebugString();
      ASSERT_TRUE((*writer)->Append(u).ok());
    }
    writer->reset();
    std::ofstream(Fixture(kCurrent + ".state")) << state.DebugString();
  }
  ASSERT_EQ(kJournalVersion, 3) << "a new journal version needs a fixture of its own";
  const std::string expected = ReadText(Fixture(kCurrent + ".state"));
  ASSERT_FALSE(expected.empty()) << Fixture(kCurrent + ".state") << " is missing";
  const Replayed replayed = Replay(Fixture(kCurrent));
  EXPECT_EQ(replayed.version, 3u);
  EXPECT_EQ(replayed.state, expected);
}

// A version-2 journal's settings are text; replayed, they are the enums, and the state is the
// one the same updates give in the current version.
TEST(JournalCompatTest, AVersion2JournalReplaysIntoTheSameState) {
  const Replayed replayed = Replay(Fixture("journal-v2"));
  EXPECT_EQ(replayed.version, 2u);
  EXPECT_EQ(replayed.state, ReadText(Fixture(kCurrent + ".state")));
}

// The settings of each job of a state dump ("shuffle: \"global\"" in version 2's, "shuffle:
// SHUFFLE_GLOBAL" now) as text, and the dump without them.
struct Settings {
  std::map<std::string, std::string> text;  // "job 0 shuffle" -> "global"
  std::string rest;
};

Settings SplitSettings(const std::string& dump) {
  static const std::regex kSetting(
      R"re( (shuffle|remainder|mode|source|compression): ("([a-z_0-9]*)"|([A-Z_0-9]+)))re");
  const google::protobuf::Descriptor* spec = v1::JobSpec::descriptor();
  Settings out;
  std::istringstream lines(dump);
  int line_number = 0;
  for (std::string line; std::getline(lines, line); ++line_number) {
    for (std::sregex_iterator it(line.begin(), line.end(), kSetting), end; it != end; ++it) {
      const std::string field = (*it)[1];
      std::string text = (*it)[3];
      if ((*it)[4].matched) {
        const google::protobuf::EnumDescriptor* type = spec->FindFieldByName(field)->enum_type();
        const google::protobuf::EnumValueDescriptor* value = type->FindValueByName((*it)[4]);
        text = value == nullptr ? "?" : SettingText(type, value->number());
      }
      out.text[absl::StrCat("line ", line_number, " ", field)] = text;
    }
    absl::StrAppend(&out.rest, std::regex_replace(line, kSetting, ""), "\n");
  }
  return out;
}

// What the version-2 dispatcher replayed journal-v2 into (journal-v2.state, committed with it)
// is what this one replays it into, setting by setting: the dumps differ only in how a setting
// is written.
TEST(JournalCompatTest, AVersion2JournalReplaysIntoTheStateItsDispatcherHad) {
  const Settings then = SplitSettings(ReadText(Fixture("journal-v2.state")));
  const Settings now = SplitSettings(Replay(Fixture("journal-v2")).state);
  ASSERT_FALSE(then.text.empty());
  // train, any: shuffle, remainder, mode; py: and source; resumed: and compression.
  EXPECT_EQ(then.text.size(), 14u);
  EXPECT_EQ(now.text, then.text);
  EXPECT_EQ(now.rest, then.rest);
}

// The same updates applied now give the state the fixture holds: the fixture is not stale.
TEST(JournalCompatTest, TheFixtureIsWhatThisCodeWouldWrite) {
  DispatcherState state;
  for (const journal::Update& u : Updates())
    ASSERT_TRUE(state.Apply(u).ok()) << u.ShortDebugString();
  EXPECT_EQ(state.DebugString(), ReadText(Fixture(kCurrent + ".state")));
}

// Opening a version-2 journal rewrites it in the current version before anything is appended:
// every entry of a file is in its header's version.
TEST(JournalCompatTest, OpeningAVersion2JournalRewritesItInTheCurrentVersion) {
  ScopedTempDir tmp;
  const std::string path = tmp.Join(kJournalFileName);
  std::filesystem::copy_file(Fixture("journal-v2"), path);
  DispatcherState state;
  auto opened = OpenJournal(*Env::Default(), path,
                            [&](const journal::Update& u, uint64_t) { return state.Apply(u); },
                            {.sync = false});
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->replay.version, 2u);
  EXPECT_EQ(opened->replay.valid_bytes, std::filesystem::file_size(path));
  const journal::Update more = ProducerRegistered(3, "10.0.0.3:7000");
  ASSERT_TRUE(state.Apply(more).ok());
  ASSERT_TRUE(opened->writer->Append(more).ok());
  opened->writer.reset();

  DispatcherState again;
  auto replay = ReadJournal(*Env::Default(), path,
                            [&](const journal::Update& u, uint64_t) { return again.Apply(u); });
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->version, static_cast<uint32_t>(kJournalVersion));
  EXPECT_EQ(replay->entries, Updates().size() + 1);
  EXPECT_EQ(again.DebugString(), state.DebugString());
}

// A version-2 setting that names no value is corruption of that journal, named.
TEST(JournalCompatTest, AVersion2SettingThatNamesNoValueIsDataLoss) {
  journal::V2Update v2;
  v2.mutable_job_created()->mutable_job()->mutable_spec()->set_shuffle("sideways");
  std::string payload;
  ASSERT_TRUE(JobCreated(FakeJob("train", 8, 2, 4)).SerializeToString(&payload));
  std::string settings;
  ASSERT_TRUE(v2.SerializeToString(&settings));
  // Two serialized messages concatenated parse as their merge: the job, with the text setting.
  absl::StatusOr<journal::Update> parsed = ParseJournalEntry(2, payload + settings);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << parsed.status();
  EXPECT_EQ(parsed.status().message(),
            "job 'train' of a version 2 journal: unknown shuffle mode 'sideways'; expected one "
            "of none, global, blocks");
  // The same payload in version 3 ignores the field it no longer has.
  parsed = ParseJournalEntry(3, payload + settings);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->job_created().job().spec().shuffle(), v1::SHUFFLE_GLOBAL);
}

}  // namespace
}  // namespace croupier
