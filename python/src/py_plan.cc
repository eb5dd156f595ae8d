#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "croupier/plan.h"
#include "src/plan/seed_sequence.h"
#include "python/src/bindings.h"
#include "python/src/status.h"

namespace croupier::py {

namespace pyb = pybind11;

void BindPlan(pyb::module_& m) {
  m.def(
      "seed_sequence_words",
      [](const std::vector<uint64_t>& entropy, size_t n) {
        pyb::array_t<uint32_t> out(static_cast<pyb::ssize_t>(n));
        plan::SeedSequenceWords(entropy, absl::MakeSpan(out.mutable_data(), n));
        return out;
      },
      pyb::arg("entropy"), pyb::arg("n"),
      "uint32 [n]: numpy.random.SeedSequence(entropy).generate_state(n, numpy.uint32), for "
      "entropy a list of integers in [0, 2**64) (src/plan/seed_sequence.h).");
  m.def(
      "record_seeds",
      [](uint64_t seed, uint64_t epoch,
         pyb::array_t<uint64_t, pyb::array::c_style | pyb::array::forcecast> ids, uint64_t kind) {
        const auto n = static_cast<size_t>(ids.size());
        pyb::array_t<int64_t> out({static_cast<pyb::ssize_t>(n), pyb::ssize_t{2}});
        plan::RecordSeeds(seed, epoch, absl::MakeConstSpan(ids.data(), n), kind,
                          absl::MakeSpan(out.mutable_data(), 2 * n));
        return out;
      },
      pyb::arg("seed"), pyb::arg("epoch"), pyb::arg("ids"), pyb::arg("kind"),
      "int64 [len(ids), 2]: row k is numpy.random.SeedSequence([seed, epoch, ids[k], kind])"
      ".generate_state(2, numpy.uint64) (src/plan/seed_sequence.h).");
  pyb::class_<EpochPlan>(m, "EpochPlan", R"doc(The plan of one epoch: which records form each
global batch, and which consumer takes it (batch g goes to consumer g % N as its step g // N).
block_size and window_blocks 0 (the default), and shuffle and remainder "", are the plan's
defaults, as in a JobSpec.)doc")
      .def(pyb::init([](uint64_t num_records, uint32_t batch_size, uint32_t num_consumers,
                        uint64_t seed, uint64_t epoch, const std::string& shuffle,
                        const std::string& remainder, uint32_t block_size,
                        uint32_t window_blocks) {
             PlanSpec spec;
             spec.num_records = num_records;
             spec.batch_size = batch_size;
             spec.num_consumers = num_consumers;
             spec.seed = seed;
             // "" (a JobSpec's unset setting): the plan's default.
             if (!shuffle.empty()) spec.shuffle = Unwrap(ParseShuffleMode(shuffle));
             if (!remainder.empty()) spec.remainder = Unwrap(ParseRemainder(remainder));
             // 0: the plan's own default (PlanSpec), as a JobSpec's 0 is: written once, there.
             if (block_size != 0) spec.block_size = block_size;
             if (window_blocks != 0) spec.window_blocks = window_blocks;
             return Unwrap(EpochPlan::Create(spec, epoch));
           }),
           pyb::arg("num_records"), pyb::arg("batch_size"), pyb::arg("num_consumers"),
           pyb::kw_only(), pyb::arg("seed") = 0, pyb::arg("epoch") = 0,
           pyb::arg("shuffle") = "global", pyb::arg("remainder") = "drop",
           pyb::arg("block_size") = 0, pyb::arg("window_blocks") = 0)
      .def_property_readonly("num_batches", &EpochPlan::num_batches)
      .def_property_readonly("steps_per_consumer", &EpochPlan::steps_per_consumer)
      .def_property_readonly("num_consumers", &EpochPlan::num_consumers)
      .def_property_readonly("batch_size", &EpochPlan::batch_size)
      .def_property_readonly("epoch", &EpochPlan::epoch)
      .def("record_at", &EpochPlan::RecordAt, pyb::arg("position"))
      .def(
          "batch",
          [](const EpochPlan& plan, uint64_t g) {
            if (g >= plan.num_batches()) {
              ThrowIfError(absl::OutOfRangeError("global batch " + std::to_string(g) +
                                                 " is past the epoch's " +
                                                 std::to_string(plan.num_batches()) + " batches"));
            }
            pyb::array_t<uint64_t> out(plan.batch_size());
            plan.BatchRecords(g, absl::MakeSpan(out.mutable_data(), plan.batch_size()));
            return out;
          },
          pyb::arg("g"), "The record ids of global batch g, in order, as a uint64 array.")
      .def("consumer_of", &EpochPlan::ConsumerOf, pyb::arg("g"))
      .def("step_of", &EpochPlan::StepOf, pyb::arg("g"))
      .def("global_batch", &EpochPlan::GlobalBatch, pyb::arg("consumer"), pyb::arg("step"));
}

}  // namespace croupier::py
