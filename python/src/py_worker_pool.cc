// The producer's side of a map job's worker processes (src/producer/worker_pool.h): their
// supervisor, and each one's channel (worker_channel.h), which asks for a batch in a shared-memory
// slot that the producer then serves as it is. croupier.map.pool starts one over its zygote; the
// workers' side is Python (croupier.map.zygote).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "python/src/bindings.h"
#include "python/src/status.h"
#include "src/common/memory.h"
#include "src/producer/worker_pool.h"

namespace croupier::py {

namespace pyb = pybind11;

void BindWorkerPool(pyb::module_& m) {
  pyb::class_<WorkerPool, std::shared_ptr<WorkerPool>>(
      m, "_WorkerPool",
      "A map job's worker processes as the producer supervises them (src/producer/"
      "worker_pool.h); croupier.map.pool.WorkerPool starts one over its zygote.")
      .def(pyb::init([](size_t workers, size_t max_deaths, double window, pyb::object spawn,
                        pyb::object bury, pyb::object on_death, pyb::object gone,
                        std::optional<double> batch_timeout) {
             WorkerPool::Options o;
             o.workers = workers;
             o.max_deaths = max_deaths;
             o.window = absl::Seconds(window);
             if (batch_timeout.has_value()) o.batch_timeout = absl::Seconds(*batch_timeout);
             o.spawn = [fn = HoldPython(std::move(spawn))](
                           size_t index) -> absl::StatusOr<WorkerPool::Started> {
               pyb::gil_scoped_acquire gil;
               try {
                 pyb::object got = (*fn)(index);
                 if (pyb::isinstance<pyb::str>(got)) {
                   return absl::UnavailableError(got.cast<std::string>());
                 }
                 auto pair = got.cast<pyb::tuple>();
                 return WorkerPool::Started{.pid = pair[0].cast<int>(), .fd = pair[1].cast<int>()};
               } catch (pyb::error_already_set& e) {
                 return absl::UnavailableError(
                     absl::StrCat("a worker could not be started: ", e.what()));
               }
             };
             o.bury = [fn = HoldPython(std::move(bury))](int pid) -> std::string {
               pyb::gil_scoped_acquire gil;
               try {
                 return (*fn)(pid).cast<std::string>();
               } catch (pyb::error_already_set& e) {
                 return absl::StrCat("how is unknown: ", e.what());
               }
             };
             o.on_death = [fn = HoldPython(std::move(on_death))](const std::string& line) {
               pyb::gil_scoped_acquire gil;
               try {
                 (*fn)(line);
               } catch (pyb::error_already_set& e) {
                 e.discard_as_unraisable("croupier's worker pool, telling a worker's death");
               }
             };
             o.gone = [fn = HoldPython(std::move(gone))]() -> std::string {
               pyb::gil_scoped_acquire gil;
               try {
                 pyb::object why = (*fn)();
                 return why.is_none() ? std::string() : why.cast<std::string>();
               } catch (pyb::error_already_set& e) {
                 return absl::StrCat("the pool's zygote cannot be asked: ", e.what());
               }
             };
             absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
             {
               pyb::gil_scoped_release nogil;
               pool = WorkerPool::Start(std::move(o));
             }
             return std::shared_ptr<WorkerPool>(Unwrap(std::move(pool)));
           }),
           pyb::arg("workers"), pyb::arg("max_deaths"), pyb::arg("window"), pyb::arg("spawn"),
           pyb::arg("bury"), pyb::arg("on_death"), pyb::arg("gone"),
           pyb::arg("batch_timeout") = pyb::none(),
           "Starts `workers` workers: spawn(index) returns (pid, fd), a new worker's pid and this "
           "side of its channel, or a str saying why none can be made; bury(pid) reaps a dead "
           "one and says how it ended; on_death(line) is told each death; gone() says why the "
           "workers are gone (their zygote exited), or None. A worker that has not answered a "
           "batch within batch_timeout seconds (None: no limit) is SIGKILLed and replaced.")
      .def(
          "make",
          [](WorkerPool& pool, uint64_t epoch, uint64_t batch,
             const pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast>& ids)
              -> pyb::object {
            absl::StatusOr<Batch> made;
            {
              pyb::gil_scoped_release nogil;
              made = pool.Make(epoch, batch,
                               absl::MakeConstSpan(ids.data(), static_cast<size_t>(ids.size())));
            }
            if (made.ok()) return pyb::cast(*std::move(made));
            return pyb::make_tuple(static_cast<int>(made.status().code()),
                                   std::string(made.status().message()));
          },
          pyb::arg("epoch"), pyb::arg("batch"), pyb::arg("ids"),
          "Batch `batch` of `epoch`, of record ids `ids`: a Batch, or (code, message).")
      .def_property_readonly("broken", &WorkerPool::Broken,
                             "Why the pool can make no batch any more, or None while it can.")
      .def_property_readonly("pids", &WorkerPool::pids, "The live workers' pids.")
      .def("close", &WorkerPool::Close, pyb::call_guard<pyb::gil_scoped_release>(),
           "Closes every worker's channel and slots; does not wait for the processes.");

  m.def(
      "keep_freed_memory_for_reuse", [] { ThrowIfError(KeepFreedMemoryForReuse()); },
      "Keeps the memory this process frees for its next batch (src/common/memory.h): called by a "
      "map job's worker process at its start.");
}

}  // namespace croupier::py
