// croupier status HOST:PORT [--json]: jobs, producers and consumers as the dispatcher sees them.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/status_macros.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace croupier::cli {

absl::Status StatusCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {"auth-token", "timeout-ms"}, {"json"}));
  if (args.positional().size() != 1) {
    return absl::InvalidArgumentError(
        "usage: croupier status HOST:PORT [--json] [--auth-token TOKEN] [--timeout-ms MS]");
  }
  ASSIGN_OR_RETURN(int64_t timeout_ms, args.GetInt("timeout-ms", 10000, 1, 86400000));
  const std::string address = args.positional()[0];
  auto client = rpc::DispatcherClient::Create(
      address, {.auth_token = rpc::ResolveAuthToken(args.Get("auth-token")),
                .call_timeout = absl::Milliseconds(timeout_ms),
                .timeout = absl::Milliseconds(timeout_ms)});
  ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(v1::StatusRequest()));
  if (args.Has("json")) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(status, &out, options);
    std::printf("%s\n", out.c_str());
    return absl::OkStatus();
  }
  std::printf("dispatcher %s (protocol %u): %d jobs, %d producers, %d consumers\n",
              address.c_str(), status.protocol_version(), status.jobs_size(),
              status.producers_size(), status.consumers_size());
  for (const v1::JobInfo& job : status.jobs()) {
    std::printf("job '%s': %llu records, %u consumers, %llu steps per epoch, %s\n",
                job.spec().name().c_str(), static_cast<unsigned long long>(job.num_records()),
                job.spec().num_consumers(), static_cast<unsigned long long>(job.steps_per_epoch()),
                job.spec().mode().c_str());
    for (const v1::ConsumerStatus& c : status.consumers()) {
      if (c.job() != job.spec().name()) continue;
      std::printf("  rank %-3u consumer %-4llu epoch %llu step %llu; %llu batches, %.1f MB; "
                  "waited %.1f s; heartbeat %.1f s ago\n",
                  c.rank(), static_cast<unsigned long long>(c.consumer_id()),
                  static_cast<unsigned long long>(c.epoch()),
                  static_cast<unsigned long long>(c.step()),
                  static_cast<unsigned long long>(c.batches_received()), c.bytes_received() / 1e6,
                  c.wait_seconds(), c.seconds_since_heartbeat());
    }
  }
  for (const v1::ProducerStatus& p : status.producers()) {
    std::printf("producer %-4llu %s: buffer %.1f/%.1f MB, %.1f batches/s, %llu batches served, "
                "tasks [%s]; heartbeat %.1f s ago\n",
                static_cast<unsigned long long>(p.producer_id()), p.data_address().c_str(),
                p.stats().buffered_bytes() / 1e6, p.stats().buffer_capacity_bytes() / 1e6,
                p.batches_per_second(), static_cast<unsigned long long>(p.stats().batches_served()),
                absl::StrJoin(p.tasks(), ",").c_str(), p.seconds_since_heartbeat());
  }
  return absl::OkStatus();
}

}  // namespace croupier::cli
