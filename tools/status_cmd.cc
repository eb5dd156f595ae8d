// croupier status HOST:PORT [--json] [--watch [SECONDS]]: jobs, producers and consumers as the
// dispatcher sees them, with the rates it measures between heartbeats: each consumer's batches/s
// and input-bound % (the share of wall time it spent waiting for data), the expected time to the
// end of the epoch, each producer's batches/s and CPU use, and the recommended number of
// producers. --watch redraws the view in place, like top.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/status_macros.h"
#include "src/job/job_settings.h"
#include "src/rpc/dispatcher_client.h"
#include "tools/commands.h"
#include "tools/job_common.h"

namespace croupier::cli {
namespace {

constexpr char kStatusDescription[] =
    R"(Shows jobs, producers, consumers and their rates. It lists the dispatcher's jobs (their state: idle, running or done, and counts); each consumer's
epoch and step, batches/s and input-bound % (the share of time it waited for data: near 100%
means the input pipeline is the bottleneck) and the expected time to the end of the epoch; each
producer's buffer fill, batches/s, busy share and CPU use; and the recommended number of
producers, with why (docs/operations.md). The rates are the dispatcher's, measured between
heartbeats and smoothed over a few seconds.)";

struct StatusFlags {
  std::string address;
  double every = 2;
  bool json = false;
  bool job_info = false;
  bool summary = false;
  bool watch = false;
  CallFlags call{.auth_token = "", .timeout_ms = 10000, .tls = {}};
};

void Print(const std::string& address, const v1::StatusResponse& status) {
  // The counts, whether or not the lists came (--summary); an older dispatcher sends the lists only.
  std::printf("dispatcher %s (protocol %u): %d jobs, %u producers, %u consumers\n",
              address.c_str(), status.protocol_version(), status.job_summaries_size(),
              std::max<uint32_t>(status.num_producers(), status.producers_size()),
              std::max<uint32_t>(status.num_consumers(), status.consumers_size()));
  const v1::ProducerAdvice& advice = status.producer_advice();
  if (advice.recommended() > 0) {
    std::printf("recommended producers: %u (%s)\n", advice.recommended(),
                advice.reason().c_str());
  } else {
    std::printf("recommended producers: not yet (%s)\n",
                advice.reason().empty() ? "measuring" : advice.reason().c_str());
  }
  if (!status.journal_error().empty()) {
    std::printf("JOURNAL CANNOT BE WRITTEN: %s (every change fails until it can)\n",
                status.journal_error().c_str());
  }
  for (const v1::JobSummary& job : status.job_summaries()) {
    std::printf("%s\n", SummaryLine(job).c_str());
    for (const v1::ConsumerStatus& c : status.consumers()) {
      if (c.job() != job.name()) continue;
      // The rates are the dispatcher's, measured between the consumer's heartbeats.
      std::string eta;
      if (c.batches_per_second() > 0 && job.steps_per_epoch() > c.step()) {
        eta = absl::StrFormat(", epoch ends in %.0f s",
                              (job.steps_per_epoch() - c.step()) / c.batches_per_second());
      }
      std::printf("  rank %-3u consumer %-4llu epoch %llu step %llu; %llu batches, %.1f MB; "
                  "%.1f batches/s, input-bound %.0f%%%s; waited %.1f s; heartbeat %.1f s ago\n",
                  c.rank(), static_cast<unsigned long long>(c.consumer_id()),
                  static_cast<unsigned long long>(c.epoch()),
                  static_cast<unsigned long long>(c.step()),
                  static_cast<unsigned long long>(c.batches_received()), c.bytes_received() / 1e6,
                  c.batches_per_second(), 100 * c.input_bound(), eta.c_str(), c.wait_seconds(),
                  c.seconds_since_heartbeat());
    }
  }
  for (const v1::ProducerStatus& p : status.producers()) {
    std::printf("producer %-4llu %s: buffer %.1f/%.1f MB, %.1f batches/s, busy %.0f%%, CPU %.2f "
                "cores, %llu batches served, tasks [%s]; heartbeat %.1f s ago\n",
                static_cast<unsigned long long>(p.producer_id()), p.data_address().c_str(),
                p.stats().buffered_bytes() / 1e6, p.stats().buffer_capacity_bytes() / 1e6,
                p.batches_per_second(), 100 * p.busy_share(), p.cpu_cores(),
                static_cast<unsigned long long>(p.stats().batches_served()),
                absl::StrJoin(p.tasks(), ",").c_str(), p.seconds_since_heartbeat());
  }
}

absl::Status Run(const StatusFlags& f) {
  const std::string& address = f.address;
  const double every = f.every;
  auto client = DispatcherClientOf(address, f.call);
  v1::StatusRequest request;
  request.set_omit_clients(f.summary);
  if (!f.watch) {
    request.set_include_job_info(f.job_info);
    ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(request));
    if (f.json) {
      PrintJson(status);
    } else {
      Print(address, status);
    }
    return absl::OkStatus();
  }
  // Runs until Ctrl-C, whose default action ends the process: nothing here needs cleaning up.
  while (true) {
    ASSIGN_OR_RETURN(v1::StatusResponse status, client->GetStatus(request));
    std::printf("\033[H\033[2J");  // home and clear, as top does
    Print(address, status);
    std::printf("\n(every %.1f s; Ctrl-C to stop)\n", every);
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(every));
  }
}

void Declare(CLI::App* app, StatusFlags* f) {
  app->add_option("address", f->address, "the dispatcher's address")
      ->required()
      ->option_text("HOST:PORT");
  CLI::Option* watch =
      AddSwitch(app, "--watch", &f->watch, "redraw the view every SECONDS until Ctrl-C, like top");
  app->add_option("seconds", f->every, "with --watch, the seconds between two views")
      ->option_text("SECONDS")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0))
      ->needs(watch);
  AddSwitch(app, "--json", &f->json,
            "print the dispatcher's answer as JSON: a summary of each job");
  AddSwitch(app, "--job-info", &f->job_info,
            "with --json, each job's whole JobInfo (its file list too: large for many jobs)");
  AddSwitch(app, "--summary", &f->summary,
            "jobs and counts only: no line per consumer or producer (for thousands of them)");
  AddCallFlags(app, &f->call);
}

}  // namespace

Subcommand AddStatusCommand(CLI::App& parent) {
  return AddCommand<StatusFlags>(parent, "status", kStatusDescription, Declare, Run);
}

}  // namespace croupier::cli
