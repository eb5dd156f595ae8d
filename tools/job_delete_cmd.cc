// croupier job delete NAME --dispatcher HOST:PORT [--force]: deletes a job (DeleteJob). A job
// that live consumers read is refused, naming them, unless --force, which removes them first.
#include <cstdio>
#include <memory>

#include "src/common/status_macros.h"
#include "src/job/job_settings.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {

namespace {

constexpr char kJobDeleteDescription[] =
    "Deletes a job: frees its name and revokes its tasks from the producers.";

struct DeleteFlags {
  ClientFlags client;
  NameFlags name;
  bool force = false;
  bool json = false;
};

absl::Status Run(const DeleteFlags& f) {
  ASSIGN_OR_RETURN(std::string name, JobName(f.name));
  auto client = JobClient(f.client);
  v1::DeleteJobRequest request;
  request.set_name(name);
  request.set_force(f.force);
  ASSIGN_OR_RETURN(v1::DeleteJobResponse response, client->DeleteJob(request));
  if (f.json) {
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

void Declare(CLI::App* app, DeleteFlags* f) {
  AddNameFlags(app, &f->name);
  AddClientFlags(app, &f->client);
  AddSwitch(app, "--force", &f->force,
            "delete a job that live consumers read too (their trainers fail with NOT_FOUND)");
  AddSwitch(app, "--json", &f->json, "print the dispatcher's answer as JSON");
}

}  // namespace

Subcommand AddJobDeleteCommand(CLI::App& job) {
  return AddCommand<DeleteFlags>(job, "delete", kJobDeleteDescription, Declare, Run);
}

}  // namespace croupier::cli
