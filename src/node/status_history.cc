#include "src/node/status_history.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace croupier {
namespace {

// A JSON number: finite, short.
std::string Num(double v) { return std::isfinite(v) ? absl::StrFormat("%.6g", v) : "0"; }

// A JSON string.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (u < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", u);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

void StatusHistory::Add(absl::Time now, const v1::StatusResponse& status) {
  Sample sample;
  sample.when = now;
  for (const v1::JobSummary& job : status.job_summaries()) sample.jobs[job.name()];
  for (const v1::ConsumerStatus& c : status.consumers()) {
    JobSample& j = sample.jobs[c.job()];
    j.batches_per_second += c.batches_per_second();
    j.input_bound += c.input_bound();
    ++j.consumers;
  }
  for (auto& [name, j] : sample.jobs) {
    if (j.consumers > 0) j.input_bound /= j.consumers;
  }
  double buffered = 0, capacity = 0;
  for (const v1::ProducerStatus& p : status.producers()) {
    sample.producer_batches_per_second += p.batches_per_second();
    buffered += p.stats().buffered_bytes();
    capacity += p.stats().buffer_capacity_bytes();
  }
  sample.buffer_fill = capacity > 0 ? buffered / capacity : 0;
  sample.producers = status.producers_size();
  sample.recommended = status.producer_advice().recommended();
  absl::MutexLock lock(&mu_);
  samples_.push_back(std::move(sample));
  while (samples_.size() > max_samples_) samples_.pop_front();
}

std::string StatusHistory::ToJson() const {
  absl::MutexLock lock(&mu_);
  std::string out = "{\"samples\": [";
  bool first = true;
  for (const Sample& s : samples_) {
    // Milliseconds, in full: six significant digits would merge the samples of ten minutes.
    absl::StrAppend(&out, first ? "" : ",",
                    "\n{\"t\": ", absl::StrFormat("%.3f", absl::ToUnixMillis(s.when) / 1e3),
                    ", \"jobs\": {");
    bool first_job = true;
    for (const auto& [name, j] : s.jobs) {
      absl::StrAppend(&out, first_job ? "" : ", ", Quote(name),
                      ": {\"batches_per_second\": ", Num(j.batches_per_second),
                      ", \"input_bound\": ", Num(j.input_bound), ", \"consumers\": ", j.consumers,
                      "}");
      first_job = false;
    }
    absl::StrAppend(&out,
                    "}, \"producer_batches_per_second\": ", Num(s.producer_batches_per_second),
                    ", \"buffer_fill\": ", Num(s.buffer_fill), ", \"producers\": ", s.producers,
                    ", \"recommended_producers\": ", s.recommended, "}");
    first = false;
  }
  return out + "]}\n";
}

}  // namespace croupier
