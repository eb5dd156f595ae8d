#include "tools/command_line.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/logging.h"
#include "tools/commands.h"
#include "tools/flags.h"

namespace croupier::cli {
namespace {

constexpr size_t kHelpColumn = 32;  // where a flag's help starts

constexpr size_t kWidth = 100;  // descriptions are wrapped to this

constexpr char kRootDescription[] =
    R"(croupier: deals the batches of one input pipeline to N trainers.

`croupier COMMAND -h` lists a command's flags, one per line, with their defaults. Every command
but produce and tokenize (whose flags are the Python package's) takes --log-level.)";

// A flag's names as a user types them: "-h, --help", "--port".
std::string Names(const CLI::Option* opt) {
  std::vector<std::string> names;
  for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
  return absl::StrJoin(names, ", ");
}

bool TakesValue(const CLI::Option* opt) { return opt->get_items_expected_max() > 0; }

// One line per flag: its names and value, its help, and "(required)" or "(default: X)".
std::string FlagLine(const CLI::Option* opt) {
  std::string left = opt->get_positional() ? opt->get_option_text() : Names(opt);
  if (!opt->get_positional() && TakesValue(opt))
    absl::StrAppend(&left, " ", opt->get_option_text());
  std::string line = absl::StrCat("  ", left);
  line += line.size() + 2 <= kHelpColumn ? std::string(kHelpColumn - line.size(), ' ') : "  ";
  line += opt->get_description();
  if (opt->get_required()) {
    line += " (required)";
  } else if (TakesValue(opt) && !opt->get_default_str().empty()) {
    absl::StrAppend(&line, " (default: ", opt->get_default_str(), ")");
  }
  return line + "\n";
}

// The usage line: the command, its required flags, [flags], its arguments, COMMAND.
std::string UsageLine(const CLI::App* app, const std::string& name) {
  std::string usage = absl::StrCat("usage: ", name);
  bool optional_flags = false;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_positional() || opt->get_group().empty()) continue;
    if (opt->get_required()) {
      absl::StrAppend(&usage, " ", Names(opt), TakesValue(opt) ? " " : "",
                      TakesValue(opt) ? opt->get_option_text() : "");
    } else {
      optional_flags = true;
    }
  }
  if (optional_flags) usage += " [flags]";
  for (const CLI::Option* opt : app->get_options()) {
    if (!opt->get_positional()) continue;
    absl::StrAppend(&usage, " ", opt->get_required() ? "" : "[", opt->get_option_text(),
                    opt->get_required() ? "" : "]");
  }
  if (!app->get_subcommands({}).empty()) usage += " COMMAND";
  return usage + "\n";
}

// "Defines a job." of "Defines a job. A bad spec ...", on one line.
std::string FirstSentence(const std::string& text) {
  std::string sentence =
      text.substr(0, text.find(". ") == std::string::npos ? text.size() : text.find(". ") + 1);
  sentence = sentence.substr(
      0, sentence.find(".\n") == std::string::npos ? sentence.size() : sentence.find(".\n") + 1);
  std::replace(sentence.begin(), sentence.end(), '\n', ' ');
  return sentence;
}

// The text's paragraphs (split at blank lines) wrapped to kWidth.
std::string Wrap(const std::string& text) {
  std::string out;
  for (absl::string_view paragraph : absl::StrSplit(text, "\n\n")) {
    if (!out.empty()) out += "\n\n";
    size_t column = 0;
    for (absl::string_view word :
         absl::StrSplit(paragraph, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      if (column > 0 && column + 1 + word.size() > kWidth) {
        out += "\n";
        column = 0;
      } else if (column > 0) {
        out += " ";
        ++column;
      }
      absl::StrAppend(&out, word);
      column += word.size();
    }
  }
  return out;
}

// The help of every command: usage, description, arguments, flags (one a line), commands,
// footer. A command group below the root (job) prints its subcommands' help too, so that one
// `croupier job -h` names every job flag.
class HelpFormatter : public CLI::FormatterBase {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    std::string out = UsageLine(app, name);
    if (!app->get_description().empty())
      absl::StrAppend(&out, "\n", Wrap(app->get_description()), "\n");
    std::string arguments, flags;
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->get_group().empty()) continue;  // hidden: the tests' fault injection
      (opt->get_positional() ? arguments : flags) += FlagLine(opt);
    }
    if (!arguments.empty()) absl::StrAppend(&out, "\narguments:\n", arguments);
    if (!flags.empty()) absl::StrAppend(&out, "\nflags:\n", flags);
    const std::vector<const CLI::App*> subs = app->get_subcommands({});
    if (!subs.empty()) {
      out += "\ncommands:\n";
      for (const CLI::App* sub : subs) {
        std::string line = absl::StrCat("  ", sub->get_name());
        line += std::string(line.size() < 16 ? 16 - line.size() : 2, ' ');
        absl::StrAppend(&out, line, FirstSentence(sub->get_description()), "\n");
      }
    }
    if (!app->get_footer().empty()) absl::StrAppend(&out, "\n", Wrap(app->get_footer()), "\n");
    if (app->get_parent() != nullptr) {
      for (const CLI::App* sub : subs) {
        absl::StrAppend(&out, "\n", make_help(sub, absl::StrCat(name, " ", sub->get_name()), mode));
      }
    }
    return out;
  }
};

// The command named deepest in the parse: root, a subcommand, or job's subcommand.
const CLI::App* Selected(const CLI::App* app) {
  while (!app->get_subcommands().empty()) app = app->get_subcommands().front();
  return app;
}

// "job create" for job's create; "" for the root.
std::string PathOf(const CLI::App* app) {
  std::string path;
  for (; app->get_parent() != nullptr; app = app->get_parent()) {
    path = path.empty() ? app->get_name() : absl::StrCat(app->get_name(), " ", path);
  }
  return path;
}

}  // namespace

CLI::Option* AddSwitch(CLI::App* app, const std::string& name, bool* value,
                       const std::string& help) {
  return app->add_flag(name, *value, help);
}

CLI::Option* AddMillisFlag(CLI::App* app, const std::string& name, int64_t* value, int64_t min,
                           const std::string& help) {
  constexpr int64_t kDayMs = 86400000;
  return AddFlag(app, name, value, "MS", help)->check(CLI::Range(min, kDayMs));
}

void AddDispatcherFlag(CLI::App* app, std::string* address) {
  AddFlag(app, "--dispatcher", address, "HOST:PORT", "the dispatcher's address")->required();
}

void AddTlsFlags(CLI::App* app, TlsConfig* tls, bool server) {
  app->footer(server ? "TLS (docs/operations.md#security): with --tls-cert and --tls-key this "
                       "process speaks only TLS; with --tls-ca too it requires client "
                       "certificates signed by that CA (mutual TLS)."
                     : "TLS (docs/operations.md#security): with any --tls-* flag this client "
                       "speaks TLS, checks the server's certificate against --tls-ca and the "
                       "address it dials, and presents its own certificate if it has one.");
  AddFlag(app, "--tls-cert", &tls->cert_file, "FILE",
          server ? "PEM certificate: serve TLS only ($CROUPIER_TLS_CERT when not given)"
                 : "PEM certificate presented to the servers ($CROUPIER_TLS_CERT)");
  AddFlag(app, "--tls-key", &tls->key_file, "FILE", "PEM key of --tls-cert ($CROUPIER_TLS_KEY)");
  AddFlag(app, "--tls-ca", &tls->ca_file, "FILE",
          server ? "PEM CA: require client certificates it signed, mutual TLS ($CROUPIER_TLS_CA)"
                 : "PEM CA: speak TLS, check the server's certificate with it ($CROUPIER_TLS_CA)");
}

void AddAuthTokenFlag(CLI::App* app, std::string* token) {
  AddFlag(app, "--auth-token", token, "TOKEN", "the token every dispatcher call presents")
      ->default_str("$CROUPIER_AUTH_TOKEN");
}

CommandLine::CommandLine() : root_(std::make_unique<CLI::App>(kRootDescription, "croupier")) {
  root_->formatter(std::make_shared<HelpFormatter>());
  root_->set_help_flag("-h,--help", "print this help and exit");
  // A flag given twice: the last one counts (a script may add to a default).
  root_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddSwitch(root_.get(), "--version", &version_, "print the version and exit");
  std::vector<Subcommand> subs = {AddDispatcherCommand(*root_), AddProducerCommand(*root_),
                                  AddProduceCommand(*root_), AddTokenizeCommand(*root_)};
  for (Subcommand& s : AddJobCommands(*root_)) subs.push_back(std::move(s));
  for (auto* add : {&AddStatusCommand, &AddConsumeCommand, &AddInspectCommand, &AddIndexCommand,
                    &AddPlanCommand, &AddSynthCommand}) {
    subs.push_back(add(*root_));
  }
  for (Subcommand& s : subs) {
    if (!s.run) continue;  // produce and tokenize parse their own flags; job is a group
    AddFlag(s.app, "--log-level", &log_level_, "LEVEL",
            "debug, info, warning or error: log events go to stderr, one line each")
        ->each([](const std::string& level) {
          if (!ParseLogLevel(level).has_value()) {
            // Not a ValidationError, which CLI11 would prefix with the flag's name again.
            throw CLI::ConversionError(
                absl::StrCat("--log-level takes debug, info, warning or error, not '", level, "'"));
          }
        })
        ->default_str("$CROUPIER_LOG_LEVEL, else info");
    runners_[s.app] = std::move(s.run);
  }
}

CommandLine::~CommandLine() = default;

CommandLine::Parsed CommandLine::Parse(const std::vector<std::string>& args) {
  Parsed parsed;
  if (!args.empty() && IsPythonCommand(args[0])) {
    // Its flags are the Python command's own (python -m croupier produce -h).
    const std::string command = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    parsed.command = command;
    parsed.run = [command, rest] { return RunPythonCommand(command, rest); };
    return parsed;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them so
  // `croupier help` and `croupier job help`, as before CLI11.
  if (!args.empty() && args[0] == "help") reversed.back() = "--help";
  if (args.size() >= 2 && args[0] == "job" && args[1] == "help")
    reversed[args.size() - 2] = "--help";
  try {
    root_->parse(reversed);
  } catch (const CLI::Success&) {  // -h or --help
    parsed.out = root_->help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    const std::string path = PathOf(Selected(root_.get()));
    const std::string name = path.empty() ? "croupier" : absl::StrCat("croupier ", path);
    parsed.exit_code = 2;
    parsed.command = path;
    // An unknown flag is named first, whatever else failed: a typo of a required flag is
    // reported as the typo, not as the flag missing.
    const CLI::App* selected = Selected(root_.get());
    const std::vector<std::string> extras = selected->remaining();
    std::string cause = extras.empty() ? std::string(e.what())
                                       : absl::StrCat("unknown flag or extra argument: ",
                                                      absl::StrJoin(extras, " "));
    // An argument is named as -h shows it (HOST:PORT), not by its name in the code.
    for (const CLI::Option* opt : selected->get_options()) {
      const std::string code_name = opt->get_name();
      if (opt->get_positional() && absl::StartsWith(cause, code_name + " ")) {
        cause.replace(0, code_name.size(), opt->get_option_text());
      }
    }
    parsed.err = absl::StrCat(name, ": ", cause, " (`", name, " -h` lists the flags)\n");
    return parsed;
  }
  if (version_) {
    parsed.out = absl::StrCat("croupier ", CROUPIER_VERSION, "\n");
    return parsed;
  }
  const CLI::App* selected = Selected(root_.get());
  parsed.command = PathOf(selected);
  auto runner = runners_.find(selected);
  if (runner == runners_.end()) {  // the root or the job group, without a command
    std::vector<std::string> names;
    for (const CLI::App* sub : selected->get_subcommands({})) names.push_back(sub->get_name());
    const std::string name =
        parsed.command.empty() ? "croupier" : absl::StrCat("croupier ", parsed.command);
    parsed.exit_code = 2;
    parsed.err = absl::StrCat(root_->help(), "\n", name,
                              ": a command is required: ", absl::StrJoin(names, ", "), "\n");
    return parsed;
  }
  // The level is set when the command runs, so that parsing changes nothing global.
  parsed.run = [level = ParseLogLevel(log_level_), run = runner->second] {
    if (level.has_value()) SetMinLogLevel(*level);
    return run();
  };
  return parsed;
}

}  // namespace croupier::cli
