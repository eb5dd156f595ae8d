// croupier job list --dispatcher HOST:PORT [--json]: every job's summary (GetStatus's
// job_summaries), one line each, without the file lists.
#include <cstdio>

#include "src/common/status_macros.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {

absl::Status JobListCommand(const std::vector<std::string>& argv, const char* usage) {
  std::set<std::string> flags = JobClientFlags();
  ASSIGN_OR_RETURN(Args args, Args::Parse(argv, flags, {"json"}));
  if (!args.positional().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("job list takes no name\n", usage));
  }
  ASSIGN_OR_RETURN(auto client, JobClient(args, usage));
  ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(v1::StatusRequest()));
  if (args.Has("json")) {
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

}  // namespace croupier::cli
