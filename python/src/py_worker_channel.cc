// The producer's side of a map job's worker channel (src/producer/worker_channel.h): the request
// for a batch, and the shared-memory slot the worker process lays it out in, which the producer
// then serves as it is. croupier.map.zygote holds one per worker; the worker's side is Python.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <variant>

#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/common/memory.h"
#include "src/producer/worker_channel.h"

namespace croupier::py {

namespace pyb = pybind11;

void BindWorkerChannel(pyb::module_& m) {
  pyb::class_<WorkerChannel>(m, "_WorkerChannel",
                             "The producer's side of the channel to one worker process "
                             "(src/producer/worker_channel.h). One make() at a time.")
      .def(pyb::init<int, int, size_t>(), pyb::arg("fd"), pyb::arg("pid"),
           pyb::arg("max_idle_slots"),
           "Takes `fd`, this side of the worker's socket pair (closed with the channel).")
      .def(
          "make",
          [](WorkerChannel& channel, uint64_t epoch, uint64_t batch,
             const pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>& ids)
              -> pyb::object {
            WorkerChannel::Made made;
            {
              pyb::gil_scoped_release nogil;
              made = channel.Make(epoch, batch,
                                  absl::MakeConstSpan(ids.data(), static_cast<size_t>(ids.size())));
            }
            if (const auto* died = std::get_if<WorkerChannel::Died>(&made)) {
              return pyb::bool_(died->before);
            }
            auto& batch_or = std::get<absl::StatusOr<Batch>>(made);
            if (batch_or.ok()) return pyb::cast(*std::move(batch_or));
            return pyb::make_tuple(static_cast<int>(batch_or.status().code()),
                                   std::string(batch_or.status().message()));
          },
          pyb::arg("epoch"), pyb::arg("batch"), pyb::arg("ids"),
          "Batch `batch` of `epoch`, of record ids `ids`, made by the worker: a Batch (its bytes "
          "in a slot of this channel, without a copy), (code, message) for the worker's error, "
          "or a bool if the worker died: True before it was asked, False while making it.")
      .def("close_channel", &WorkerChannel::CloseChannel,
           pyb::call_guard<pyb::gil_scoped_release>(),
           "Shuts the channel down: a live worker exits when it reads its end.")
      .def("close", &WorkerChannel::Close, pyb::call_guard<pyb::gil_scoped_release>(),
           "close_channel(), and frees the slots (those batches hold are freed with them).")
      .def_property_readonly("slot_stats", [](const WorkerChannel& channel) {
        const BatchSlots::Stats s = channel.slot_stats();
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
