// The one place where absl::Status becomes a Python exception: the class from croupier.errors
// that matches the code, with the C++ message unchanged.
#ifndef CROUPIER_PYTHON_SRC_STATUS_H_
#define CROUPIER_PYTHON_SRC_STATUS_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace croupier::py {

// Raises the matching croupier.errors exception if `status` is not OK. Needs the GIL.
inline void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  pybind11::gil_scoped_acquire gil;
  pybind11::object errors = pybind11::module_::import("croupier.errors");
  pybind11::object cls = errors.attr("BY_CODE").attr("get")(static_cast<int>(status.code()),
                                                           errors.attr("UnknownError"));
  PyErr_SetString(cls.ptr(), std::string(status.message()).c_str());
  throw pybind11::error_already_set();
}

template <typename T>
T Unwrap(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

}  // namespace croupier::py

#endif  // CROUPIER_PYTHON_SRC_STATUS_H_
