// The one producer binding of the Python package, croupier._croupier._Producer: a ProducerNode
// of one job, started from the supply the Python side gives (a map job's make function, a tokens
// job's tokenizer, a stream's feed function), whose life ProducerNode::Serve owns: the job's end,
// dispatcher silence, draining and leaving. croupier.produce(), croupier.tokens.produce() and
// croupier.serve() start one and run() it; Python supplies only the functions.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/node/producer_node.h"
#include "src/producer/worker_pool.h"
#include "src/rpc/grpc_util.h"

namespace croupier::py {

namespace pyb = pybind11;

std::shared_ptr<pyb::object> HoldPython(pyb::object object) {
  return std::shared_ptr<pyb::object>(new pyb::object(std::move(object)), [](pyb::object* o) {
    pyb::gil_scoped_acquire gil;
    delete o;
  });
}

namespace {

// A (code, message) tuple of a Python supply function, code the numeric absl::StatusCode, as a
// Status (INTERNAL for a code out of range).
absl::Status StatusOfTuple(const pyb::tuple& error) {
  const int code = error[0].cast<int>();
  const std::string message = error[1].cast<std::string>();
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::InternalError(message);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

// Whether a supply function's result is a (code, message) error.
bool IsError(const pyb::handle& result) {
  if (!pyb::isinstance<pyb::tuple>(result)) return false;
  auto tuple = pyb::reinterpret_borrow<pyb::tuple>(result);
  return tuple.size() == 2 && pyb::isinstance<pyb::int_>(tuple[0]) &&
         pyb::isinstance<pyb::str>(tuple[1]);
}

// Calls make(epoch, batch, ids) with the GIL: a Batch, or a (code, message) tuple for an error.
// A Python exception that escapes it is INTERNAL naming it.
absl::StatusOr<Batch> CallMake(const pyb::object& make, uint64_t epoch, uint64_t batch,
                               absl::Span<const uint64_t> ids) {
  pyb::gil_scoped_acquire gil;
  try {
    pyb::array_t<uint64_t> array(static_cast<pyb::ssize_t>(ids.size()), ids.data());
    pyb::object result = make(epoch, batch, array);
    if (pyb::isinstance<Batch>(result)) return result.cast<Batch>();
    return StatusOfTuple(result.cast<pyb::tuple>());
  } catch (pyb::error_already_set& e) {
    return absl::InternalError(absl::StrCat("the batch function raised ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the batch function's result: ", e.what()));
  }
}

// Calls tokenize(source, documents) with the GIL: (tokens, lengths), two arrays (int32 and
// integers), or a (code, message) tuple for an error, as CallMake.
absl::StatusOr<TokenizedDocuments> CallTokenize(const pyb::object& tokenize, uint32_t source,
                                                absl::Span<const uint64_t> documents) {
  pyb::gil_scoped_acquire gil;
  try {
    pyb::array_t<uint64_t> array(static_cast<pyb::ssize_t>(documents.size()), documents.data());
    pyb::object result = tokenize(source, array);
    if (IsError(result)) return StatusOfTuple(result.cast<pyb::tuple>());
    auto pair = result.cast<pyb::tuple>();
    auto tokens =
        pair[0].cast<pyb::array_t<int32_t, pyb::array::c_style | pyb::array::forcecast>>();
    auto lengths =
        pair[1].cast<pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>>();
    TokenizedDocuments out;
    out.tokens.assign(tokens.data(), tokens.data() + tokens.size());
    out.lengths.assign(lengths.data(), lengths.data() + lengths.size());
    return out;
  } catch (pyb::error_already_set& e) {
    return absl::InternalError(absl::StrCat("the tokenizer function raised ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the tokenizer function's result: ", e.what()));
  }
}

// Calls feed(epoch, batch) with the GIL: (num_records, columns), laid out as BatchFromColumns
// takes them, or a (code, message) tuple for an error, as CallMake.
absl::StatusOr<Batch> CallFeed(const pyb::object& feed, uint64_t epoch, uint64_t batch) {
  pyb::gil_scoped_acquire gil;
  try {
    pyb::object result = feed(epoch, batch);
    if (IsError(result)) return StatusOfTuple(result.cast<pyb::tuple>());
    auto pair = result.cast<pyb::tuple>();
    return BatchFromColumns(pair[0].cast<uint64_t>(), pair[1].cast<pyb::list>());
  } catch (pyb::error_already_set& e) {
    return absl::InternalError(absl::StrCat("the feed function raised ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the feed function's result: ", e.what()));
  }
}

// Serves at `bind` (advertised as `advertise_host`, empty: the bind address), reaches the
// dispatcher within `timeout` seconds with `auth_token` (empty: $CROUPIER_AUTH_TOKEN), makes
// batches on `threads` threads into a buffer of `buffer_bytes` holding up to `max_tasks` tasks,
// from `supply`; its Prometheus metrics on `bind`:`metrics_port` (0: a free port; -1: none).
ProducerNodeOptions OwnProducerOptions(const std::string& dispatcher, const std::string& auth_token,
                                       int threads, uint64_t buffer_bytes, uint32_t max_tasks,
                                       const std::string& bind, const std::string& advertise_host,
                                       double timeout, int metrics_port, ProducerSupply supply) {
  ProducerNodeOptions o;
  o.dispatcher = dispatcher;
  o.bind_address = bind;
  o.metrics_port = metrics_port;
  o.advertise_host = advertise_host;
  o.auth_token = rpc::ResolveAuthToken(auth_token);
  o.connect_timeout = absl::Seconds(timeout);
  o.runner.threads = threads;
  o.runner.buffer_bytes = buffer_bytes;
  o.runner.max_tasks = max_tasks;
  o.supply = std::move(supply);
  return o;
}

// Thread-compatible; close() may come from any thread, also while run() runs.
class PyProducer {
 public:
  static std::unique_ptr<PyProducer> Start(ProducerNodeOptions options) {
    absl::StatusOr<std::unique_ptr<ProducerNode>> node;
    {
      pyb::gil_scoped_release nogil;
      node = ProducerNode::Start(std::move(options));
    }
    return std::unique_ptr<PyProducer>(new PyProducer(Unwrap(std::move(node))));
  }

  std::string DataAddress() const { return node_->data_address(); }
  int MetricsPort() const { return node_->metrics_port(); }
  uint64_t ProducerId() const { return node_->producer_id(); }

  // ProducerNode::Serve without the GIL. The callables are called with it, owner() every 100 ms,
  // leave_now() every 10 ms while it drains; Python's signal handlers run before each (a
  // signal's exception, or one they raise, ends serving and is raised here once the producer has
  // left).
  pyb::dict Run(pyb::object owner, pyb::object leave_now,
                double dispatcher_timeout, double drain_timeout, double early_end_grace) {
    std::optional<pyb::error_already_set> raised;
    ServeOptions options;
    options.dispatcher_timeout = absl::Seconds(dispatcher_timeout);
    options.drain_timeout = absl::Seconds(std::max(0.0, drain_timeout));
    options.early_end_grace = absl::Seconds(std::max(0.0, early_end_grace));
    options.owner = [&]() -> OwnerSays {
      pyb::gil_scoped_acquire gil;
      if (raised) return OwnerSays::kLeave;
      try {
        if (PyErr_CheckSignals() != 0) throw pyb::error_already_set();
        const int says = owner().cast<int>();
        return says == 1 ? OwnerSays::kDrain : says == 2 ? OwnerSays::kLeave : OwnerSays::kServe;
      } catch (pyb::error_already_set& e) {
        raised.emplace(std::move(e));
        return OwnerSays::kLeave;
      }
    };
    if (!leave_now.is_none()) {
      options.leave_now = [&]() -> bool {
        pyb::gil_scoped_acquire gil;
        try {
          if (PyErr_CheckSignals() != 0) throw pyb::error_already_set();
          return leave_now().cast<bool>();
        } catch (pyb::error_already_set& e) {
          if (!raised) raised.emplace(std::move(e));
          return true;
        }
      };
    }
    absl::StatusOr<Served> served;
    {
      pyb::gil_scoped_release nogil;
      served = node_->Serve(options);
    }
    if (raised) throw *std::move(raised);
    const Served s = Unwrap(std::move(served));
    pyb::dict out;
    out["job_ended"] = s.job_ended;
    out["drained"] = s.drained ? pyb::object(pyb::make_tuple(s.kept, s.served)) : pyb::none();
    out["batches_served"] = s.batches_served;
    return out;
  }

  void Close() {
    pyb::gil_scoped_release nogil;
    node_->Leave();  // its unfinished tasks go to the other producers at once
  }

 private:
  explicit PyProducer(std::unique_ptr<ProducerNode> node) : node_(std::move(node)) {}
  std::unique_ptr<ProducerNode> node_;
};

}  // namespace

void BindProducer(pyb::module_& m) {
  pyb::class_<PyProducer>(
      m, "_Producer",
      "A producer of one job (src/node/producer_node.h): started from a supply's functions by "
      "records(), tokens() or stream(), and run() until the job ends.")
      .def_static(
          "records",
          [](const std::string& dispatcher, const std::string& job, const std::string& auth_token,
             int threads, uint64_t buffer_bytes, uint32_t max_tasks, const std::string& bind,
             const std::string& advertise_host, double timeout, pyb::object make,
             int metrics_port) {
            RecordsFunction function;
            if (pyb::isinstance<WorkerPool>(make)) {
              // The worker processes' pool in C++: a batch touches Python only in a worker.
              function = [pool = make.cast<std::shared_ptr<WorkerPool>>()](
                             uint64_t epoch, uint64_t batch, absl::Span<const uint64_t> ids) {
                return pool->Make(epoch, batch, ids);
              };
            } else {
              function = [held = HoldPython(std::move(make))](uint64_t epoch, uint64_t batch,
                                                              absl::Span<const uint64_t> ids) {
                return CallMake(*held, epoch, batch, ids);
              };
            }
            return PyProducer::Start(OwnProducerOptions(
                dispatcher, auth_token, threads, buffer_bytes, max_tasks, bind, advertise_host,
                timeout, metrics_port, RecordsSupply{.job = job, .make = std::move(function)}));
          },
          pyb::arg("dispatcher"), pyb::arg("job"), pyb::arg("auth_token"), pyb::arg("threads"),
          pyb::arg("buffer_bytes"), pyb::arg("max_tasks"), pyb::arg("bind"),
          pyb::arg("advertise_host"), pyb::arg("timeout"), pyb::arg("make"),
          pyb::arg("metrics_port") = -1,
          "Starts a producer serving only map job `job`; its worker threads call "
          "make(epoch, batch, ids) for each batch, which returns a Batch or (code, message), or "
          "ask `make`, a _WorkerPool, without Python.")
      .def_static(
          "tokens",
          [](const std::string& dispatcher, const std::string& job, const std::string& auth_token,
             int threads, uint64_t buffer_bytes, uint32_t max_tasks, const std::string& bind,
             const std::string& advertise_host, double timeout, pyb::object tokenize,
             int metrics_port) {
            std::shared_ptr<pyb::object> held = HoldPython(std::move(tokenize));
            return PyProducer::Start(OwnProducerOptions(
                dispatcher, auth_token, threads, buffer_bytes, max_tasks, bind, advertise_host,
                timeout, metrics_port,
                TokensSupply{
                    .job = job,
                    .tokenize = [held](uint32_t source, absl::Span<const uint64_t> documents) {
                      return CallTokenize(*held, source, documents);
                    }}));
          },
          pyb::arg("dispatcher"), pyb::arg("job"), pyb::arg("auth_token"), pyb::arg("threads"),
          pyb::arg("buffer_bytes"), pyb::arg("max_tasks"), pyb::arg("bind"),
          pyb::arg("advertise_host"), pyb::arg("timeout"), pyb::arg("tokenize"),
          pyb::arg("metrics_port") = -1,
          "Starts a producer serving only tokens job `job`, whose text sources' documents its "
          "worker threads tokenize with tokenize(source, documents): (tokens int32, lengths), "
          "the documents' tokens one after another and each one's count, or (code, message).")
      .def_static(
          "stream",
          [](const std::string& dispatcher, const std::string& job, const std::string& auth_token,
             uint64_t buffer_bytes, const std::string& bind, const std::string& advertise_host,
             double timeout, uint32_t source_index, pyb::object feed) {
            std::shared_ptr<pyb::object> held = HoldPython(std::move(feed));
            const TaskRunner::Options defaults;
            return PyProducer::Start(OwnProducerOptions(
                dispatcher, auth_token, defaults.threads, buffer_bytes, defaults.max_tasks, bind,
                advertise_host, timeout, /*metrics_port=*/-1,
                StreamSupply{.job = job,
                             .source_index = source_index,
                             .feed = [held](uint64_t epoch, uint64_t batch) {
                               return CallFeed(*held, epoch, batch);
                             }}));
          },
          pyb::arg("dispatcher"), pyb::arg("job"), pyb::arg("auth_token"), pyb::arg("buffer_bytes"),
          pyb::arg("bind"), pyb::arg("advertise_host"), pyb::arg("timeout"),
          pyb::arg("source_index"), pyb::arg("feed"),
          "Starts the producer of source `source_index` of python job `job`; run() calls "
          "feed(epoch, batch) for each batch the job's tasks ask of it, in order: "
          "(num_records, columns) or (code, message). OUT_OF_RANGE says the source ran out.")
      .def_property_readonly("data_address", &PyProducer::DataAddress)
      .def_property_readonly("producer_id", &PyProducer::ProducerId)
      .def_property_readonly("metrics_port", &PyProducer::MetricsPort,
                             "The port of its metrics (GET /metrics), 0 without them.")
      .def("run", &PyProducer::Run, pyb::arg("owner"), pyb::arg("leave_now") = pyb::none(),
           pyb::arg("dispatcher_timeout") = 120.0, pyb::arg("drain_timeout") = 5.0,
           pyb::arg("early_end_grace") = 10.0,
           "Serves until the job ends (every rank has read its last epoch, or the job was "
           "deleted), owner() says 1 (drain for up to drain_timeout seconds, or until "
           "leave_now() is true) or 2 (leave at once) or raises (raised again here), or the "
           "dispatcher is silent for dispatcher_timeout seconds (UnavailableError naming it); a "
           "stream whose feed said OUT_OF_RANGE raises that early_end_grace seconds later. The "
           "producer has left the job when it returns {'job_ended', 'drained': (kept, served) "
           "or None, 'batches_served'}.")
      .def("close", &PyProducer::Close,
           "Leaves the job at once: its unfinished tasks go to the other producers. Idempotent.");
}

}  // namespace croupier::py
