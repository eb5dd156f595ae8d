// Each file of the extension module adds its part of croupier._croupier.
#ifndef CROUPIER_PYTHON_SRC_BINDINGS_H_
#define CROUPIER_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>

#include "croupier/batch.h"

namespace croupier::py {

void BindIo(pybind11::module_& m);     // py_io.cc: TFRecord files, indexes, Example parsing
void BindPlan(pybind11::module_& m);   // py_plan.cc: epoch plans
void BindBatch(pybind11::module_& m);  // py_batch.cc: batches as numpy views
void BindService(pybind11::module_& m);  // py_service.cc: the consumer and dispatcher calls
void BindProduce(pybind11::module_& m);  // py_produce.cc: the producer of a map job

// A Batch holding a copy of `columns`: (name, dtype, variable, dims, values, offsets or None,
// row splits or None) each, as croupier/source.py lays them out (py_batch.cc).
croupier::Batch BatchFromColumns(uint64_t num_records, const pybind11::list& columns);

}  // namespace croupier::py

#endif  // CROUPIER_PYTHON_SRC_BINDINGS_H_
