// croupier produce: the Python producer of map and stream jobs (croupier.pipeline), so that one
// command runs every kind of process. The producer is Python because it runs a user's Python
// pipeline; this command replaces itself (exec) with `python -m croupier produce ARGS...`, so
// signals, exit codes and the terminal are the Python producer's own.
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
    R"(Runs the Python producer of map and stream jobs. It is `python -m croupier produce`: the
pipeline MODULE:FUNCTION returns what to produce. Its flags are the Python producer's own:
`croupier produce -h` lists them. The interpreter is $CROUPIER_PYTHON, else the active virtual
environment's ($VIRTUAL_ENV/bin/python), else python3 beside this executable, else python3 on
PATH; it must import the croupier package.)";

// Imports croupier as `python -m croupier` would, but says what is wrong when the package is
// missing instead of Python's "No module named croupier". A module the producer itself lacks
// (e.g. numpy) keeps its own traceback.
constexpr char kBootstrap[] = R"(import sys
try:
    from croupier.__main__ import main
except ModuleNotFoundError as e:
    if e.name != "croupier":
        raise
    sys.exit("croupier produce: the Python interpreter " + sys.executable + " cannot import the "
             "croupier package: install it there (pip install croupier), add it to PYTHONPATH, "
             "or name another interpreter in CROUPIER_PYTHON")
sys.argv[0] = "croupier produce"
sys.exit(main(["produce"] + sys.argv[1:]))
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
  // Listed in the help; Parse hands its arguments to RunProduce unparsed.
  return {parent.add_subcommand("produce", kProduceDescription), nullptr};
}

absl::Status RunProduce(const std::vector<std::string>& args) {
  const auto [python, from] = Interpreter();
  std::vector<std::string> argv = {python, "-c", kBootstrap};
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
