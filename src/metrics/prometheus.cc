#include "src/metrics/prometheus.h"

#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace croupier::metrics {
namespace {

std::string Escape(const std::string& value) {
  return absl::StrReplaceAll(value, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string Number(double v) { return absl::StrFormat("%.17g", v); }

// One metric family: its HELP and TYPE lines, then one sample per labelled value.
class Family {
 public:
  Family(std::string* out, const char* name, const char* type, const char* help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Add(const std::vector<std::pair<const char*, std::string>>& labels, double value) {
    std::string text;
    for (const auto& [key, v] : labels) {
      absl::StrAppend(&text, text.empty() ? "" : ",", key, "=\"", Escape(v), "\"");
    }
    absl::StrAppend(out_, name_, text.empty() ? "" : absl::StrCat("{", text, "}"), " ",
                    Number(value), "\n");
  }

 private:
  std::string* out_;
  const char* name_;
};

}  // namespace

std::string FormatPrometheus(const v1::StatusResponse& status) {
  std::string out;
  Family(&out, "croupier_jobs", "gauge", "Jobs the dispatcher holds.")
      .Add({}, status.jobs_size());
  {
    Family steps(&out, "croupier_job_steps_per_epoch", "gauge",
                 "Steps every consumer of a dealt job takes in a whole epoch.");
    for (const v1::JobInfo& j : status.jobs()) {
      steps.Add({{"job", j.spec().name()}}, j.steps_per_epoch());
    }
  }
  {
    Family records(&out, "croupier_job_records", "gauge", "Records in a job's dataset.");
    for (const v1::JobInfo& j : status.jobs()) {
      records.Add({{"job", j.spec().name()}}, j.num_records());
    }
  }
  {
    Family epoch(&out, "croupier_rank_epoch", "gauge",
                 "The epoch of a rank's last acknowledged position (the next step it takes).");
    Family step(&out, "croupier_rank_step", "gauge",
                "The step of a rank's last acknowledged position (the next step it takes).");
    for (const v1::RankPosition& r : status.rank_positions()) {
      epoch.Add({{"job", r.job()}, {"rank", absl::StrCat(r.rank())}}, r.epoch());
      step.Add({{"job", r.job()}, {"rank", absl::StrCat(r.rank())}}, r.step());
    }
  }
  using Consumer = v1::ConsumerStatus;
  const std::vector<std::tuple<const char*, const char*, const char*,
                               std::function<double(const Consumer&)>>>
      consumer_metrics = {
          {"croupier_consumer_batches_received_total", "counter",
           "Batches a connected consumer has received since it connected.",
           [](const Consumer& c) { return static_cast<double>(c.batches_received()); }},
          {"croupier_consumer_received_bytes_total", "counter",
           "Bytes of batches a connected consumer has received since it connected.",
           [](const Consumer& c) { return static_cast<double>(c.bytes_received()); }},
          {"croupier_consumer_wait_seconds_total", "counter",
           "Time a connected consumer spent waiting for data: its rate over wall time is the "
           "input-bound share.",
           [](const Consumer& c) { return c.wait_seconds(); }},
          {"croupier_consumer_heartbeat_age_seconds", "gauge",
           "Seconds since a connected consumer's last heartbeat.",
           [](const Consumer& c) { return c.seconds_since_heartbeat(); }},
      };
  for (const auto& [name, type, help, get] : consumer_metrics) {
    Family f(&out, name, type, help);
    for (const Consumer& c : status.consumers()) {
      f.Add({{"job", c.job()}, {"rank", absl::StrCat(c.rank())}}, get(c));
    }
  }
  using Producer = v1::ProducerStatus;
  const std::vector<std::tuple<const char*, const char*, const char*,
                               std::function<double(const Producer&)>>>
      producer_metrics = {
          {"croupier_producer_buffered_bytes", "gauge",
           "Bytes of finished batches a producer holds, waiting for consumers.",
           [](const Producer& p) { return static_cast<double>(p.stats().buffered_bytes()); }},
          {"croupier_producer_buffer_capacity_bytes", "gauge", "A producer's buffer bound.",
           [](const Producer& p) {
             return static_cast<double>(p.stats().buffer_capacity_bytes());
           }},
          {"croupier_producer_batches_made_total", "counter",
           "Batches a producer has made since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().batches_made()); }},
          {"croupier_producer_batches_served_total", "counter",
           "Batches a producer has served since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().batches_served()); }},
          {"croupier_producer_served_bytes_total", "counter",
           "Bytes a producer has served since it started.",
           [](const Producer& p) { return static_cast<double>(p.stats().bytes_served()); }},
          {"croupier_producer_tasks", "gauge", "Tasks a producer holds.",
           [](const Producer& p) { return static_cast<double>(p.tasks_size()); }},
          {"croupier_producer_heartbeat_age_seconds", "gauge",
           "Seconds since a producer's last heartbeat.",
           [](const Producer& p) { return p.seconds_since_heartbeat(); }},
      };
  for (const auto& [name, type, help, get] : producer_metrics) {
    Family f(&out, name, type, help);
    for (const Producer& p : status.producers()) {
      f.Add({{"producer", absl::StrCat(p.producer_id())}, {"address", p.data_address()}}, get(p));
    }
  }
  return out;
}

}  // namespace croupier::metrics
