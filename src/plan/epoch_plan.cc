#include <algorithm>
#include <cassert>
#include <optional>

#include "croupier/plan.h"
#include "src/common/status_macros.h"
#include "src/plan/block_shuffle.h"
#include "src/plan/keys.h"
#include "src/plan/permutation.h"

namespace croupier {

// Everything a plan needs, computed once by Create. Behind a shared pointer so that copies of a
// plan are cheap and the public header need not expose the internal permutation types.
struct EpochPlan::State {
  PlanSpec spec;
  uint64_t epoch;
  uint64_t num_batches;
  plan::Permutation global;                  // shuffle global
  std::optional<plan::BlockShuffle> blocks;  // shuffle blocks

  // The records at positions [first, first + out.size()), all < num_records.
  void Fill(uint64_t first, absl::Span<uint64_t> out) const {
    switch (spec.shuffle) {
      case ShuffleMode::kNone:
        for (size_t i = 0; i < out.size(); ++i) out[i] = first + i;
        return;
      case ShuffleMode::kGlobal:
        global.Fill(first, out);
        return;
      case ShuffleMode::kBlocks:
        blocks->Fill(first, out);
        return;
    }
  }
};

absl::StatusOr<EpochPlan> EpochPlan::Create(const PlanSpec& spec, uint64_t epoch) {
  RETURN_IF_ERROR(ValidatePlanSpec(spec));
  auto state = std::make_shared<State>();
  state->spec = spec;
  state->epoch = epoch;
  const uint64_t n = spec.num_records;
  const uint64_t round = uint64_t{spec.batch_size} * spec.num_consumers;
  // Whole rounds of N batches, so that every consumer gets the same number of steps.
  const uint64_t rounds = spec.remainder == Remainder::kDrop ? n / round : (n - 1) / round + 1;
  state->num_batches = rounds * spec.num_consumers;
  switch (spec.shuffle) {
    case ShuffleMode::kNone:
      break;
    case ShuffleMode::kGlobal:
      state->global =
          plan::Permutation(n, plan::DeriveKey(spec.seed, epoch, plan::KeyPurpose::kGlobal, 0));
      break;
    case ShuffleMode::kBlocks:
      state->blocks.emplace(n, spec.block_size, spec.window_blocks, spec.seed, epoch);
      break;
  }
  return EpochPlan(std::move(state));
}

const PlanSpec& EpochPlan::spec() const { return state_->spec; }
uint64_t EpochPlan::epoch() const { return state_->epoch; }
uint32_t EpochPlan::batch_size() const { return state_->spec.batch_size; }
uint32_t EpochPlan::num_consumers() const { return state_->spec.num_consumers; }
uint64_t EpochPlan::num_batches() const { return state_->num_batches; }
uint64_t EpochPlan::steps_per_consumer() const {
  return state_->num_batches / state_->spec.num_consumers;
}
uint64_t EpochPlan::num_positions() const { return state_->num_batches * state_->spec.batch_size; }

uint64_t EpochPlan::RecordAt(uint64_t position) const {
  const uint64_t p = position % state_->spec.num_records;
  switch (state_->spec.shuffle) {
    case ShuffleMode::kNone:
      return p;
    case ShuffleMode::kGlobal:
      return state_->global(p);
    case ShuffleMode::kBlocks:
      return state_->blocks->RecordAt(p);
  }
  return p;  // unreachable: Create validated the mode
}

void EpochPlan::BatchRecords(uint64_t g, absl::Span<uint64_t> out) const {
  assert(g < num_batches() && out.size() == batch_size());
  const uint64_t n = state_->spec.num_records;
  // Padding positions wrap to the start of the order, possibly several times when n < B, so fill
  // in runs that each stay inside [0, n).
  uint64_t p = (g * state_->spec.batch_size) % n;
  while (!out.empty()) {
    const size_t run = static_cast<size_t>(std::min<uint64_t>(out.size(), n - p));
    state_->Fill(p, out.subspan(0, run));
    out.remove_prefix(run);
    p = 0;
  }
}

std::vector<uint64_t> EpochPlan::BatchRecords(uint64_t g) const {
  std::vector<uint64_t> records(batch_size());
  BatchRecords(g, absl::MakeSpan(records));
  return records;
}

uint32_t EpochPlan::ConsumerOf(uint64_t g) const {
  return static_cast<uint32_t>(g % state_->spec.num_consumers);
}
uint64_t EpochPlan::StepOf(uint64_t g) const { return g / state_->spec.num_consumers; }
uint64_t EpochPlan::GlobalBatch(uint32_t consumer, uint64_t step) const {
  return step * state_->spec.num_consumers + consumer;
}

}  // namespace croupier
