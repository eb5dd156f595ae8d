// croupier.Job: the one typed job of the Python API. create_job, get_job, Consumer.job and
// serve() hand it out; nothing in the package parses a job's JSON.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/job/codec.h"
#include "src/job/job.h"
#include "src/job/job_json.h"
#include "src/job/job_settings.h"
#include "src/job/token_job.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// The attributes to_dict() gives, in this order: every typed setting and size of a Job.
constexpr const char* kFields[] = {"name",
                                   "source",
                                   "mode",
                                   "features",
                                   "batch_size",
                                   "num_consumers",
                                   "num_epochs",
                                   "seed",
                                   "shuffle",
                                   "remainder",
                                   "block_size",
                                   "window_blocks",
                                   "compression",
                                   "source_count",
                                   "source_batches_per_epoch",
                                   "start_epoch",
                                   "start_batch",
                                   "skip_failing_records",
                                   "tokens",
                                   "files",
                                   "num_records",
                                   "batches_per_epoch",
                                   "steps_per_epoch",
                                   "batches_per_task",
                                   "state",
                                   "rank_positions"};

// The keys of job["spec"] (the old dicts' JobSpec), each the attribute of its name but "files".
constexpr const char* kSpecFields[] = {"name",
                                       "features",
                                       "batch_size",
                                       "seed",
                                       "shuffle",
                                       "block_size",
                                       "window_blocks",
                                       "remainder",
                                       "num_consumers",
                                       "num_epochs",
                                       "mode",
                                       "source",
                                       "source_batches_per_epoch",
                                       "source_count",
                                       "start_epoch",
                                       "start_batch",
                                       "compression",
                                       "num_records",
                                       "skip_failing_records"};

// The JobInfo as JSON, as the dispatcher's answers and the command line's --json give it.
std::string InfoJson(const v1::JobInfo& info) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  return ToUserJson(info, options, /*int64_as_numbers=*/true);
}

}  // namespace

PyJob MakeJob(v1::JobInfo info) {
  PyJob job;
  job.config = Unwrap(ParseJobConfig(info));
  job.info = std::move(info);
  return job;
}

PyJob MakeJob(v1::GetJobResponse response) {
  PyJob job = MakeJob(std::move(*response.mutable_job()));
  const absl::string_view state = JobStateName(response.summary().state());
  if (!state.empty()) job.state = std::string(state);
  for (const v1::RankPosition& p : response.rank_positions()) {
    job.rank_positions.emplace_back(p.rank(), p.epoch(), p.step());
  }
  return job;
}

void BindJob(pyb::module_& m) {
  pyb::class_<PyJob>(m, "Job",
                     "A job as the dispatcher holds it: its settings (the effective ones: a "
                     "default is given by its value), its plan's sizes and, from get_job, its "
                     "state. Immutable; create_job, get_job and Consumer.job give one.")
      .def_static(
          "from_json",
          [](const std::string& info_json) {
            v1::JobInfo info;
            absl::Status parsed = FromUserJson(info_json, &info);
            if (!parsed.ok()) {
              ThrowIfError(
                  absl::InvalidArgumentError("job info: " + std::string(parsed.message())));
            }
            return MakeJob(std::move(info));
          },
          pyb::arg("info_json"),
          "The Job of a JobInfo as JSON (to_json's, or `croupier job describe --json`'s \"job\").")
      .def(
          "to_json", [](const PyJob& j) { return InfoJson(j.info); },
          "The JobInfo as JSON (without state and rank_positions).")
      .def(
          "to_dict",
          [](pyb::object self) {
            pyb::dict d;
            for (const char* field : kFields) d[field] = self.attr(field);
            return d;
          },
          "{attribute: value} of every attribute above: a plain dict, for code that indexed the "
          "dicts this package gave before it had a Job.")
      .def(
          "__getitem__",
          [](pyb::object self, const std::string& key) -> pyb::object {
            const PyJob& j = self.cast<const PyJob&>();
            if (key == "spec") {
              pyb::dict spec;
              for (const char* field : kSpecFields) spec[field] = self.attr(field);
              spec["files"] = std::vector<std::string>(j.info.spec().files().begin(),
                                                       j.info.spec().files().end());
              return spec;
            }
            for (const char* field : kFields) {
              if (key == field) return self.attr(field);
            }
            // Keys of the dicts this package gave before it had a Job: say what to write now
            // (docs/python.md, "Changed calls").
            if (key == "job") {
              throw pyb::key_error(
                  "'job': get_job() returns the croupier.Job itself: use it where you read "
                  "[\"job\"]");
            }
            if (key == "summary") {
              throw pyb::key_error(
                  "'summary': the job's state is job.state; the summary's counts are in "
                  "status()[\"job_summaries\"]");
            }
            if (key == "done_at_registration") {
              throw pyb::key_error(
                  "'done_at_registration': Consumer.job is a croupier.Job; read "
                  "feed.done_at_registration");
            }
            throw pyb::key_error(key);
          },
          pyb::arg("key"),
          "job[key]: the attribute `key`, and job[\"spec\"] a dict of the settings (with the "
          "files as given), so that code written for the dicts this package gave before it had "
          "a Job still reads it. Prefer the attributes.")
      .def_property_readonly("name", [](const PyJob& j) { return j.config.name; })
      .def_property_readonly(
          "source", [](const PyJob& j) { return std::string(SourceKindName(j.config.source)); },
          "'tfrecord', 'python' (a stream: croupier.serve) or 'map' (croupier.produce).")
      .def_property_readonly(
          "mode", [](const PyJob& j) { return std::string(DealModeName(j.config.mode)); },
          "'dealt' or 'first_come'.")
      .def_property_readonly(
          "features", [](const PyJob& j) { return j.config.features; }, "The feature spec text.")
      .def_property_readonly("batch_size", [](const PyJob& j) { return j.config.plan.batch_size; })
      .def_property_readonly(
          "num_consumers", [](const PyJob& j) { return j.config.num_consumers(); },
          "The job's world size: its ranks.")
      .def_property_readonly(
          "num_epochs", [](const PyJob& j) { return j.config.num_epochs; }, "0: unbounded.")
      .def_property_readonly("seed", [](const PyJob& j) { return j.config.plan.seed; })
      .def_property_readonly(
          "shuffle",
          [](const PyJob& j) { return std::string(ShuffleModeName(j.config.plan.shuffle)); },
          "'none', 'global' or 'blocks'.")
      .def_property_readonly(
          "remainder",
          [](const PyJob& j) { return std::string(RemainderName(j.config.plan.remainder)); },
          "'drop' or 'pad'.")
      .def_property_readonly("block_size", [](const PyJob& j) { return j.config.plan.block_size; })
      .def_property_readonly("window_blocks",
                             [](const PyJob& j) { return j.config.plan.window_blocks; })
      .def_property_readonly(
          "compression", [](const PyJob& j) { return CodecName(j.config.compression); },
          "'none', 'zstd' or 'lz4'.")
      .def_property_readonly(
          "source_count", [](const PyJob& j) { return j.config.source_count; },
          "How many processes serve a python job.")
      .def_property_readonly(
          "source_batches_per_epoch",
          [](const PyJob& j) { return j.info.spec().source_batches_per_epoch(); },
          "The batches a python job's source yields per epoch (0 for the other kinds).")
      .def_property_readonly("start_epoch", [](const PyJob& j) { return j.config.start_epoch; })
      .def_property_readonly("start_batch", [](const PyJob& j) { return j.config.start_batch; })
      .def_property_readonly("skip_failing_records",
                             [](const PyJob& j) { return j.config.skip_failing_records; })
      .def_property_readonly(
          "tokens",
          [](const PyJob& j) -> pyb::object {
            if (!j.config.tokens()) return pyb::none();
            google::protobuf::util::JsonPrintOptions options;
            options.always_print_primitive_fields = true;
            options.preserve_proto_field_names = true;
            pyb::dict out = pyb::module_::import("json").attr("loads")(
                ToUserJson(j.info.spec().tokens(), options, /*int64_as_numbers=*/true));
            pyb::list sources;
            for (const v1::TokenSourceInfo& source : j.info.token_sources()) {
              sources.append(pyb::module_::import("json").attr("loads")(
                  ToUserJson(source, options, /*int64_as_numbers=*/true)));
            }
            out["source_info"] = sources;
            return out;
          },
          "A tokens job's settings (sources, sequence_length, packing, packing_window, "
          "global_batch, steps_per_epoch, weights, pad_id) and source_info (each source's "
          "documents, tokens and fingerprint); None for other jobs.")
      .def(
          "check_token_sources",
          [](const PyJob& j) {
            pyb::gil_scoped_release nogil;
            ThrowIfError(CheckTokenSources(j.info, *Env::Default()));
          },
          "A tokens job: checks that each source's files (and a text source's tokenizer) are "
          "those the job was created with; FailedPreconditionError naming the file that "
          "differs, NotFoundError naming one that is gone.")
      .def_property_readonly(
          "files",
          [](const PyJob& j) {
            std::vector<std::string> out;
            for (const auto& f : j.info.files()) out.push_back(f.path());
            return out;
          },
          "The files, expanded, in global record order (tfrecord jobs).")
      .def_property_readonly("num_records", [](const PyJob& j) { return j.info.num_records(); })
      .def_property_readonly(
          "batches_per_epoch", [](const PyJob& j) { return j.config.batches_per_epoch; },
          "Global batches dealt per epoch, a multiple of num_consumers.")
      .def_property_readonly(
          "steps_per_epoch", [](const PyJob& j) { return j.config.steps_per_epoch; },
          "Each rank's steps per epoch (dealt).")
      .def_property_readonly("batches_per_task",
                             [](const PyJob& j) { return j.config.batches_per_task; })
      .def_property_readonly(
          "state", [](const PyJob& j) { return j.state; },
          "'idle', 'running' or 'done' as get_job read it; None where the "
          "answer did not say (create_job's, Job.from_json's).")
      .def_property_readonly(
          "rank_positions", [](const PyJob& j) { return j.rank_positions; },
          "[(rank, epoch, step)]: each rank's last position as get_job read "
          "it; [] elsewhere.")
      .def("__eq__",
           [](const PyJob& a, const PyJob& b) {
             return a.info.SerializeAsString() == b.info.SerializeAsString() &&
                    a.state == b.state && a.rank_positions == b.rank_positions;
           })
      .def("__repr__", [](const PyJob& j) {
        return absl::StrCat(
            "Job(name='", j.config.name, "', source='", SourceKindName(j.config.source),
            "', batch_size=", j.config.plan.batch_size,
            ", num_consumers=", j.config.num_consumers(), ", num_epochs=", j.config.num_epochs,
            ", steps_per_epoch=", j.config.steps_per_epoch,
            j.state ? absl::StrCat(", state='", *j.state, "'") : "", ")");
      });
}

}  // namespace croupier::py
