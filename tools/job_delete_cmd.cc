// croupier job delete NAME --dispatcher HOST:PORT [--force]: deletes a job (DeleteJob). A job
// that live consumers read is refused, naming them, unless --force, which removes them first.
#include <cstdio>

#include "src/common/status_macros.h"
#include "src/job/job_settings.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {

absl::Status JobDeleteCommand(const std::vector<std::string>& argv, const char* usage) {
  std::set<std::string> flags = JobClientFlags();
  flags.insert("name");
  ASSIGN_OR_RETURN(Args args, Args::Parse(argv, flags, {"force", "json"}));
  ASSIGN_OR_RETURN(std::string name, JobName(args, usage));
  ASSIGN_OR_RETURN(auto client, JobClient(args, usage));
  v1::DeleteJobRequest request;
  request.set_name(name);
  request.set_force(args.Has("force"));
  ASSIGN_OR_RETURN(v1::DeleteJobResponse response, client->DeleteJob(request));
  if (args.Has("json")) {
    PrintJson(response);
    return absl::OkStatus();
  }
  std::printf(
      "deleted job '%s', which was %s: %u consumers and %u source producers removed, %u "
      "outstanding tasks dropped\n",
      name.c_str(), std::string(JobStateName(response.job().state())).c_str(),
      response.consumers_removed(), response.producers_removed(), response.tasks_revoked());
  return absl::OkStatus();
}

}  // namespace croupier::cli
