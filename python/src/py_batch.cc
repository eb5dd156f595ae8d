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

// The bytes of a buffer-protocol object (bytes, a contiguous numpy array) as a view. The object
// must outlive the view.
namespace {
absl::string_view BufferBytes(const pyb::buffer& b) {
  const pyb::buffer_info info = b.request();
  if (info.ndim > 1 && info.strides.back() != info.itemsize) {
    ThrowIfError(absl::InvalidArgumentError("an array handed to a batch must be contiguous"));
  }
  return absl::string_view(static_cast<const char*>(info.ptr),
                           static_cast<size_t>(info.size * info.itemsize));
}

// A view of a uint64 array (None: empty). A contiguous numpy uint64 array, as
// croupier/source.py makes, is viewed without a copy; anything else is converted once into
// `keep`, which must outlive the span.
absl::Span<const uint64_t> U64Span(const pyb::object& o, pyb::array_t<uint64_t>& keep) {
  if (o.is_none()) return {};
  keep = pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>::ensure(o);
  if (!keep) ThrowIfError(absl::InvalidArgumentError("offsets and row splits must be integers"));
  return absl::MakeConstSpan(keep.data(), static_cast<size_t>(keep.size()));
}

}  // namespace

Batch BatchFromColumns(uint64_t num_records, const pyb::list& columns) {
  // (name, dtype, variable, dims, values, offsets or None, splits or None) per column.
  struct Held {
    std::string name;
    std::vector<int64_t> dims;
    pyb::array_t<uint64_t> offsets, splits;
  };
  std::vector<Held> held(columns.size());
  std::vector<ColumnData> data(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    auto c = columns[i].cast<pyb::tuple>();
    if (c.size() != 7) ThrowIfError(absl::InvalidArgumentError("a column is a 7-tuple"));
    Held& h = held[i];
    ColumnData& d = data[i];
    h.name = c[0].cast<std::string>();
    d.name = h.name;
    const std::string dtype = c[1].cast<std::string>();
    d.dtype = dtype == "int64" ? DType::kInt64 : dtype == "float32" ? DType::kFloat32 : DType::kBytes;
    d.variable_length = c[2].cast<bool>();
    h.dims = c[3].cast<std::vector<int64_t>>();
    d.dims = h.dims;
    d.values = BufferBytes(c[4].cast<pyb::buffer>());
    d.offsets = U64Span(c[5], h.offsets);
    d.row_splits = U64Span(c[6], h.splits);
    d.num_values = d.dtype == DType::kBytes ? (d.offsets.empty() ? 0 : d.offsets.size() - 1)
                                            : d.values.size() / (d.dtype == DType::kInt64 ? 8 : 4);
  }
  absl::StatusOr<Batch> batch;
  {
    pyb::gil_scoped_release nogil;
    batch = Batch::FromColumns(num_records, data);
  }
  return Unwrap(std::move(batch));
}


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

  m.def("batch_from_columns", &BatchFromColumns, pyb::arg("num_records"), pyb::arg("columns"),
        "A Batch holding a copy of the given columns: (name, dtype, variable, dims, values, "
        "offsets, row_splits) each. Use croupier.source.make_batch.");

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
