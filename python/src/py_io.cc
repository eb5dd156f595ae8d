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
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/io/indexed_dataset.h"

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

// IndexedDatasetWriter for Python: documents as any sequence of integers.
class PyIndexedDatasetWriter {
 public:
  PyIndexedDatasetWriter(const std::string& prefix, const std::string& dtype) {
    TokenDType type = TokenDType::kInt32;
    if (dtype == "uint16") {
      type = TokenDType::kUInt16;
    } else if (dtype != "int32") {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("dtype '", dtype, "' is not a token dtype; write int32 or uint16")));
    }
    writer_ = Unwrap(IndexedDatasetWriter::Create(prefix, type));
  }
  void Add(const pyb::object& tokens) {
    auto array = pyb::array_t<int64_t, pyb::array::c_style | pyb::array::forcecast>::ensure(tokens);
    if (!array || array.ndim() != 1) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("document ", writer_->num_documents(), " is not a sequence of token ids")));
    }
    document_.clear();
    for (int64_t i = 0; i < array.shape(0); ++i) {
      const int64_t token = array.at(i);
      if (token < std::numeric_limits<int32_t>::min() ||
          token > std::numeric_limits<int32_t>::max()) {
        ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
            "document ", writer_->num_documents(), " token ", i, " is ", token, ": not an int32")));
      }
      document_.push_back(static_cast<int32_t>(token));
    }
    pyb::gil_scoped_release nogil;
    ThrowIfError(writer_->Add(document_));
  }
  void Finish() {
    pyb::gil_scoped_release nogil;
    ThrowIfError(writer_->Finish());
  }
  uint64_t num_documents() const { return writer_->num_documents(); }
  uint64_t num_tokens() const { return writer_->num_tokens(); }

 private:
  std::unique_ptr<IndexedDatasetWriter> writer_;
  std::vector<int32_t> document_;
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

  pyb::class_<IndexedDataset, std::shared_ptr<IndexedDataset>>(
      m, "IndexedDataset",
      "A Megatron-LM indexed dataset (PREFIX.idx, PREFIX.bin) opened for reading, its index "
      "checked: lengths, and read(document) of a document's tokens.")
      .def(pyb::init([](const std::string& prefix) {
             std::unique_ptr<IndexedDataset> dataset;
             {
               pyb::gil_scoped_release nogil;
               dataset = Unwrap(IndexedDataset::Open(prefix));
             }
             return std::shared_ptr<IndexedDataset>(std::move(dataset));
           }),
           pyb::arg("prefix"))
      .def_property_readonly("prefix", &IndexedDataset::prefix)
      .def_property_readonly(
          "dtype", [](const IndexedDataset& d) { return std::string(TokenDTypeName(d.dtype())); })
      .def_property_readonly("num_documents", &IndexedDataset::num_documents)
      .def_property_readonly("num_tokens", &IndexedDataset::num_tokens)
      .def_property_readonly("lengths",
                             [](const IndexedDataset& d) {
                               auto lengths = d.lengths();
                               return pyb::array_t<uint32_t>(lengths.size(), lengths.data());
                             })
      .def(
          "read",
          [](const IndexedDataset& d, uint64_t document, uint32_t offset, int64_t count) {
            if (document >= d.num_documents()) {
              ThrowIfError(absl::OutOfRangeError(
                  absl::StrCat(d.prefix(), ": document ", document, " of ", d.num_documents())));
            }
            const uint32_t length = d.lengths()[document];
            const uint64_t n = count < 0 ? (offset <= length ? length - offset : 0) : count;
            pyb::array_t<int32_t> out(n);
            int32_t* data = out.mutable_data();
            {
              pyb::gil_scoped_release nogil;
              ThrowIfError(d.Read(document, offset, absl::MakeSpan(data, n)));
            }
            return out;
          },
          pyb::arg("document"), pyb::arg("offset") = 0, pyb::arg("count") = -1,
          "Tokens [offset, offset + count) of a document as int32 (count -1: to its end).");

  pyb::class_<PyIndexedDatasetWriter>(
      m, "IndexedDatasetWriter",
      "Writes a Megatron-LM indexed dataset (PREFIX.bin, PREFIX.idx) a document at a time: "
      "add(tokens) for each document, then finish(), which writes the index. As a context "
      "manager, a block that ends without an exception finishes it.")
      .def(pyb::init<const std::string&, const std::string&>(), pyb::arg("prefix"),
           pyb::arg("dtype") = "int32")
      .def("add", &PyIndexedDatasetWriter::Add, pyb::arg("tokens"),
           "Appends one document: a sequence of token ids.")
      .def("finish", &PyIndexedDatasetWriter::Finish)
      .def_property_readonly("num_documents", &PyIndexedDatasetWriter::num_documents)
      .def_property_readonly("num_tokens", &PyIndexedDatasetWriter::num_tokens)
      .def("__enter__", [](pyb::object self) { return self; })
      .def("__exit__", [](PyIndexedDatasetWriter& w, pyb::object type, pyb::object, pyb::object) {
        if (type.is_none()) w.Finish();
        return false;
      });

  m.def(
      "write_indexed_dataset",
      [](const std::string& prefix, const pyb::iterable& documents, const std::string& dtype) {
        PyIndexedDatasetWriter writer(prefix, dtype);
        for (pyb::handle d : documents) writer.Add(pyb::reinterpret_borrow<pyb::object>(d));
        writer.Finish();
      },
      pyb::arg("prefix"), pyb::arg("documents"), pyb::arg("dtype") = "int32",
      "Writes documents (each a sequence of token ids) as a Megatron-LM indexed dataset, "
      "PREFIX.bin and PREFIX.idx, of int32 or uint16 tokens: a tokens job's source.");

  m.def(
      "write_token_lengths",
      [](const std::string& prefix,
         const pyb::array_t<int64_t, pyb::array::c_style | pyb::array::forcecast>& lengths) {
        TokenIndex index;
        index.dtype = TokenDType::kInt32;
        uint64_t at = 0;
        for (pyb::ssize_t d = 0; d < lengths.size(); ++d) {
          const int64_t n = lengths.data()[d];
          if (n < 0 || n > std::numeric_limits<int32_t>::max()) {
            ThrowIfError(absl::InvalidArgumentError(
                absl::StrCat("document ", d, " has length ", n, ", not 0 to 2^31 - 1")));
          }
          index.lengths.push_back(static_cast<uint32_t>(n));
          index.pointers.push_back(at);
          at += static_cast<uint64_t>(n) * sizeof(int32_t);
        }
        const std::string bytes = EncodeTokenIndex(index);
        pyb::gil_scoped_release nogil;
        ThrowIfError(Env::Default()->WriteFileAtomically(prefix + ".idx", bytes));
      },
      pyb::arg("prefix"), pyb::arg("lengths"),
      "Writes PREFIX.idx, the index of documents of these lengths (int32 tokens) with no .bin: "
      "the lengths of a text source, which its producers tokenize (croupier.tokens.TextSource).");

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
