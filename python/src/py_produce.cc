// The producer of an addressable Python source (croupier.produce): a ProducerNode whose batch
// maker hands each batch's planned record indexes to a Python function (the worker pool of
// python/croupier/produce.py). The plan, the tasks, the buffer and the data plane are C++'s.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "python/src/bindings.h"
#include "python/src/producer_options.h"
#include "python/src/status.h"
#include "src/common/memory.h"
#include "src/node/producer_node.h"
#include "src/producer/batch_slots.h"
#include "src/producer/function_maker.h"
#include "src/rpc/grpc_util.h"

namespace croupier::py {

namespace pyb = pybind11;

namespace {

// A Python callable that C++ threads may hold and drop without the GIL.
std::shared_ptr<pyb::object> Hold(pyb::object fn) {
  return std::shared_ptr<pyb::object>(new pyb::object(std::move(fn)), [](pyb::object* o) {
    pyb::gil_scoped_acquire gil;
    delete o;
  });
}

// Calls make(epoch, batch, ids) with the GIL: a Batch, or a (code, message) tuple for an error
// (code: the numeric absl::StatusCode). A Python exception that escapes it is INTERNAL naming it.
absl::StatusOr<Batch> CallMake(const pyb::object& make, uint64_t epoch, uint64_t batch,
                               absl::Span<const uint64_t> ids) {
  pyb::gil_scoped_acquire gil;
  try {
    pyb::array_t<uint64_t> array(static_cast<pyb::ssize_t>(ids.size()), ids.data());
    pyb::object result = make(epoch, batch, array);
    if (pyb::isinstance<Batch>(result)) return result.cast<Batch>();
    auto error = result.cast<pyb::tuple>();
    const int code = error[0].cast<int>();
    if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      return absl::InternalError(error[1].cast<std::string>());
    }
    return absl::Status(static_cast<absl::StatusCode>(code), error[1].cast<std::string>());
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
    auto result = tokenize(source, array).cast<pyb::tuple>();
    if (result.size() == 2 && pyb::isinstance<pyb::int_>(result[0])) {
      const int code = result[0].cast<int>();
      const std::string message = result[1].cast<std::string>();
      if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
        return absl::InternalError(message);
      }
      return absl::Status(static_cast<absl::StatusCode>(code), message);
    }
    auto tokens =
        result[0].cast<pyb::array_t<int32_t, pyb::array::c_style | pyb::array::forcecast>>();
    auto lengths =
        result[1].cast<pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>>();
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

// Thread-compatible; close() may come from any thread.
class PyMapProducer {
 public:
  explicit PyMapProducer(std::unique_ptr<ProducerNode> node) : node_(std::move(node)) {}
  std::string DataAddress() const { return node_->data_address(); }
  uint64_t ProducerId() const { return node_->producer_id(); }
  double SinceDispatcherContact() const {
    return absl::ToDoubleSeconds(node_->SinceDispatcherContact());
  }
  // ProducerNode::WaitForJobEnd, without the GIL.
  bool WaitForJobEnd(double timeout) {
    pyb::gil_scoped_release nogil;
    return node_->WaitForJobEnd(absl::Seconds(std::max(0.0, timeout)));
  }
  bool JobEnded() const { return node_->job_ended(); }
  void Close() {
    pyb::gil_scoped_release nogil;
    node_->Leave();  // its unfinished tasks go to the other producers at once
  }
  // ProducerNode::Drain, without the GIL; LeaveNow() (from another thread) ends it early.
  pyb::tuple Drain(double bound) {
    ProducerNode::Drained drained;
    {
      pyb::gil_scoped_release nogil;
      drained = node_->Drain(absl::Seconds(std::max(0.0, bound)), &leave_now_);
    }
    return pyb::make_tuple(drained.kept, drained.served);
  }
  void LeaveNow() {
    absl::MutexLock lock(&mu_);
    if (!leave_now_.HasBeenNotified()) leave_now_.Notify();
  }

 private:
  std::unique_ptr<ProducerNode> node_;
  absl::Mutex mu_;  // LeaveNow's check-and-notify
  absl::Notification leave_now_;
};

std::unique_ptr<PyMapProducer> StartProducer(ProducerNodeOptions options) {
  absl::StatusOr<std::unique_ptr<ProducerNode>> node;
  {
    pyb::gil_scoped_release nogil;
    node = ProducerNode::Start(std::move(options));
  }
  return std::make_unique<PyMapProducer>(Unwrap(std::move(node)));
}

}  // namespace

ProducerNodeOptions OwnProducerOptions(const std::string& dispatcher, const std::string& auth_token,
                                       int threads, uint64_t buffer_bytes, uint32_t max_tasks,
                                       const std::string& bind, const std::string& advertise_host,
                                       double timeout, ProducerSupply supply) {
  ProducerNodeOptions o;
  o.dispatcher = dispatcher;
  o.bind_address = bind;
  o.advertise_host = advertise_host;
  o.auth_token = rpc::ResolveAuthToken(auth_token);
  o.connect_timeout = absl::Seconds(timeout);
  o.runner.threads = threads;
  o.runner.buffer_bytes = buffer_bytes;
  o.runner.max_tasks = max_tasks;
  o.supply = std::move(supply);
  return o;
}

void BindProduce(pyb::module_& m) {
  pyb::class_<PyMapProducer>(m, "_MapProducer",
                             "The producer of a map job (croupier.produce) or of a tokens job with "
                             "text sources (croupier.tokens.produce).")
      .def(pyb::init([](const std::string& dispatcher, const std::string& job,
                        const std::string& auth_token, int threads, uint64_t buffer_bytes,
                        uint32_t max_tasks, const std::string& bind,
                        const std::string& advertise_host, double timeout, pyb::object make) {
             std::shared_ptr<pyb::object> held = Hold(std::move(make));
             return StartProducer(
                 OwnProducerOptions(dispatcher, auth_token, threads, buffer_bytes, max_tasks, bind,
                                    advertise_host, timeout,
                                    RecordsSupply{.job = job,
                                                  .make = [held](uint64_t epoch, uint64_t batch,
                                                                 absl::Span<const uint64_t> ids) {
                                                    return CallMake(*held, epoch, batch, ids);
                                                  }}));
           }),
           pyb::arg("dispatcher"), pyb::arg("job"), pyb::arg("auth_token"), pyb::arg("threads"),
           pyb::arg("buffer_bytes"), pyb::arg("max_tasks"), pyb::arg("bind"),
           pyb::arg("advertise_host"), pyb::arg("timeout"), pyb::arg("make"),
           "Starts a producer serving only map job `job`; its worker threads call "
           "make(epoch, batch, ids) for each batch, which returns a Batch or (code, message).")
      .def_property_readonly("data_address", &PyMapProducer::DataAddress)
      .def_property_readonly("producer_id", &PyMapProducer::ProducerId)
      .def("wait_for_job_end", &PyMapProducer::WaitForJobEnd, pyb::arg("timeout"),
           "Waits up to `timeout` seconds for the job this producer serves to end (every rank has "
           "read its last epoch, or the job was deleted); returns whether it has. The producer "
           "learns it from the dispatcher on its own: nothing to poll.")
      .def("job_ended", &PyMapProducer::JobEnded,
           "Whether the job this producer serves has ended (see wait_for_job_end).")
      .def("since_dispatcher_contact", &PyMapProducer::SinceDispatcherContact,
           "Seconds since the dispatcher last answered this producer.")
      .def("close", &PyMapProducer::Close)
      .def("drain", &PyMapProducer::Drain, pyb::arg("bound"),
           "Leaves gracefully (ProducerNode::Drain): takes no more work, serves the tasks it has "
           "made to the ranks that ask, for up to `bound` seconds or until leave_now(), then "
           "leaves. Returns (tasks kept, tasks served). Call once, instead of close().")
      .def("leave_now", &PyMapProducer::LeaveNow, "Ends a drain() in progress (a second signal).")
      .def_static(
          "for_tokens",
          [](const std::string& dispatcher, const std::string& job, const std::string& auth_token,
             int threads, uint64_t buffer_bytes, uint32_t max_tasks, const std::string& bind,
             const std::string& advertise_host, double timeout, pyb::object tokenize) {
            std::shared_ptr<pyb::object> held = Hold(std::move(tokenize));
            return StartProducer(OwnProducerOptions(
                dispatcher, auth_token, threads, buffer_bytes, max_tasks, bind, advertise_host,
                timeout,
                TokensSupply{
                    .job = job,
                    .tokenize = [held](uint32_t source, absl::Span<const uint64_t> documents) {
                      return CallTokenize(*held, source, documents);
                    }}));
          },
          pyb::arg("dispatcher"), pyb::arg("job"), pyb::arg("auth_token"), pyb::arg("threads"),
          pyb::arg("buffer_bytes"), pyb::arg("max_tasks"), pyb::arg("bind"),
          pyb::arg("advertise_host"), pyb::arg("timeout"), pyb::arg("tokenize"),
          "Starts a producer serving only tokens job `job`, whose text sources' documents its "
          "worker threads tokenize with tokenize(source, documents): (tokens int32, lengths), "
          "the documents' tokens one after another and each one's count, or (code, message).");

  // The producer side of a worker's shared-memory slots (croupier.map.zygote): the worker lays the
  // batch out in a slot, and the producer holds and serves those bytes as they are.
  pyb::class_<BatchSlots>(m, "_BatchSlots",
                          "Shared-memory slots a worker process lays batches out in "
                          "(src/producer/batch_slots.h). Thread-safe.")
      .def(pyb::init<size_t>(), pyb::arg("max_idle"))
      .def(
          "acquire",
          [](BatchSlots& slots, size_t min_capacity) {
            BatchSlots::Lease lease;
            {
              pyb::gil_scoped_release nogil;
              lease = Unwrap(slots.Acquire(min_capacity));
            }
            return pyb::make_tuple(lease.id, lease.fd, lease.capacity, lease.fresh);
          },
          pyb::arg("min_capacity"),
          "A slot for one batch: (id, fd, capacity, fresh); fresh: its descriptor has not been "
          "sent to the worker yet.")
      .def(
          "adopt",
          [](BatchSlots& slots, uint64_t id, size_t size) {
            absl::StatusOr<Batch> batch;
            {
              pyb::gil_scoped_release nogil;
              batch = slots.Adopt(id, size);
            }
            return Unwrap(std::move(batch));
          },
          pyb::arg("id"), pyb::arg("size"),
          "The first `size` bytes of leased slot `id` as a Batch, without a copy; the slot is "
          "reused once the Batch is gone.")
      .def("release", &BatchSlots::Release, pyb::arg("id"),
           pyb::call_guard<pyb::gil_scoped_release>(), "Gives back a leased slot without a batch.")
      .def("close", &BatchSlots::Close, pyb::call_guard<pyb::gil_scoped_release>())
      .def("take_freed", &BatchSlots::TakeFreed,
           "The ids of the slots freed since the last call (the worker may unmap them).")
      .def_property_readonly("stats", [](const BatchSlots& slots) {
        const BatchSlots::Stats s = slots.stats();
        pyb::dict out;
        out["slots"] = s.slots;
        out["idle"] = s.idle;
        out["bytes"] = s.bytes;
        out["created"] = s.created;
        return out;
      });

  m.def(
      "keep_freed_memory_for_reuse", [] { ThrowIfError(KeepFreedMemoryForReuse()); },
      "Keeps the memory this process frees for its next batch (src/common/memory.h): called by a "
      "map job's worker process at its start.");
}

}  // namespace croupier::py
