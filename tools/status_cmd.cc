// croupier status HOST:PORT [--json] [--watch [SECONDS]]: jobs, producers and consumers as the
// dispatcher sees them. --watch redraws the view in place, like top, with rates measured between
// two refreshes: each consumer's batches/s and input-bound % (the share of wall time it spent
// waiting for data), and the expected time to the end of the epoch.
#include <cstdio>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/status_macros.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace croupier::cli {
namespace {

constexpr char kStatusUsage[] = R"(usage: croupier status HOST:PORT [--json] [--watch [SECONDS]]
         [--auth-token TOKEN] [--timeout-ms MS]

Lists the dispatcher's jobs, each consumer's epoch and step, and each producer's buffer fill and
throughput. --json prints the dispatcher's answer as JSON. --watch refreshes every SECONDS
(default 2) until Ctrl-C, adding each consumer's batches/s and input-bound % (the share of time it
waited for data: near 100% means the input pipeline is the bottleneck; add producers) and the
expected time to the end of the epoch.
)";

// What one refresh remembers of a consumer, to compute rates at the next.
struct Sample {
  absl::Time when;  // of the heartbeat that reported the figures
  uint64_t batches = 0;
  double wait_seconds = 0;
  std::string rates;  // what was printed for it
};

void Print(const std::string& address, const v1::StatusResponse& status,
           std::map<uint64_t, Sample>* previous) {
  const absl::Time now = absl::Now();
  std::printf("dispatcher %s (protocol %u): %d jobs, %d producers, %d consumers\n",
              address.c_str(), status.protocol_version(), status.jobs_size(),
              status.producers_size(), status.consumers_size());
  std::map<uint64_t, Sample> next;
  for (const v1::JobInfo& job : status.jobs()) {
    std::printf("job '%s': %llu records, %u consumers, %llu steps per epoch, %s\n",
                job.spec().name().c_str(), static_cast<unsigned long long>(job.num_records()),
                job.spec().num_consumers(), static_cast<unsigned long long>(job.steps_per_epoch()),
                job.spec().mode().c_str());
    for (const v1::ConsumerStatus& c : status.consumers()) {
      if (c.job() != job.spec().name()) continue;
      std::string rates;
      if (previous != nullptr) {
        // The figures are as of the consumer's last heartbeat: rates are taken between two
        // heartbeats, and a refresh that saw no new heartbeat keeps the last rates.
        Sample sample{now - absl::Seconds(c.seconds_since_heartbeat()), c.batches_received(),
                      c.wait_seconds(), "; rates at the next heartbeat"};
        auto it = previous->find(c.consumer_id());
        if (it != previous->end()) {
          const double dt = absl::ToDoubleSeconds(sample.when - it->second.when);
          if (dt < 0.05) {
            sample = it->second;
          } else {
            const double rate = (c.batches_received() - it->second.batches) / dt;
            const double bound =
                100.0 * std::min(1.0, (c.wait_seconds() - it->second.wait_seconds) / dt);
            sample.rates = absl::StrFormat("; %.1f batches/s, input-bound %.0f%%", rate, bound);
            if (rate > 0 && job.steps_per_epoch() > c.step()) {
              absl::StrAppendFormat(&sample.rates, ", epoch ends in %.0f s",
                                    (job.steps_per_epoch() - c.step()) / rate);
            }
          }
        }
        rates = sample.rates;
        next[c.consumer_id()] = sample;
      }
      std::printf("  rank %-3u consumer %-4llu epoch %llu step %llu; %llu batches, %.1f MB; "
                  "waited %.1f s; heartbeat %.1f s ago%s\n",
                  c.rank(), static_cast<unsigned long long>(c.consumer_id()),
                  static_cast<unsigned long long>(c.epoch()),
                  static_cast<unsigned long long>(c.step()),
                  static_cast<unsigned long long>(c.batches_received()), c.bytes_received() / 1e6,
                  c.wait_seconds(), c.seconds_since_heartbeat(), rates.c_str());
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
  if (previous != nullptr) *previous = std::move(next);
}

}  // namespace

absl::Status StatusCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(Args args,
                   Args::Parse(argv, {"auth-token", "timeout-ms"}, {"json", "watch", "help"}));
  if (args.Has("help")) {
    std::fputs(kStatusUsage, stdout);
    return absl::OkStatus();
  }
  // --watch takes an optional number of seconds, which the parser sees as a positional.
  std::vector<std::string> positional = args.positional();
  double every = 2;
  if (args.Has("watch") && positional.size() == 2) {
    if (!absl::SimpleAtod(positional[1], &every) || every < 0.1 || every > 3600) {
      return absl::InvalidArgumentError(
          absl::StrCat("--watch takes seconds between 0.1 and 3600, not '", positional[1], "'"));
    }
    positional.pop_back();
  }
  if (positional.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected one HOST:PORT\n", kStatusUsage));
  }
  ASSIGN_OR_RETURN(int64_t timeout_ms, args.GetInt("timeout-ms", 10000, 1, 86400000));
  const std::string address = positional[0];
  auto client = rpc::DispatcherClient::Create(
      address, {.auth_token = rpc::ResolveAuthToken(args.Get("auth-token")),
                .call_timeout = absl::Milliseconds(timeout_ms),
                .timeout = absl::Milliseconds(timeout_ms)});
  if (!args.Has("watch")) {
    ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(v1::StatusRequest()));
    if (args.Has("json")) {
      std::string out;
      google::protobuf::util::JsonPrintOptions options;
      options.always_print_primitive_fields = true;
      (void)google::protobuf::util::MessageToJsonString(status, &out, options);
      std::printf("%s\n", out.c_str());
    } else {
      Print(address, status, nullptr);
    }
    return absl::OkStatus();
  }
  // Runs until Ctrl-C, whose default action ends the process: nothing here needs cleaning up.
  std::map<uint64_t, Sample> previous;
  while (true) {
    ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(v1::StatusRequest()));
    std::printf("\033[H\033[2J");  // home and clear, as top does
    Print(address, status, &previous);
    std::printf("\n(every %.1f s; Ctrl-C to stop)\n", every);
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(every));
  }
}

}  // namespace croupier::cli
