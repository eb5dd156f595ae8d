#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "croupier/batch.h"
#include "croupier/example.h"
#include "python/src/bindings.h"
#include "python/src/status.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// A numpy array over `data` that keeps the batch buffer alive: its base object holds a copy of
// the Batch (which shares the buffer), so the array stays valid however long the user keeps it.
template <typename T>
pyb::array View(const Batch& batch, const T* data, std::vector<int64_t> shape) {
  pyb::capsule owner(new Batch(batch), [](void* p) { delete static_cast<Batch*>(p); });
  return pyb::array_t<T>(std::vector<pyb::ssize_t>(shape.begin(), shape.end()), data, owner);
}

pyb::object ColumnToPython(const Batch& batch, const ColumnView& c) {
  const uint64_t n = batch.num_records();
  pyb::object values;
  switch (c.dtype) {
    case DType::kFloat32:
      values = View<float>(batch, c.floats().data(), c.ValuesShape(n));
      break;
    case DType::kInt64:
      values = View<int64_t>(batch, c.ints().data(), c.ValuesShape(n));
      break;
    case DType::kBytes: {
      pyb::list strings;  // Python byte strings are copies; numbers above are views
      for (uint64_t i = 0; i < c.num_values; ++i) strings.append(pyb::bytes(std::string(c.bytes(i))));
      values = strings;
      break;
    }
  }
  if (!c.variable_length) return values;
  return pyb::make_tuple(values, View<uint64_t>(batch, c.row_splits.data(),
                                                {static_cast<int64_t>(c.row_splits.size())}));
}

}  // namespace

void BindBatch(pyb::module_& m) {
  pyb::class_<Batch>(m, "Batch", R"doc(A batch: the records' features stacked into one array
per feature, all in one contiguous buffer. Numeric arrays are zero-copy views of that buffer.)doc")
      .def_property_readonly("num_records", &Batch::num_records)
      .def_property_readonly("content_hash", &Batch::ContentHash,
                             "A portable 64-bit hash of the batch's bytes.")
      .def_property_readonly("nbytes", [](const Batch& b) { return b.bytes().size(); })
      .def_property_readonly(
          "buffer_address",
          [](const Batch& b) { return reinterpret_cast<uintptr_t>(b.bytes().data()); },
          "The address of the batch's buffer: the numeric arrays of to_dict() lie inside it.")
      .def(
          "to_dict",
          [](const Batch& b) {
            pyb::dict out;
            for (const ColumnView& c : b.view().columns()) {
              out[pyb::str(std::string(c.name))] = ColumnToPython(b, c);
            }
            return out;
          },
          "{name: array}. Fixed shapes: an array [num_records, *shape]; bytes: a list of bytes; "
          "variable length: a tuple (values, row_splits).");

  m.def(
      "build_batch",
      [](const std::vector<std::string>& records, const std::string& features) {
        std::vector<FeatureSpec> specs = Unwrap(ParseFeatureSpecs(features));
        pyb::gil_scoped_release nogil;
        auto builder = Unwrap(BatchBuilder::Create(std::move(specs)));
        for (size_t i = 0; i < records.size(); ++i) {
          absl::Status s = builder->AddRecord(records[i]);
          if (!s.ok()) {
            ThrowIfError(absl::Status(s.code(), "record " + std::to_string(i) +
                                                    " of the batch: " + std::string(s.message())));
          }
        }
        return Unwrap(builder->Finish());
      },
      pyb::arg("records"), pyb::arg("features"),
      "Decodes serialized tf.train.Examples into a Batch. `features` is a spec such as "
      "'image:bytes,label:int64,emb:float32[16],tokens:int64[*]'.");
}

}  // namespace croupier::py
