// croupier.JobSpec: a job's settings going in, typed as croupier.Job is coming out. Its fields
// are JobSpec's (proto/croupier.proto), its settings are named as the command line names them
// ("global", "first_come", "best_fit"), and normalized() applies the dispatcher's own checks and
// defaults (NormalizeJobSpec), so Python states none of them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "google/protobuf/util/json_util.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/dispatcher/job_spec.h"
#include "src/job/job_json.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

std::string SpecJson(const v1::JobSpec& spec) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  return ToUserJson(spec, options, /*int64_as_numbers=*/true);
}

v1::JobSpec SpecOf(const std::string& json) {
  v1::JobSpec spec;
  absl::Status parsed = FromUserJson(json, &spec);
  if (!parsed.ok())
    ThrowIfError(absl::InvalidArgumentError("job spec: " + std::string(parsed.message())));
  return spec;
}

pyb::object Loads(const std::string& json) {
  return pyb::module_::import("json").attr("loads")(json);
}

}  // namespace

void BindJobSpec(pyb::module_& m) {
  pyb::class_<PyJobSpec>(
      m, "JobSpec",
      "A job's settings, as create_job sends them: JobSpec(name=..., files=[...], features=..., "
      "batch_size=..., num_consumers=..., ...) with the fields of proto/croupier.proto's JobSpec "
      "(a tokens job's in tokens={...}), the settings by name (\"global\", \"first_come\", "
      "\"best_fit\"). A field left out is the dispatcher's default; normalized() gives the spec as "
      "the dispatcher will hold it, or raises InvalidArgumentError naming what it refuses.")
      .def(pyb::init([](const pyb::kwargs& fields) {
             const std::string json =
                 pyb::str(pyb::module_::import("json").attr("dumps")(fields)).cast<std::string>();
             return PyJobSpec{SpecOf(json)};
           }),
           "Fields as keywords; an unknown field or a value of the wrong type is "
           "InvalidArgumentError naming it.")
      .def_static(
          "from_json", [](const std::string& json) { return PyJobSpec{SpecOf(json)}; },
          pyb::arg("json"), "The JobSpec of its JSON (to_json's).")
      .def(
          "normalized",
          [](const PyJobSpec& s) {
            absl::StatusOr<v1::JobSpec> normal = NormalizeJobSpec(s.spec);
            return PyJobSpec{Unwrap(std::move(normal))};
          },
          "The spec with the dispatcher's checks applied and its defaults filled in (those "
          "that need no data: files are globbed and read only by create_job).")
      .def("to_json", [](const PyJobSpec& s) { return SpecJson(s.spec); })
      .def(
          "to_dict", [](const PyJobSpec& s) { return Loads(SpecJson(s.spec)); },
          "Every field, by its name.")
      .def("__getattr__",
           [](const PyJobSpec& s, const std::string& name) -> pyb::object {
             pyb::dict fields = Loads(SpecJson(s.spec));
             if (!fields.contains(name)) {
               throw pyb::attribute_error("JobSpec has no field '" + name + "'");
             }
             return fields[pyb::str(name)];
           })
      .def("__eq__",
           [](const PyJobSpec& a, const PyJobSpec& b) {
             return a.spec.SerializeAsString() == b.spec.SerializeAsString();
           })
      .def("__repr__", [](const PyJobSpec& s) { return "JobSpec(" + SpecJson(s.spec) + ")"; });
}

}  // namespace croupier::py
