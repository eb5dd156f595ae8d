// croupier._croupier.InProcessCluster: the in-process cluster (src/testing/test_cluster.h) for
// tests written in Python. A dispatcher behind its real gRPC server on 127.0.0.1 and TFRecord
// producers with their real data servers, all threads of this process, reached by the same calls
// as a deployment (croupier.testing wraps it). Each blocking call releases the GIL.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/testing/test_cluster.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// Thread-compatible; close() is idempotent, and every other call after it raises
// FailedPreconditionError.
class PyInProcessCluster {
 public:
  explicit PyInProcessCluster(testing::TestClusterOptions options) {
    absl::StatusOr<std::unique_ptr<testing::TestCluster>> started;
    {
      pyb::gil_scoped_release nogil;
      started = testing::TestCluster::Start(std::move(options));
    }
    cluster_ = Unwrap(std::move(started));
  }

  std::string address() { return Open().address(); }
  std::string dir() { return Open().dir(); }
  int metrics_port() { return Open().metrics_port(); }
  size_t num_producers() { return Open().num_producers(); }

  size_t AddProducer() {
    testing::TestCluster& cluster = Open();
    absl::StatusOr<size_t> index;
    {
      pyb::gil_scoped_release nogil;
      index = cluster.AddProducer();
    }
    return Unwrap(std::move(index));
  }

  std::string ProducerAddress(size_t i) { return Producer(i).data_address(); }

  void StopProducer(size_t i) {
    Producer(i);  // OUT_OF_RANGE for an index no producer has
    testing::TestCluster& cluster = Open();
    pyb::gil_scoped_release nogil;
    cluster.StopProducer(i);
  }

  void Close() {
    pyb::gil_scoped_release nogil;
    cluster_.reset();
  }

 private:
  testing::TestCluster& Open() {
    if (cluster_ == nullptr) {
      ThrowIfError(absl::FailedPreconditionError("the in-process cluster is closed"));
    }
    return *cluster_;
  }

  ProducerNode& Producer(size_t i) {
    testing::TestCluster& cluster = Open();
    if (i >= cluster.num_producers()) {
      ThrowIfError(absl::OutOfRangeError(absl::StrCat(
          "producer ", i, " of an in-process cluster of ", cluster.num_producers(), " producers")));
    }
    return *cluster.producer(i);
  }

  std::unique_ptr<testing::TestCluster> cluster_;
};

}  // namespace

void BindTestCluster(pyb::module_& m) {
  pyb::class_<PyInProcessCluster>(m, "InProcessCluster")
      .def(pyb::init([](int producers, int64_t heartbeat_interval_ms, int64_t producer_timeout_ms,
                        int64_t consumer_timeout_ms, uint32_t rounds_per_task, bool shm,
                        int threads, int64_t job_retention_ms, int metrics_port) {
             if (producers < 0 || heartbeat_interval_ms <= 0 || producer_timeout_ms <= 0 ||
                 consumer_timeout_ms <= 0 || threads <= 0 || job_retention_ms < 0 ||
                 metrics_port < -1 || metrics_port > 65535) {
               ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
                   "an in-process cluster needs producers >= 0, positive times and threads, a "
                   "job retention >= 0 (0: forever) and a metrics port of -1 (none), 0 (any) or "
                   "a port: producers=", producers, ", heartbeat_interval_ms=",
                   heartbeat_interval_ms, ", producer_timeout_ms=", producer_timeout_ms,
                   ", consumer_timeout_ms=", consumer_timeout_ms, ", threads=", threads,
                   ", job_retention_ms=", job_retention_ms, ", metrics_port=", metrics_port)));
             }
             testing::TestClusterOptions o;
             o.producers = producers;
             o.heartbeat_interval = absl::Milliseconds(heartbeat_interval_ms);
             o.producer_timeout = absl::Milliseconds(producer_timeout_ms);
             o.consumer_timeout = absl::Milliseconds(consumer_timeout_ms);
             o.rounds_per_task = rounds_per_task;
             if (job_retention_ms > 0) o.job_retention = absl::Milliseconds(job_retention_ms);
             o.metrics_port = metrics_port;
             o.control_plane = testing::ControlPlaneKind::kGrpc;
             o.producer.shm = shm;
             o.producer.runner.threads = threads;
             return std::make_unique<PyInProcessCluster>(std::move(o));
           }),
           pyb::kw_only(), pyb::arg("producers") = 1, pyb::arg("heartbeat_interval_ms") = 100,
           pyb::arg("producer_timeout_ms") = 1000, pyb::arg("consumer_timeout_ms") = 5000,
           pyb::arg("rounds_per_task") = 0, pyb::arg("shm") = true, pyb::arg("threads") = 2,
           pyb::arg("job_retention_ms") = 0, pyb::arg("metrics_port") = -1)
      .def_property_readonly("address", &PyInProcessCluster::address)
      .def_property_readonly("metrics_port", &PyInProcessCluster::metrics_port)
      .def_property_readonly("dir", &PyInProcessCluster::dir)
      .def_property_readonly("num_producers", &PyInProcessCluster::num_producers)
      .def("add_producer", &PyInProcessCluster::AddProducer)
      .def("producer_address", &PyInProcessCluster::ProducerAddress, pyb::arg("index"))
      .def("stop_producer", &PyInProcessCluster::StopProducer, pyb::arg("index"))
      .def("close", &PyInProcessCluster::Close);
}

}  // namespace croupier::py
