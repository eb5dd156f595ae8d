// The parent's side of a map job's worker channel in the producer (croupier.map.zygote): the
// shared-memory slots a worker process lays each batch out in, which the producer then serves as
// they are (src/producer/batch_slots.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/common/memory.h"
#include "src/producer/batch_slots.h"

namespace croupier::py {

namespace pyb = pybind11;

void BindBatchSlots(pyb::module_& m) {
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
