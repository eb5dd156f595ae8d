// The service from Python: the consumer (croupier.Consumer wraps it), and the few dispatcher
// calls a Python program makes (create a job, read its status). Each blocking call releases the
// GIL; each error becomes the croupier.errors class of its code, with the C++ message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "croupier/consumer.h"
#include "croupier/example.h"
#include "google/protobuf/util/json_util.h"
#include "proto/croupier.pb.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/common/logging.h"
#include "src/job/job.h"
#include "src/job/job_json.h"
#include "src/rpc/dispatcher_client.h"
#include "src/rpc/grpc_util.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// Thread-compatible, like the Consumer it owns; close() may come from any thread.
class PyConsumer {
 public:
  explicit PyConsumer(std::unique_ptr<Consumer> consumer) : consumer_(std::move(consumer)) {}

  void StartEpoch(uint64_t epoch, uint64_t step) {
    absl::Status status;
    {
      pyb::gil_scoped_release nogil;
      status = consumer_->StartEpoch(epoch, step);
    }
    ThrowIfError(status);
  }

  std::optional<Batch> Next() {
    absl::StatusOr<std::optional<Batch>> batch;
    {
      pyb::gil_scoped_release nogil;
      batch = consumer_->Next();
    }
    return Unwrap(std::move(batch));
  }

  pyb::tuple Position() const {
    const ConsumerPosition p = consumer_->position();
    return pyb::make_tuple(p.epoch, p.step);
  }

  pyb::tuple RegisteredPosition() const {
    const ConsumerPosition p = consumer_->registered_position();
    return pyb::make_tuple(p.epoch, p.step);
  }

  // The dispatcher said at registration that the job was done (JobSummary).
  bool DoneAtRegistration() const { return consumer_->job().done_at_registration; }

  void Close() {
    pyb::gil_scoped_release nogil;
    consumer_->Close();
  }

 private:
  std::unique_ptr<Consumer> consumer_;
};

// The JSON the Python API reads and writes has the job settings by their text names ("global",
// "first_come"), the keyword arguments' values, and its counts as numbers, not protobuf's
// strings of 64-bit integers (src/job/job_json.h).
std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  return ToUserJson(message, options, /*int64_as_numbers=*/true);
}

std::unique_ptr<rpc::DispatcherClient> Client(const std::string& address, const std::string& token,
                                              double timeout) {
  const absl::Duration t = absl::Seconds(timeout);
  return rpc::DispatcherClient::Create(
      address,
      {.auth_token = rpc::ResolveAuthToken(token), .call_timeout = t, .timeout = t, .tls = {}});
}

// The dispatcher's GetJob for `name`, asked without the GIL; an error raises.
v1::GetJobResponse GetJob(const std::string& dispatcher, const std::string& name,
                          const std::string& auth_token, double timeout) {
  v1::GetJobRequest request;
  request.set_name(name);
  absl::StatusOr<v1::GetJobResponse> response;
  {
    pyb::gil_scoped_release nogil;
    response = Client(dispatcher, auth_token, timeout)->GetJob(request);
  }
  return Unwrap(std::move(response));
}

}  // namespace

void BindService(pyb::module_& m) {
  // croupier.logs hands the C++ library's log lines a pipe, which it reads into Python's logging.
  m.def(
      "set_log_fd", [](int fd) { SetLogFd(fd); }, pyb::arg("fd"),
      "Where the C++ library writes its log lines: file descriptor `fd`, or stderr (fd < 0). "
      "Use croupier.logs.");
  pyb::class_<PyConsumer>(m, "_Consumer", "One rank's consumer. Use croupier.Consumer.")
      .def(pyb::init([](const std::string& dispatcher, const std::string& job, uint32_t rank,
                        uint32_t world, const std::string& auth_token, uint32_t prefetch_batches,
                        uint64_t prefetch_bytes, double timeout, bool resume) {
             ConsumerOptions o;
             o.dispatcher = dispatcher;
             o.job = job;
             o.rank = rank;
             o.world = world;
             o.auth_token = auth_token;
             o.prefetch_batches = prefetch_batches;
             o.prefetch_bytes = prefetch_bytes;
             o.timeout = absl::Seconds(timeout);
             o.resume = resume;
             absl::StatusOr<std::unique_ptr<Consumer>> consumer;
             {
               pyb::gil_scoped_release nogil;
               consumer = Consumer::Connect(std::move(o));
             }
             return std::make_unique<PyConsumer>(Unwrap(std::move(consumer)));
           }),
           pyb::arg("dispatcher"), pyb::arg("job"), pyb::arg("rank"), pyb::arg("world"),
           pyb::arg("auth_token"), pyb::arg("prefetch_batches"), pyb::arg("prefetch_bytes"),
           pyb::arg("timeout"), pyb::arg("resume"))
      .def("start_epoch", &PyConsumer::StartEpoch, pyb::arg("epoch"), pyb::arg("step") = 0)
      .def("next", &PyConsumer::Next, "The next Batch of the epoch, or None at its end.")
      .def_property_readonly("position", &PyConsumer::Position)
      .def_property_readonly("registered_position", &PyConsumer::RegisteredPosition)
      .def_property_readonly("done_at_registration", &PyConsumer::DoneAtRegistration)
      .def("close", &PyConsumer::Close);

  // Which batches are a source's (croupier.serve): the job's own arithmetic (src/job/job.h), so
  // that Python does not compute it a second time.
  pyb::class_<JobConfig>(m, "JobSources")
      .def(pyb::init([](const PyJob& job) { return job.config; }), pyb::arg("job"),
           "The sources of a croupier.Job (create_job's).")
      .def("source_of", &JobConfig::SourceOf, pyb::arg("epoch"), pyb::arg("batch"),
           "Which source makes global batch `batch` of `epoch`.")
      .def("ordinal", &JobConfig::SourceOrdinal, pyb::arg("epoch"), pyb::arg("batch"),
           "Where global batch `batch` comes among the batches its source yields in `epoch`.")
      .def("last_task_end", &JobConfig::LastTaskEnd, pyb::arg("source"),
           "(epoch, end batch) of the last task `source` makes, or None (unbounded job, or a "
           "source with no task).");

  m.def(
      "create_job",
      [](const std::string& dispatcher, const std::string& spec_json, bool exist_ok,
         const std::string& auth_token, double timeout) {
        v1::CreateJobRequest request;
        absl::Status parsed = FromUserJson(spec_json, request.mutable_spec());
        if (!parsed.ok()) {
          ThrowIfError(absl::InvalidArgumentError("job spec: " + std::string(parsed.message())));
        }
        request.set_exist_ok(exist_ok);
        absl::StatusOr<v1::CreateJobResponse> response;
        {
          pyb::gil_scoped_release nogil;
          response = Client(dispatcher, auth_token, timeout)->CreateJob(request);
        }
        return MakeJob(std::move(*Unwrap(std::move(response)).mutable_job()));
      },
      pyb::arg("dispatcher"), pyb::arg("spec_json"), pyb::arg("exist_ok"), pyb::arg("auth_token"),
      pyb::arg("timeout"), "Creates a job; returns it as a Job.");

  m.def(
      "dispatcher_status",
      [](const std::string& dispatcher, const std::string& auth_token, double timeout,
         bool include_job_info, bool omit_clients) {
        v1::StatusRequest request;
        request.set_include_job_info(include_job_info);
        request.set_omit_clients(omit_clients);
        absl::StatusOr<v1::StatusResponse> response;
        {
          pyb::gil_scoped_release nogil;
          response = Client(dispatcher, auth_token, timeout)->GetStatus(request);
        }
        v1::StatusResponse status = Unwrap(std::move(response));
        std::vector<PyJob> jobs;
        for (v1::JobInfo& info : *status.mutable_jobs()) jobs.push_back(MakeJob(std::move(info)));
        status.clear_jobs();
        return std::make_pair(ToJson(status), std::move(jobs));
      },
      pyb::arg("dispatcher"), pyb::arg("auth_token"), pyb::arg("timeout"),
      pyb::arg("include_job_info") = false, pyb::arg("omit_clients") = false,
      "(the dispatcher's status as JSON: job summaries, producers, consumers (none with "
      "omit_clients); [Job]: each job, with include_job_info, else []).");

  m.def(
      "get_job",
      [](const std::string& dispatcher, const std::string& name, const std::string& auth_token,
         double timeout) { return MakeJob(GetJob(dispatcher, name, auth_token, timeout)); },
      pyb::arg("dispatcher"), pyb::arg("name"), pyb::arg("auth_token"), pyb::arg("timeout"),
      "One job (GetJob) as a Job, with its state and its ranks' positions.");

  m.def(
      "delete_job",
      [](const std::string& dispatcher, const std::string& name, bool force,
         const std::string& auth_token, double timeout) {
        v1::DeleteJobRequest request;
        request.set_name(name);
        request.set_force(force);
        absl::StatusOr<v1::DeleteJobResponse> response;
        {
          pyb::gil_scoped_release nogil;
          response = Client(dispatcher, auth_token, timeout)->DeleteJob(request);
        }
        return ToJson(Unwrap(std::move(response)));
      },
      pyb::arg("dispatcher"), pyb::arg("name"), pyb::arg("force"), pyb::arg("auth_token"),
      pyb::arg("timeout"), "Deletes a job (DeleteJob); returns the DeleteJobResponse as JSON.");

  m.def(
      "parse_feature_spec",
      [](const std::string& text) {
        pyb::list out;
        for (const FeatureSpec& f : Unwrap(ParseFeatureSpecs(text))) {
          const std::string dtype(DTypeName(f.dtype));
          pyb::object shape = pyb::none();
          if (!f.variable_length) shape = pyb::cast(f.shape);
          out.append(pyb::make_tuple(f.name, dtype, shape));
        }
        return out;
      },
      pyb::arg("text"),
      "[(name, dtype, shape)] of a feature spec; shape is None for a variable length.");

  // The inverse, in the canonical text the dispatcher keeps (FormatFeatureSpecs), so that Python
  // does not write feature specs of its own.
  m.def(
      "format_feature_spec",
      [](const std::vector<
          std::tuple<std::string, std::string, std::optional<std::vector<int64_t>>>>& features) {
        std::vector<FeatureSpec> specs;
        for (const auto& [name, dtype, shape] : features) {
          FeatureSpec f;
          f.name = name;
          f.dtype = Unwrap(ParseDType(dtype));
          f.variable_length = !shape.has_value();
          if (shape.has_value()) f.shape = *shape;
          specs.push_back(std::move(f));
        }
        ThrowIfError(ValidateFeatureSpecs(specs));
        return FormatFeatureSpecs(specs);
      },
      pyb::arg("features"),
      "The feature spec text of [(name, dtype, shape)]; shape None for a variable length.");

  // The dtypes of numeric columns, by the names numpy and croupier both give them (DTypeName):
  // every DType but bytes.
  pyb::tuple numeric(kLastDTypeCode);
  for (uint8_t code = 1; code <= kLastDTypeCode; ++code) {
    numeric[code - 1] = pyb::str(std::string(DTypeName(static_cast<DType>(code))));
  }
  m.attr("NUMERIC_DTYPES") = numeric;
}

}  // namespace croupier::py
