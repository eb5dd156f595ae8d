// Each file of the extension module adds its part of croupier._croupier.
#ifndef CROUPIER_PYTHON_SRC_BINDINGS_H_
#define CROUPIER_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace croupier::py {

void BindIo(pybind11::module_& m);     // py_io.cc: TFRecord files, indexes, Example parsing
void BindPlan(pybind11::module_& m);   // py_plan.cc: epoch plans
void BindBatch(pybind11::module_& m);  // py_batch.cc: batches as numpy views
void BindService(pybind11::module_& m);  // py_service.cc: the consumer and dispatcher calls

}  // namespace croupier::py

#endif  // CROUPIER_PYTHON_SRC_BINDINGS_H_
