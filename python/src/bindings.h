// Each file of the extension module adds its part of croupier._croupier.
#ifndef CROUPIER_PYTHON_SRC_BINDINGS_H_
#define CROUPIER_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "croupier/batch.h"
#include "proto/croupier.pb.h"
#include "src/job/job.h"

namespace croupier::py {

void BindIo(pybind11::module_& m);     // py_io.cc: TFRecord files, indexes, Example parsing
void BindPlan(pybind11::module_& m);   // py_plan.cc: epoch plans
void BindBatch(pybind11::module_& m);  // py_batch.cc: batches as numpy views
void BindService(pybind11::module_& m);  // py_service.cc: the consumer and dispatcher calls
void BindProducer(pybind11::module_& m);    // py_producer.cc: the producer of one job
void BindWorkerPool(pybind11::module_& m);  // py_worker_pool.cc: a map job's worker processes
void BindJob(pybind11::module_& m);      // py_job.cc: croupier.Job
void BindJobSpec(pybind11::module_& m);  // py_job_spec.cc: croupier.JobSpec
void BindTestCluster(pybind11::module_& m);  // py_test_cluster.cc: the in-process cluster
void BindObjectStore(pybind11::module_& m);  // py_object_store.cc: S3 reads for Python sources

// croupier.Job: a JobInfo and its typed settings (parsed once), with the state and the ranks'
// positions when the dispatcher's GetJob gave them. A copyable value.
// croupier.JobSpec: a job's settings going in (py_job_spec.cc).
struct PyJobSpec {
  v1::JobSpec spec;
};

struct PyJob {
  v1::JobInfo info;
  JobConfig config;
  std::optional<std::string> state;  // "idle", "running", "done"
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> rank_positions;  // (rank, epoch, step)
};
// The Job of `info` (create_job's answer) or of a GetJob answer; a JobInfo whose settings do not
// parse raises InvalidArgumentError (py_job.cc).
PyJob MakeJob(v1::JobInfo info);
PyJob MakeJob(v1::GetJobResponse response);

// A Batch holding a copy of `columns`: (name, dtype, variable, dims, values, offsets or None,
// row splits or None) each, as croupier/columns.py lays them out (py_batch.cc). With `allocate`
// (not None), the batch is laid out in the writable buffer allocate(size) returns, which the
// Batch then views and keeps alive. Called with the GIL.
croupier::Batch BatchFromColumns(uint64_t num_records, const pybind11::list& columns,
                                 const pybind11::object& allocate = pybind11::none());

// A Python object that C++ threads may hold and drop without the GIL (py_producer.cc).
std::shared_ptr<pybind11::object> HoldPython(pybind11::object object);

}  // namespace croupier::py

#endif  // CROUPIER_PYTHON_SRC_BINDINGS_H_
