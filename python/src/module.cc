// croupier._croupier: the native half of the Python package. Every function here is a thin
// adapter over the C++ library; the logic and its tests live in src/.
#include <pybind11/pybind11.h>

#include "python/src/bindings.h"
#include "src/common/mutex_checks.h"

PYBIND11_MODULE(_croupier, m) {
  croupier::ReleaseMutexChecks();
  m.doc() = "croupier's C++ core. Use the croupier package rather than this module.";
  croupier::py::BindIo(m);
  croupier::py::BindPlan(m);
  croupier::py::BindBatch(m);
  croupier::py::BindJob(m);
  croupier::py::BindJobSpec(m);
  croupier::py::BindService(m);
  croupier::py::BindProducer(m);
  croupier::py::BindWorkerPool(m);
  croupier::py::BindTestCluster(m);
  croupier::py::BindObjectStore(m);
}
