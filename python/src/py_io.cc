#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "croupier/example.h"
#include "croupier/record_index.h"
#include "croupier/tfrecord.h"
#include "src/io/indexed_dataset.h"
#include "python/src/bindings.h"
#include "python/src/status.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// Iterates the records of a TFRecord file as bytes.
class PyRecordReader {
 public:
  explicit PyRecordReader(const std::string& path) {
    pyb::gil_scoped_release nogil;
    reader_ = Unwrap(RecordReader::Open(path));
  }
  pyb::bytes Next() {
    absl::StatusOr<std::optional<absl::string_view>> record;
    {
      pyb::gil_scoped_release nogil;
      record = reader_->Next();
    }
    ThrowIfError(record.status());
    if (!record->has_value()) throw pyb::stop_iteration();
    return pyb::bytes((*record)->data(), (*record)->size());
  }
  uint64_t record_offset() const { return reader_->record_offset(); }

 private:
  std::unique_ptr<RecordReader> reader_;
};

pyb::object FeatureToPython(const Feature& f) {
  switch (f.dtype) {
    case DType::kBytes: {
      pyb::list out;
      for (const auto& b : f.bytes) out.append(pyb::bytes(b));
      return out;
    }
    case DType::kFloat32:
      return pyb::array_t<float>(f.floats.size(), f.floats.data());
    case DType::kInt64:
      return pyb::array_t<int64_t>(f.ints.size(), f.ints.data());
    default:  // a Feature holds bytes, float32 or int64 only
      break;
  }
  return pyb::none();
}

}  // namespace

void BindIo(pyb::module_& m) {
  pyb::class_<PyRecordReader>(m, "TFRecordReader",
                              "Iterates the records of a TFRecord file as bytes, checking both "
                              "CRCs. Corrupt data raises DataLossError naming the byte offset.")
      .def(pyb::init<const std::string&>(), pyb::arg("path"))
      .def("__iter__", [](PyRecordReader& r) -> PyRecordReader& { return r; })
      .def("__next__", &PyRecordReader::Next)
      .def_property_readonly("record_offset", &PyRecordReader::record_offset,
                             "Byte offset of the record returned last.");

  m.def(
      "write_tfrecord",
      [](const std::string& path, const pyb::iterable& records) {
        auto writer = Unwrap(RecordWriter::Create(path));
        for (pyb::handle r : records) {
          std::string_view data = r.cast<std::string_view>();
          ThrowIfError(writer->Write(absl::string_view(data.data(), data.size())));
        }
        ThrowIfError(writer->Close());
      },
      pyb::arg("path"), pyb::arg("records"), "Writes an iterable of bytes as a TFRecord file.");

  m.def(
      "index_records",
      [](const std::string& path, const std::string& cache_dir) {
        std::shared_ptr<const RecordIndex> index;
        {
          pyb::gil_scoped_release nogil;
          IndexCache cache(cache_dir);
          index = Unwrap(cache.Get(path));
        }
        return pyb::array_t<uint64_t>(index->offsets.size(), index->offsets.data());
      },
      pyb::arg("path"), pyb::arg("cache_dir") = "",
      "The byte offset of every record of a TFRecord file, from the index cache (built if "
      "missing or stale).");

  m.def(
      "write_indexed_dataset",
      [](const std::string& prefix, const pyb::iterable& documents, const std::string& dtype) {
        TokenDType type = TokenDType::kInt32;
        if (dtype == "uint16") {
          type = TokenDType::kUInt16;
        } else if (dtype != "int32") {
          ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
              "dtype '", dtype, "' is not a token dtype; write int32 or uint16")));
        }
        std::vector<std::vector<int32_t>> docs;
        for (pyb::handle d : documents) {
          auto array = pyb::array_t<int64_t, pyb::array::c_style | pyb::array::forcecast>::ensure(d);
          if (!array || array.ndim() != 1) {
            ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
                "document ", docs.size(), " is not a sequence of token ids")));
          }
          std::vector<int32_t>& doc = docs.emplace_back();
          for (int64_t i = 0; i < array.shape(0); ++i) {
            const int64_t token = array.at(i);
            if (token < std::numeric_limits<int32_t>::min() ||
                token > std::numeric_limits<int32_t>::max()) {
              ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
                  "document ", docs.size() - 1, " token ", i, " is ", token, ": not an int32")));
            }
            doc.push_back(static_cast<int32_t>(token));
          }
        }
        pyb::gil_scoped_release nogil;
        ThrowIfError(WriteIndexedDataset(prefix, type, docs));
      },
      pyb::arg("prefix"), pyb::arg("documents"), pyb::arg("dtype") = "int32",
      "Writes documents (each a sequence of token ids) as a Megatron-LM indexed dataset, "
      "PREFIX.bin and PREFIX.idx, of int32 or uint16 tokens: a tokens job's source.");

  m.def(
      "parse_example",
      [](pyb::bytes serialized) {
        std::string_view data(serialized);
        Example example = Unwrap(ParseExample(absl::string_view(data.data(), data.size())));
        pyb::dict out;
        for (const auto& [name, feature] : example) out[pyb::str(name)] = FeatureToPython(feature);
        return out;
      },
      pyb::arg("serialized"),
      "Parses a serialized tf.train.Example into {name: numpy array or list of bytes}.");
}

}  // namespace croupier::py
