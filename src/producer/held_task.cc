#include "src/producer/held_task.h"

#include "absl/strings/str_cat.h"

namespace croupier {

HeldTask::HeldTask(const v1::Task& task, std::shared_ptr<const BatchMaker> maker)
    : task_(task),
      maker_(std::move(maker)),
      state_(task.num_batches(), State::kPending),
      unhanded_(task.num_batches()) {}

BatchKey HeldTask::Key(uint64_t index) const {
  return BatchKey{task_.job(), task_.epoch(), first() + index};
}

bool HeldTask::Covers(const BatchKey& key) const {
  return key.job == task_.job() && key.epoch == task_.epoch() && key.batch >= first() &&
         key.batch < end();
}

bool HeldTask::Overlaps(const v1::Task& other) const {
  return other.job() == task_.job() && other.epoch() == task_.epoch() &&
         other.first_batch() < end() && first() < other.first_batch() + other.num_batches();
}

std::string HeldTask::Describe() const {
  return absl::StrCat("task ", id(), " (batches [", first(), ", ", end(), ") of job '", task_.job(),
                      "' epoch ", task_.epoch(), ")");
}

std::optional<uint64_t> HeldTask::NextPending() {
  while (next_pending_ < state_.size() && state_[next_pending_] != State::kPending) {
    ++next_pending_;
  }
  if (next_pending_ == state_.size()) return std::nullopt;
  return next_pending_;
}

bool HeldTask::Hand(uint64_t index) {
  if (state_[index] == State::kHanded || state_[index] == State::kServed) return false;
  state_[index] = State::kHanded;
  --unhanded_;
  return true;
}

bool HeldTask::Serve(uint64_t index) {
  if (state_[index] == State::kServed) return false;
  Hand(index);
  state_[index] = State::kServed;
  return ++served_ == state_.size();
}

}  // namespace croupier
