// croupier job describe NAME --dispatcher HOST:PORT [--json]: one job whole (GetJob): its
// settings, its state and counts, its ranks' positions, and (--files) its file list.
#include <cstdio>
#include <memory>

#include "src/common/status_macros.h"
#include "src/job/job_settings.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {

namespace {

constexpr char kJobDescribeDescription[] =
    "Shows one job: its settings, state and counts, and its ranks' positions.";

struct DescribeFlags {
  ClientFlags client;
  NameFlags name;
  bool json = false;
  bool files = false;
};

absl::Status Run(const DescribeFlags& f) {
  ASSIGN_OR_RETURN(std::string name, JobName(f.name));
  auto client = JobClient(f.client);
  v1::GetJobRequest request;
  request.set_name(name);
  ASSIGN_OR_RETURN(v1::GetJobResponse response, client->GetJob(request));
  if (f.json) {
    PrintJson(response);
    return absl::OkStatus();
  }
  std::printf("%s\n", SummaryLine(response.summary()).c_str());
  const v1::JobSpec& s = response.job().spec();
  const SettingsText text = SettingsTextOf(s);
  std::printf(
      "  batches of %u, shuffle %s, remainder %s, seed %llu, %llu global batches per "
      "epoch in tasks of %llu, features %s\n",
      s.batch_size(), text.shuffle.c_str(), text.remainder.c_str(),
      static_cast<unsigned long long>(s.seed()),
      static_cast<unsigned long long>(response.job().batches_per_epoch()),
      static_cast<unsigned long long>(response.job().batches_per_task()), s.features().c_str());
  for (const v1::RankPosition& p : response.rank_positions()) {
    std::printf("  rank %u at epoch %llu step %llu\n", p.rank(),
                static_cast<unsigned long long>(p.epoch()),
                static_cast<unsigned long long>(p.step()));
  }
  if (f.files) {
    for (const v1::FileInfo& f : response.job().files()) {
      std::printf("  %s: %llu records\n", f.path().c_str(),
                  static_cast<unsigned long long>(f.num_records()));
    }
  }
  return absl::OkStatus();
}

void Declare(CLI::App* app, DescribeFlags* f) {
  AddNameFlags(app, &f->name);
  AddClientFlags(app, &f->client);
  AddSwitch(app, "--files", &f->files, "list the job's files and their record counts too");
  AddSwitch(app, "--json", &f->json, "print the dispatcher's answer as JSON");
}

}  // namespace

Subcommand AddJobDescribeCommand(CLI::App& job) {
  return AddCommand<DescribeFlags>(job, "describe", kJobDescribeDescription, Declare, Run);
}

}  // namespace croupier::cli
