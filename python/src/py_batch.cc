#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "python/src/bindings.h"
#include "python/src/status.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// The base object of the numpy arrays of one to_dict() call: a capsule holding a copy of the Batch
// (which shares the buffer), so every array stays valid however long the user keeps it. One per
// call, made on first use, shared by all the arrays of that call.
class Owner {
 public:
  explicit Owner(const Batch& batch) : batch_(batch) {}
  const pyb::capsule& get() {
    if (!capsule_) {
      capsule_ = pyb::capsule(new Batch(batch_), [](void* p) { delete static_cast<Batch*>(p); });
    }
    return capsule_;
  }

 private:
  const Batch& batch_;
  pyb::capsule capsule_;
};

// A read-only numpy array of `dtype` over `data` (inside the batch buffer) whose base is the
// owner. A batch's bytes are const: over shared memory they are a read-only mapping of the
// producer's segment, where a write would kill the process, so numpy refuses writes ("assignment
// destination is read-only").
pyb::array View(Owner& owner, const pyb::dtype& dtype, const void* data,
                const std::vector<int64_t>& shape) {
  alignas(kBatchAlignment) static const char kEmpty[kBatchAlignment] = {};
  if (data == nullptr) data = kEmpty;  // an empty column: numpy wants a pointer all the same
  pyb::array array(dtype, std::vector<pyb::ssize_t>(shape.begin(), shape.end()), {}, data,
                   owner.get());
  pyb::detail::array_proxy(array.ptr())->flags &= ~pyb::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

template <typename T>
pyb::array View(Owner& owner, const T* data, const std::vector<int64_t>& shape) {
  return View(owner, pyb::dtype::of<T>(), data, shape);
}

// The numpy dtype of a numeric column: numpy's own, named as croupier names it (bool, int8, ...,
// float64), and ml_dtypes.bfloat16 for bfloat16, which numpy lacks (the same bits: the upper 16 of
// a float32; TensorFlow and JAX use the same type).
pyb::dtype NumpyDType(DType dtype) {
  if (dtype == DType::kBFloat16) {
    return pyb::dtype::from_args(pyb::module_::import("ml_dtypes").attr("bfloat16"));
  }
  return pyb::dtype(std::string(DTypeName(dtype)));
}

// How to_dict() hands out bytes columns.
enum class BytesAs { kList, kBuffer };

BytesAs ParseBytesAs(const std::string& s) {
  if (s == "list") return BytesAs::kList;
  if (s == "buffer") return BytesAs::kBuffer;
  ThrowIfError(
      absl::InvalidArgumentError("bytes_as is '" + s + "'; it must be 'list' or 'buffer'"));
  return BytesAs::kList;
}

// n strings as a list of Python bytes (copies): string i is data[off[i], off[i + 1]).
pyb::list BytesList(const char* data, const int64_t* off, size_t n) {
  pyb::list out(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* b =
        PyBytes_FromStringAndSize(data + off[i], static_cast<Py_ssize_t>(off[i + 1] - off[i]));
    if (b == nullptr) throw pyb::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), b);  // steals the reference
  }
  return out;
}

// A bytes column without a Python object per string: `values` (numpy uint8) holds the strings end
// to end and `offsets` (numpy int64, one more entry than strings) where string i is
// values[offsets[i]:offsets[i + 1]]. Both are views of the batch buffer (the buffer stores the
// offsets as uint64, validated to lie inside it, hence below 2^63: read as int64 they are the same
// numbers). Immutable; the arrays keep the buffer alive.
class BytesColumn {
 public:
  BytesColumn(pyb::array values, pyb::array offsets, const char* data, const int64_t* off, size_t n)
      : values_(std::move(values)), offsets_(std::move(offsets)), data_(data), off_(off), n_(n) {}

  const pyb::array& values() const { return values_; }
  const pyb::array& offsets() const { return offsets_; }
  size_t size() const { return n_; }
  uint64_t nbytes() const { return n_ == 0 ? 0 : static_cast<uint64_t>(off_[n_] - off_[0]); }

  // String i (negative: from the end) as a Python bytes object: one copy of that string.
  pyb::bytes Get(int64_t i) const {
    if (i < 0) i += static_cast<int64_t>(n_);
    if (i < 0 || static_cast<uint64_t>(i) >= n_) {
      throw pyb::index_error("BytesColumn index out of range (" + std::to_string(n_) + " strings)");
    }
    return pyb::bytes(data_ + off_[i], static_cast<size_t>(off_[i + 1] - off_[i]));
  }

  // Every string as a list of bytes: what to_dict(bytes_as="list") gives.
  pyb::list ToList() const { return BytesList(data_, off_, n_); }

 private:
  pyb::array values_, offsets_;
  const char* data_;
  const int64_t* off_;
  size_t n_;
};

pyb::object BytesToPython(Owner& owner, const ColumnView& c, BytesAs as) {
  const char* data = c.values.data();
  // offsets has num_values + 1 entries (relative to the values); guard an empty column anyway.
  static const int64_t kZero = 0;
  const int64_t* off =
      c.offsets.empty() ? &kZero : reinterpret_cast<const int64_t*>(c.offsets.data());
  const size_t n = c.offsets.empty() ? 0 : static_cast<size_t>(c.num_values);
  if (as == BytesAs::kList) return BytesList(data, off, n);
  return pyb::cast(BytesColumn(View<uint8_t>(owner, reinterpret_cast<const uint8_t*>(data),
                                             {static_cast<int64_t>(c.values.size())}),
                               View<int64_t>(owner, off, {static_cast<int64_t>(n + 1)}), data, off,
                               n));
}

pyb::object ColumnToPython(Owner& owner, const Batch& batch, const ColumnView& c, BytesAs as) {
  const uint64_t n = batch.num_records();
  pyb::object values;
  if (c.dtype == DType::kBytes) {
    values = BytesToPython(owner, c, as);
  } else {
    values = View(owner, NumpyDType(c.dtype), c.num_values == 0 ? nullptr : c.values.data(),
                  c.ValuesShape(n));
  }
  if (!c.variable_length) return values;
  return pyb::make_tuple(values, View<uint64_t>(owner, c.row_splits.data(),
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
// croupier/stream/source.py makes, is viewed without a copy; anything else is converted once into
// `keep`, which must outlive the span.
absl::Span<const uint64_t> U64Span(const pyb::object& o, pyb::array_t<uint64_t>& keep) {
  if (o.is_none()) return {};
  keep = pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>::ensure(o);
  if (!keep) ThrowIfError(absl::InvalidArgumentError("offsets and row splits must be integers"));
  return absl::MakeConstSpan(keep.data(), static_cast<size_t>(keep.size()));
}

}  // namespace

Batch BatchFromColumns(uint64_t num_records, const pyb::list& columns,
                       const pyb::object& allocate) {
  // (name, dtype, variable, dims, values, offsets or None, splits or None) per column.
  struct Held {
    std::string name;
    std::vector<int64_t> dims;
    pyb::array_t<uint64_t> offsets, splits;
  };
  std::vector<Held> held(columns.size());
  std::vector<ColumnData> data(columns.size());
  std::vector<std::pair<size_t, pyb::object>> deferred;  // (column, its Stacked)
  for (size_t i = 0; i < columns.size(); ++i) {
    auto c = columns[i].cast<pyb::tuple>();
    if (c.size() != 7) ThrowIfError(absl::InvalidArgumentError("a column is a 7-tuple"));
    Held& h = held[i];
    ColumnData& d = data[i];
    h.name = c[0].cast<std::string>();
    d.name = h.name;
    d.dtype = Unwrap(ParseDType(c[1].cast<std::string>()));
    d.variable_length = c[2].cast<bool>();
    h.dims = c[3].cast<std::vector<int64_t>>();
    d.dims = h.dims;
    if (pyb::hasattr(c[4], "fill_into")) {
      // Deferred values (croupier.columns.Stacked): `nbytes` bytes that fill_into(view) writes
      // straight into the batch buffer.
      d.values = absl::string_view(nullptr, c[4].attr("nbytes").cast<size_t>());
      deferred.emplace_back(i, c[4]);
    } else {
      d.values = BufferBytes(c[4].cast<pyb::buffer>());
    }
    d.offsets = U64Span(c[5], h.offsets);
    d.row_splits = U64Span(c[6], h.splits);
    if (d.dtype == DType::kBytes) {
      d.num_values = d.offsets.empty() ? 0 : d.offsets.size() - 1;
    } else if (d.values.size() % DTypeSize(d.dtype) != 0) {
      ThrowIfError(absl::InvalidArgumentError("column '" + h.name +
                                              "': " + std::to_string(d.values.size()) +
                                              " bytes of values are no " + "whole number of " +
                                              std::string(DTypeName(d.dtype)) + " values"));
    } else {
      d.num_values = d.values.size() / DTypeSize(d.dtype);
    }
  }
  absl::StatusOr<Batch> batch;
  std::optional<pyb::error_already_set> raised;
  // Calls each deferred column's fill_into with a writable view of its values (with the GIL).
  auto fill = [&](size_t column, absl::Span<uint8_t> values) -> absl::Status {
    for (const auto& [index, stacked] : deferred) {
      if (index != column) continue;
      try {
        stacked.attr("fill_into")(pyb::memoryview::from_memory(
            values.data(), static_cast<pyb::ssize_t>(values.size()), /*readonly=*/false));
        return absl::OkStatus();
      } catch (pyb::error_already_set& e) {
        raised = std::move(e);
        return absl::InternalError("fill_into raised");
      }
    }
    return absl::InternalError(absl::StrCat("column ", column, " has no deferred values"));
  };
  if (allocate.is_none() && deferred.empty()) {
    pyb::gil_scoped_release nogil;
    batch = Batch::FromColumns(num_records, data);
  } else if (allocate.is_none()) {
    batch = Batch::FromColumns(num_records, data, &Batch::AllocateBuffer, fill);
    if (raised) throw std::move(*raised);
  } else {
    // The caller's writable buffer of at least the batch's size (a worker's shared-memory slot,
    // croupier.map.zygote): the batch is laid out there. The Batch keeps the buffer object alive.
    auto in_callers_buffer = [&](size_t size) -> std::shared_ptr<uint8_t> {
      try {
        auto held = std::make_shared<pyb::buffer_info>(
            allocate(size).cast<pyb::buffer>().request(/*writable=*/true));
        if (static_cast<size_t>(held->size * held->itemsize) < size ||
            reinterpret_cast<uintptr_t>(held->ptr) % kBatchAlignment != 0) {
          return nullptr;
        }
        return std::shared_ptr<uint8_t>(held, static_cast<uint8_t*>(held->ptr));
      } catch (pyb::error_already_set& e) {
        raised = std::move(e);
        return nullptr;
      }
    };
    batch = Batch::FromColumns(num_records, data, in_callers_buffer, fill);
    if (raised) throw std::move(*raised);
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
          [](const Batch& b, const std::string& bytes_as) {
            const BytesAs as = ParseBytesAs(bytes_as);
            Owner owner(b);
            pyb::dict out;
            for (const ColumnView& c : b.view().columns()) {
              out[pyb::str(c.name.data(), c.name.size())] = ColumnToPython(owner, b, c, as);
            }
            return out;
          },
          pyb::arg("bytes_as") = "list",
          "{name: array}. Fixed shapes: an array [num_records, *shape] of the column's dtype "
          "(bfloat16: ml_dtypes.bfloat16), a view of the batch buffer; bytes: a list of bytes "
          "(bytes_as='list', copies) or a BytesColumn "
          "(bytes_as='buffer': a uint8 values array and an int64 offsets array, views of the "
          "buffer); variable length: a tuple (values, row_splits).");

  pyb::class_<BytesColumn>(m, "BytesColumn", R"doc(The byte strings of one bytes column of a
batch, without a Python object per string: `values` (numpy uint8) holds them end to end and
`offsets` (numpy int64, len + 1 entries) bounds them: string i is
values[offsets[i]:offsets[i + 1]]. Both arrays are views of the batch buffer (no copy) and keep it
alive. len(), indexing (a bytes copy of one string), iteration and tolist() work as on the list
that to_dict() gives by default.)doc")
      .def_property_readonly("values", &BytesColumn::values)
      .def_property_readonly("offsets", &BytesColumn::offsets)
      .def_property_readonly("nbytes", &BytesColumn::nbytes, "The total length of the strings.")
      .def("__len__", &BytesColumn::size)
      .def("__getitem__", &BytesColumn::Get, pyb::arg("i"))
      .def("__iter__", [](const BytesColumn& c) { return pyb::iter(c.ToList()); })
      .def("tolist", &BytesColumn::ToList, "Every string, as a list of bytes (copies).")
      .def("__repr__", [](const BytesColumn& c) {
        return "BytesColumn(" + std::to_string(c.size()) + " strings, " +
               std::to_string(c.nbytes()) + " bytes)";
      });

  m.def("batch_from_columns", &BatchFromColumns, pyb::arg("num_records"), pyb::arg("columns"),
        pyb::arg("allocate") = pyb::none(),
        "A Batch holding a copy of the given columns: (name, dtype, variable, dims, values, "
        "offsets, row_splits) each. Use croupier.columns.make_batch. allocate(size), if given, "
        "returns the writable buffer (64-byte aligned, at least `size` bytes) to lay the batch out "
        "in, which the Batch then views (RESOURCE_EXHAUSTED if it is smaller or unaligned).");

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
