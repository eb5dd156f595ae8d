// croupier index FILES... [--cache-dir DIR] [--quiet]
// Builds (or verifies the freshness of) the record index of each file ahead of time.
#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "croupier/record_index.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace croupier::cli {
namespace {
// Below this many bytes in all, a progress bar would only flicker.
constexpr uint64_t kProgressMinBytes = 64 << 20;
constexpr char kIndexDescription[] =
    R"(Builds the record index of TFRecord files ahead of time. It builds or refreshes the record
index of each file (docs/formats.md) in the index cache, and prints each file's record count. Inputs of 64 MiB or more show a progress bar on
stderr.)";

struct IndexFlags {
  std::vector<std::string> files;
  std::string cache_dir;
  bool quiet = false;
};

absl::Status Run(const IndexFlags& flags) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandFiles(flags.files));
  Env& env = *Env::Default();
  uint64_t total = 0;
  for (const auto& f : files) {
    ASSIGN_OR_RETURN(FileStat st, env.Stat(f));
    total += st.size;
  }
  IndexCache cache(flags.cache_dir);
  std::unique_ptr<Progress> progress;
  if (total >= kProgressMinBytes && !flags.quiet) {
    progress = std::make_unique<Progress>("indexing", total);
  }
  uint64_t done_before = 0, records = 0;
  for (const auto& f : files) {
    auto start = std::chrono::steady_clock::now();
    bool rebuilt = false;
    IndexProgress report = nullptr;
    if (progress) {
      report = [&](uint64_t done, uint64_t) { progress->Update(done_before + done, f); };
    }
    ASSIGN_OR_RETURN(auto index, cache.Get(f, report, &rebuilt));
    done_before += index->file_size;
    records += index->num_records();
    if (progress) progress->Update(done_before, f);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!flags.quiet) {
      std::printf("%s: %llu records, %llu bytes, %s\n", f.c_str(),
                  static_cast<unsigned long long>(index->num_records()),
                  static_cast<unsigned long long>(index->file_size),
                  rebuilt ? absl::StrFormat("indexed in %.3f s", secs).c_str() : "index up to date");
    }
  }
  progress.reset();
  if (!flags.quiet) {
    std::printf("%zu files, %llu records; indexes in %s\n", files.size(),
                static_cast<unsigned long long>(records), cache.dir().c_str());
  }
  return absl::OkStatus();
}

void Declare(CLI::App* app, IndexFlags* f) {
  app->add_option("files", f->files, "TFRecord files or globs")
      ->required()
      ->option_text("FILES...");
  AddFlag(app, "--cache-dir", &f->cache_dir, "DIR", "the index cache")
      ->default_str("$CROUPIER_INDEX_DIR, else ~/.cache/croupier/index");
  AddSwitch(app, "--quiet", &f->quiet, "print nothing");
}

}  // namespace

Subcommand AddIndexCommand(CLI::App& parent) {
  return AddCommand<IndexFlags>(parent, "index", kIndexDescription, Declare, Run);
}

absl::StatusOr<std::vector<std::string>> ExpandFiles(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const auto& p : patterns) {
    ASSIGN_OR_RETURN(std::vector<std::string> matches, Env::Default()->Glob(p));
    if (matches.empty()) return absl::NotFoundError(absl::StrCat("no file matches '", p, "'"));
    files.insert(files.end(), matches.begin(), matches.end());
  }
  return files;
}

}  // namespace croupier::cli
