// croupier job list --dispatcher HOST:PORT [--json]: every job's summary (GetStatus's
// job_summaries), one line each, without the file lists.
#include <cstdio>
#include <memory>

#include "src/common/status_macros.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {

namespace {

constexpr char kJobListDescription[] =
    "Lists every job's state (idle, running, done) and counts, without file lists.";

struct ListFlags {
  ClientFlags client;
  bool json = false;
};

absl::Status Run(const ListFlags& f) {
  auto client = JobClient(f.client);
  ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(v1::StatusRequest()));
  if (f.json) {
    v1::StatusResponse jobs;
    *jobs.mutable_job_summaries() = status.job_summaries();
    jobs.set_job_retention_seconds(status.job_retention_seconds());
    PrintJson(jobs);
    return absl::OkStatus();
  }
  for (const v1::JobSummary& job : status.job_summaries()) {
    std::printf("%s\n", SummaryLine(job).c_str());
  }
  if (status.job_summaries().empty()) std::printf("no jobs\n");
  return absl::OkStatus();
}

void Declare(CLI::App* app, ListFlags* f) {
  AddClientFlags(app, &f->client);
  AddSwitch(app, "--json", &f->json, "print the summaries as JSON");
}

}  // namespace

Subcommand AddJobListCommand(CLI::App& job) {
  return AddCommand<ListFlags>(job, "list", kJobListDescription, Declare, Run);
}

}  // namespace croupier::cli
