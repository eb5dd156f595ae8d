#include "tools/command_line.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/flags.h"

namespace croupier::cli {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

CommandLine::Parsed Parse(const std::vector<std::string>& args) {
  CommandLine command_line;
  return command_line.Parse(args);
}

// Every command that parses its flags here, as its path ("job create"): all but produce and
// tokenize, whose flags are the Python package's.
std::vector<std::string> Commands() {
  CommandLine command_line;
  std::vector<std::string> paths;
  for (const CLI::App* app : command_line.root().get_subcommands({})) {
    if (app->get_name() == "produce" || app->get_name() == "tokenize") continue;
    const std::vector<const CLI::App*> subs = app->get_subcommands({});
    if (subs.empty()) paths.push_back(app->get_name());
    for (const CLI::App* sub : subs)
      paths.push_back(absl::StrCat(app->get_name(), " ", sub->get_name()));
  }
  return paths;
}

std::vector<std::string> Words(const std::string& path) { return absl::StrSplit(path, ' '); }

const CLI::App* Find(const CommandLine& command_line, const std::string& path) {
  const CLI::App* app = &command_line.root();
  for (const std::string& word : Words(path)) app = app->get_subcommand(word);
  return app;
}

// The line of `help` that starts with the flag's names.
std::string LineOf(const std::string& help, const std::string& start) {
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::StartsWith(line, absl::StrCat("  ", start, " "))) return std::string(line);
  }
  return "";
}

TEST(CommandLineTest, EveryCommandIsHere) {
  EXPECT_THAT(Commands(),
              ::testing::UnorderedElementsAre("dispatcher", "producer", "job create", "job show",
                                              "job list", "job describe", "job delete", "status",
                                              "consume", "inspect", "index", "plan", "synth"));
}

// -h and --help on every command: exit 0, and a line per flag naming its value, its help and its
// default (or that it is required).
TEST(CommandLineTest, HelpListsEveryFlagOnALineWithItsDefault) {
  for (const std::string& path : Commands()) {
    SCOPED_TRACE(path);
    for (const char* help_flag : {"-h", "--help"}) {
      std::vector<std::string> args = Words(path);
      args.push_back(help_flag);
      CommandLine::Parsed parsed = Parse(args);
      EXPECT_EQ(parsed.exit_code, 0);
      EXPECT_FALSE(parsed.run);
      EXPECT_THAT(parsed.err, IsEmpty());
      EXPECT_THAT(parsed.out, StartsWith(absl::StrCat("usage: croupier ", path)));
      CommandLine command_line;
      int flags = 0;
      for (const CLI::Option* opt : Find(command_line, path)->get_options()) {
        if (opt->get_group().empty() || opt->get_positional()) continue;
        ++flags;
        const std::string name = opt->get_lnames().empty() ? "" : "--" + opt->get_lnames().back();
        const std::string line =
            LineOf(parsed.out, opt->get_snames().empty() ? name : "-h, --help");
        ASSERT_THAT(line, Not(IsEmpty())) << name << " has no line of its own in\n" << parsed.out;
        EXPECT_THAT(line, HasSubstr(opt->get_description()));
        if (opt->get_items_expected_max() > 0) {
          EXPECT_THAT(line, HasSubstr(absl::StrCat(name, " ", opt->get_option_text())));
        }
        if (opt->get_required()) {
          EXPECT_THAT(line, EndsWith("(required)"));
        } else if (opt->get_items_expected_max() > 0 && !opt->get_default_str().empty()) {
          EXPECT_THAT(line, EndsWith(absl::StrCat("(default: ", opt->get_default_str(), ")")));
        }
      }
      EXPECT_GE(flags, 3);  // --help, --log-level and the command's own
    }
  }
}

TEST(CommandLineTest, HelpShowsTheDefaultsTheCommandsUse) {
  const std::string dispatcher = Parse({"dispatcher", "-h"}).out;
  EXPECT_THAT(LineOf(dispatcher, "--port P"), EndsWith("(default: 5050)"));
  EXPECT_THAT(LineOf(dispatcher, "--work-dir DIR"), EndsWith("(required)"));
  EXPECT_THAT(LineOf(dispatcher, "--bind ADDR"), EndsWith("(default: 127.0.0.1)"));
  EXPECT_THAT(LineOf(dispatcher, "--job-retention DURATION"), EndsWith("(default: 0)"));
  EXPECT_THAT(dispatcher, StartsWith("usage: croupier dispatcher --work-dir DIR [flags]\n"));
  const std::string consume = Parse({"consume", "-h"}).out;
  EXPECT_THAT(LineOf(consume, "--rank R"), EndsWith("(required)"));
  EXPECT_THAT(LineOf(consume, "--world N"), EndsWith("(required)"));
  EXPECT_THAT(LineOf(consume, "--epochs E"), EndsWith("(default: 1)"));
  EXPECT_THAT(LineOf(Parse({"producer", "-h"}).out, "--buffer-bytes B"),
              EndsWith("(default: 268435456)"));
  EXPECT_THAT(LineOf(Parse({"plan", "-h"}).out, "--shuffle none|global|blocks"),
              EndsWith("(default: global)"));
  EXPECT_THAT(LineOf(Parse({"job", "create", "-h"}).out, "--timeout-ms MS"),
              EndsWith("(default: 30000)"));
  EXPECT_THAT(LineOf(Parse({"status", "-h"}).out, "--timeout-ms MS"), EndsWith("(default: 10000)"));
  // The tests' fault injection is not a user's flag.
  EXPECT_THAT(Parse({"producer", "-h"}).out, Not(HasSubstr("--test-delay-ms")));
}

// A parse error: exit code 2, nothing to run, and one line naming the command and the cause.
void ExpectError(const std::vector<std::string>& args, const std::string& cause) {
  SCOPED_TRACE(absl::StrJoin(args, " "));
  CommandLine::Parsed parsed = Parse(args);
  EXPECT_EQ(parsed.exit_code, 2);
  EXPECT_FALSE(parsed.run);
  EXPECT_THAT(parsed.out, IsEmpty());
  EXPECT_THAT(parsed.err, AllOf(StartsWith("croupier"), HasSubstr(cause), EndsWith("\n")));
  EXPECT_EQ(std::count(parsed.err.begin(), parsed.err.end(), '\n'), 1) << parsed.err;
}

TEST(CommandLineTest, AMissingRequiredFlagIsNamed) {
  ExpectError({"dispatcher"}, "croupier dispatcher: --work-dir is required");
  ExpectError({"dispatcher", "--port", "0"}, "--work-dir is required");
  ExpectError({"producer"}, "croupier producer: --dispatcher is required");
  ExpectError({"consume", "--dispatcher", "h:1", "--job", "j", "--world", "2"},
              "--rank is required");
  ExpectError({"consume", "--dispatcher", "h:1", "--job", "j", "--rank", "0"},
              "--world is required");
  ExpectError({"consume", "--rank", "0", "--world", "1", "--job", "j"}, "--dispatcher is required");
  ExpectError({"plan", "--records", "100", "--batch-size", "4"}, "--consumers is required");
  ExpectError({"plan", "--records", "100", "--consumers", "4"}, "--batch-size is required");
  ExpectError({"plan", "--consumers", "4", "--batch-size", "4"},
              "croupier plan: --records or --files is required");
  ExpectError({"synth"}, "croupier synth: --out is required");
  ExpectError({"job", "create", "--dispatcher", "h:1"}, "croupier job create: --name is required");
  ExpectError({"job", "show", "--name", "x"}, "--dispatcher is required");
  ExpectError({"job", "list"}, "croupier job list: --dispatcher is required");
  ExpectError({"job", "describe", "--dispatcher", "h:1"},
              "croupier job describe: the job's name (NAME or --name NAME) is required");
  ExpectError({"job", "delete", "--dispatcher", "h:1"}, "(NAME or --name NAME) is required");
  ExpectError({"status"}, "croupier status: HOST:PORT is required");
  ExpectError({"inspect"}, "FILE is required");
  ExpectError({"index"}, "FILES... is required");
}

TEST(CommandLineTest, UnknownFlagsAreRefusedOnEveryCommand) {
  for (const std::string& path : Commands()) {
    std::vector<std::string> args = Words(path);
    args.push_back("--bogus");
    ExpectError(args, "--bogus");
  }
  ExpectError({"--bogus"}, "croupier: ");
}

TEST(CommandLineTest, BadValuesAreNamed) {
  ExpectError({"dispatcher", "--work-dir", "d", "--port", "70000"}, "--port");
  ExpectError({"dispatcher", "--work-dir", "d", "--port", "x"}, "--port");
  ExpectError({"dispatcher", "--work-dir", "d", "--port"}, "--port");
  ExpectError({"consume", "--dispatcher", "h:1", "--job", "j", "--rank", "0", "--world", "0"},
              "--world");
  ExpectError({"producer", "--dispatcher", "h:1", "--shm", "maybe"}, "--shm");
  ExpectError({"producer", "--dispatcher", "h:1", "--buffer-bytes", "0"}, "--buffer-bytes");
  ExpectError({"dispatcher", "--work-dir", "d", "--log-level", "loud"},
              "croupier dispatcher: --log-level takes debug, info, warning or error, not 'loud'");
  ExpectError({"plan", "--records", "1", "--files", "a", "--batch-size", "1", "--consumers", "1"},
              "excludes");
  ExpectError({"job", "describe", "a", "--name", "b", "--dispatcher", "h:1"}, "excludes");
  ExpectError({"status", "h:1", "5"}, "SECONDS requires --watch");
  ExpectError({"status", "h:1", "--watch", "0"}, "seconds");
}

TEST(CommandLineTest, AWellFormedCommandIsRunnable) {
  struct Case {
    std::vector<std::string> args;
    std::string command;
  };
  for (const Case& c : std::vector<Case>{
           {{"dispatcher", "--work-dir=d", "--port", "0", "--log-level", "debug"}, "dispatcher"},
           {{"synth", "--out", "d", "--log-level=warn"}, "synth"},
           {{"consume", "--dispatcher", "h:1", "--job", "j", "--rank", "1", "--world", "2",
             "--no-resume", "--epochs", "0"},
            "consume"},
           {{"job", "describe", "train", "--dispatcher", "h:1", "--files"}, "job describe"},
           {{"job", "delete", "--name", "train", "--dispatcher", "h:1", "--force"}, "job delete"},
           {{"status", "h:1", "--watch", "0.3"}, "status"},
           {{"index", "a.tfrecord", "--quiet", "b.tfrecord"}, "index"},
           {{"plan", "--records", "100", "--batch-size", "4", "--consumers", "2"}, "plan"},
           // A flag given twice: the last counts, as a script adding to a default expects.
           {{"producer", "--dispatcher", "h:1", "--port", "1", "--port", "2"}, "producer"},
       }) {
    SCOPED_TRACE(absl::StrJoin(c.args, " "));
    CommandLine::Parsed parsed = Parse(c.args);
    EXPECT_EQ(parsed.exit_code, 0) << parsed.err;
    EXPECT_TRUE(parsed.run);
    EXPECT_EQ(parsed.command, c.command);
    EXPECT_THAT(parsed.out + parsed.err, IsEmpty());
  }
}

TEST(CommandLineTest, ACommandGroupWithoutACommandShowsItsCommandsAndFails) {
  CommandLine::Parsed job = Parse({"job"});
  EXPECT_EQ(job.exit_code, 2);
  EXPECT_THAT(job.err, HasSubstr("croupier job: a command is required: create, show, list, "
                                 "describe, delete"));
  // One `croupier job` names every job flag (each subcommand's help follows).
  EXPECT_THAT(job.err, AllOf(HasSubstr("usage: croupier job create --dispatcher HOST:PORT "
                                       "--name NAME --consumers N [flags]"),
                             HasSubstr("  --features SPEC"), HasSubstr("  --exist-ok"),
                             HasSubstr("  --force")));
  CommandLine::Parsed root = Parse({});
  EXPECT_EQ(root.exit_code, 2);
  EXPECT_THAT(root.err, HasSubstr("croupier: a command is required: dispatcher, producer, "
                                  "produce, tokenize, job,"));
  CommandLine::Parsed help = Parse({"-h"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, AllOf(HasSubstr("\n  produce "), HasSubstr("\n  producer "),
                              HasSubstr("\n  consume ")));
  EXPECT_EQ(Parse({"help"}).out, help.out);
  EXPECT_EQ(Parse({"job", "help"}).out, Parse({"job", "-h"}).out);
  EXPECT_THAT(Parse({"job", "-h"}).out, StartsWith("usage: croupier job"));
}

TEST(CommandLineTest, VersionAndProduce) {
  CommandLine::Parsed version = Parse({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.out, StartsWith("croupier "));
  // produce's arguments are the Python producer's: not parsed here, even -h and unknown flags.
  // So are tokenize's.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"produce", "-h"},
           {"produce", "m:f", "--dispatcher", "h:1", "--workers", "2"},
           {"tokenize", "-h"},
           {"tokenize", "a.jsonl", "--tokenizer", "t.json", "--output", "p"}}) {
    CommandLine::Parsed python = Parse(args);
    EXPECT_EQ(python.exit_code, 0);
    EXPECT_TRUE(python.run);
    EXPECT_EQ(python.command, args[0]);
  }
}

}  // namespace
}  // namespace croupier::cli
