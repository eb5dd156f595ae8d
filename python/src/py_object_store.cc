// croupier._croupier._ObjectStore: croupier's S3 client (src/s3) for the Python sources that read
// objects (croupier.object_store, ParquetSource): the same environment, credentials, retries,
// errors and counters as the producers' own reads of s3:// paths.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/s3/credentials.h"
#include "src/s3/s3_client.h"
#include "src/s3/s3_env.h"
#include "src/s3/s3_options.h"
#include "src/s3/s3_stats.h"
#include "src/s3/shared_reads.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

std::map<std::string, uint64_t> StatsDict(const s3::S3Stats& s) {
  return {{"requests", s.requests}, {"bytes", s.bytes},
          {"retries", s.retries},   {"throttles", s.throttles},
          {"failures", s.failures}, {"ranges", s.ranges},
          {"shared", s.shared},     {"shared_bytes", s.shared_bytes}};
}

// A client made from the environment as it is when the object is made. Used from many Python
// threads (a ParquetSource's record threads) and in processes forked from the one that made it:
// a fork's child has none of the client's threads and shares its connections with the parent,
// so a call in another process than the client's first makes a new client there from the same
// options, and leaves the inherited one untouched for good (its destructor would wait for
// threads that the child does not have).
class PyObjectStore {
 public:
  PyObjectStore() {
    options_ = Unwrap(s3::S3OptionsFromEnvironment(s3::ProcessEnvironment()));
    MakeClient();
  }

  // Every object `pattern` names (a glob over a prefix, or one key), sorted, each as
  // (path, size, etag); empty when none matches.
  std::vector<std::tuple<std::string, uint64_t, std::string>> List(const std::string& pattern) {
    std::shared_ptr<s3::S3Env> env = Env();
    absl::StatusOr<std::vector<::croupier::Env::Listed>> listed;
    {
      pyb::gil_scoped_release nogil;
      listed = env->GlobWithStats(pattern);
    }
    std::vector<std::tuple<std::string, uint64_t, std::string>> out;
    for (const ::croupier::Env::Listed& l : Unwrap(std::move(listed))) {
      out.emplace_back(l.path, l.stat ? l.stat->size : 0, l.stat ? l.stat->etag : "");
    }
    return out;
  }

  // `length` bytes at `offset` of object `path` of `size` bytes, as listed with `etag` (an
  // object written again since fails with DATA_LOSS naming it); fewer only past its end.
  pyb::bytes Read(const std::string& path, uint64_t size, const std::string& etag, uint64_t offset,
                  uint64_t length) {
    std::shared_ptr<s3::S3Env> env = Env();
    if (offset >= size) return pyb::bytes();
    length = std::min(length, size - offset);
    pyb::object out = pyb::reinterpret_steal<pyb::object>(
        PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(length)));
    if (!out) throw pyb::error_already_set();
    char* dst = PyBytes_AS_STRING(out.ptr());  // ours alone until returned
    s3::SharedReads* shared = s3::ProcessSharedReads();  // read with the GIL held
    auto fetch = [&](char* to) -> absl::Status {
      absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
          env->OpenKnown(path, FileStat{size, 0, etag}, ::croupier::Env::ReadPattern::kRandom);
      if (!file.ok()) return file.status();
      absl::StatusOr<size_t> got = (*file)->Read(offset, length, to);
      if (!got.ok()) return got.status();
      if (*got != length) {
        return absl::DataLossError(absl::StrCat(path, ": ", *got, " bytes at offset ", offset,
                                                " where ", length, " were expected (the ", size,
                                                "-byte object is shorter)"));
      }
      return absl::OkStatus();
    };
    absl::Status status;
    {
      pyb::gil_scoped_release nogil;
      if (shared == nullptr) {
        status = fetch(dst);
      } else {
        absl::StatusOr<s3::SharedReads::Served> served =
            shared->Read(absl::StrCat(path, " bytes [", offset, ", ", offset + length, ") of ",
                                      size, ", ETag ", etag),
                         length, dst, fetch);
        if (!served.ok()) {
          status = served.status();
        } else if (*served == s3::SharedReads::Served::kShared) {
          s3::ProcessS3Counters().AddShared(length);
        }
      }
    }
    ThrowIfError(status);
    return pyb::reinterpret_borrow<pyb::bytes>(out);
  }

  std::map<std::string, uint64_t> Stats() { return StatsDict(Env()->client().stats()); }

 private:
  // Called with the GIL held: a replacement after a fork is made once.
  std::shared_ptr<s3::S3Env> Env() {
    if (pid_ != ::getpid()) {
      new std::shared_ptr<s3::S3Env>(std::move(env_));  // left as it is, never destroyed
      MakeClient();
    }
    return env_;
  }

  void MakeClient() {
    std::unique_ptr<s3::S3Client> client = Unwrap(s3::S3Client::Create(options_));
    env_ = std::make_shared<s3::S3Env>(std::shared_ptr<s3::S3Client>(std::move(client)));
    pid_ = ::getpid();
  }

  s3::S3Options options_;
  std::shared_ptr<s3::S3Env> env_;
  pid_t pid_ = 0;
};

}  // namespace

void BindObjectStore(pyb::module_& m) {
  pyb::class_<PyObjectStore>(m, "_ObjectStore")
      .def(pyb::init<>())
      .def("list", &PyObjectStore::List, pyb::arg("pattern"))
      .def("read", &PyObjectStore::Read, pyb::arg("path"), pyb::arg("size"), pyb::arg("etag"),
           pyb::arg("offset"), pyb::arg("length"))
      .def("stats", &PyObjectStore::Stats);
  m.def("_s3_process_stats", [] { return StatsDict(s3::ProcessS3Counters().Snapshot()); });
  // The reads of every _ObjectStore of this process and of those forked from it after this call
  // go through a SharedReads in `directory` (src/s3/shared_reads.h), of the capacity that
  // CROUPIER_S3_SHARED_READ_BYTES gives, at most `most`; "" turns it off. Returns the capacity
  // (0: off).
  m.def(
      "_s3_share_reads",
      [](const std::string& directory, uint64_t most) -> uint64_t {
        uint64_t capacity = 0;
        if (!directory.empty()) {
          capacity =
              std::min(most, Unwrap(s3::SharedReadBytesFromEnvironment(s3::ProcessEnvironment())));
        }
        s3::SetProcessSharedReads(directory, capacity);
        return directory.empty() ? 0 : capacity;
      },
      pyb::arg("directory"), pyb::arg("most"));
}

}  // namespace croupier::py
