// croupier produce and croupier tokenize: the Python package's commands, so that one command runs
// every kind of process. The producer of map and stream jobs (croupier.map.pipeline) is Python
// because it runs a user's Python pipeline; tokenize (croupier.corpus) because it runs a Hugging
// Face tokenizer. Each replaces itself (exec) with `python -m croupier COMMAND ARGS...`, so
// signals, exit codes and the terminal are the Python command's own.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/commands.h"

namespace croupier::cli {
namespace {

constexpr char kProduceDescription[] =
    R"(Runs the Python producer of map and stream jobs, and of tokens jobs with text sources. It is
`python -m croupier produce`: the pipeline MODULE:FUNCTION returns what to produce; without one,
the job is a tokens job whose text the producer tokenizes. Its flags are the Python producer's own:
`croupier produce -h` lists them. The interpreter is $CROUPIER_PYTHON, else the active virtual
environment's ($VIRTUAL_ENV/bin/python), else python3 beside this executable, else python3 on
PATH; it must import the croupier package.)";

// Imports croupier as `python -m croupier` would, but says what is wrong when the package is
// missing instead of Python's "No module named croupier". A module the producer itself lacks
// (e.g. numpy) keeps its own traceback.
constexpr char kTokenizeDescription[] =
    R"(Tokenizes text corpora into a token dataset for tokens jobs. JSON-lines and Parquet files,
with a Hugging Face tokenizer, become a Megatron-LM indexed dataset (PREFIX.bin, PREFIX.idx). It
is `python -m croupier tokenize`; `croupier tokenize -h` lists its flags. The interpreter is found as for produce, and
needs the tokenizers package.)";

// sys.argv is ["-c", COMMAND, ARGS...].
constexpr char kBootstrap[] = R"(import sys
command = sys.argv[1]
try:
    from croupier.__main__ import main
except ModuleNotFoundError as e:
    if e.name != "croupier":
        raise
    sys.exit("croupier " + command + ": the Python interpreter " + sys.executable + " cannot "
             "import the croupier package: install it there (pip install croupier), add it to "
             "PYTHONPATH, or name another interpreter in CROUPIER_PYTHON")
sys.argv[0] = "croupier " + command
sys.exit(main(sys.argv[1:]))
)";

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// The interpreter to run, and where it was found (for the error message).
std::pair<std::string, std::string> Interpreter() {
  if (const char* p = std::getenv("CROUPIER_PYTHON"); p != nullptr && *p != '\0') {
    return {p, "$CROUPIER_PYTHON"};
  }
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0') {
    const std::string python = absl::StrCat(venv, "/bin/python");
    if (Executable(python)) return {python, "$VIRTUAL_ENV"};
  }
  char self[4096];
  if (ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1); n > 0) {
    std::string dir(self, n);
    dir.resize(dir.rfind('/') + 1);
    if (Executable(dir + "python3")) return {dir + "python3", "beside this executable"};
  }
  return {"python3", "PATH"};
}

}  // namespace

Subcommand AddProduceCommand(CLI::App& parent) {
  // Listed in the help; Parse hands its arguments to RunPythonCommand unparsed.
  return {parent.add_subcommand("produce", kProduceDescription), nullptr};
}

Subcommand AddTokenizeCommand(CLI::App& parent) {
  return {parent.add_subcommand("tokenize", kTokenizeDescription), nullptr};
}

bool IsPythonCommand(const std::string& name) { return name == "produce" || name == "tokenize"; }

absl::Status RunPythonCommand(const std::string& command, const std::vector<std::string>& args) {
  const auto [python, from] = Interpreter();
  std::vector<std::string> argv = {python, "-c", kBootstrap, command};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  execvp(c_argv[0], c_argv.data());
  const int error = errno;
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot run the Python interpreter '", python, "' (from ", from, "): ", std::strerror(error),
      "; install Python 3 with the croupier package, or name its interpreter in "
      "CROUPIER_PYTHON"));
}

}  // namespace croupier::cli
