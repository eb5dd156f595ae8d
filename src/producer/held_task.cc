#include "src/producer/held_task.h"

#include "absl/strings/str_cat.h"

namespace croupier {
namespace {

bool IsUnhanded(HeldTask::State s) {
  return s == HeldTask::State::kPending || s == HeldTask::State::kMaking ||
         s == HeldTask::State::kReady;
}
bool IsUnmade(HeldTask::State s) {
  return s == HeldTask::State::kPending || s == HeldTask::State::kMaking;
}

}  // namespace

HeldTask::HeldTask(const v1::Task& task, std::shared_ptr<const BatchMaker> maker)
    : task_(task),
      maker_(std::move(maker)),
      state_(task.num_batches(), State::kPending),
      ready_since_(task.num_batches(), absl::InfinitePast()),
      done_flag_(task.num_batches(), false),
      unhanded_(task.num_batches()),
      unmade_(task.num_batches()) {}

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

void HeldTask::Set(uint64_t index, State to) {
  const State from = state_[index];
  unhanded_ += static_cast<uint64_t>(IsUnhanded(to)) - static_cast<uint64_t>(IsUnhanded(from));
  unmade_ += static_cast<uint64_t>(IsUnmade(to)) - static_cast<uint64_t>(IsUnmade(from));
  ready_ += static_cast<uint64_t>(to == State::kReady) - static_cast<uint64_t>(from == State::kReady);
  state_[index] = to;
}

void HeldTask::SetReady(uint64_t index, absl::Time now) {
  Set(index, State::kReady);
  ready_since_[index] = now;
}

bool HeldTask::MarkDone(uint64_t index) {
  if (done_flag_[index]) return false;
  done_flag_[index] = true;
  return ++done_ == state_.size();
}

bool HeldTask::Hand(uint64_t index) {
  if (state_[index] == State::kHanded || state_[index] == State::kServed) return false;
  Set(index, State::kHanded);
  return true;
}

bool HeldTask::Serve(uint64_t index) {
  if (state_[index] == State::kServed) return false;
  Set(index, State::kServed);
  return MarkDone(index);
}

bool HeldTask::Evict(uint64_t index) {
  if (state_[index] != State::kReady) return false;
  Set(index, State::kEvicted);
  return MarkDone(index);
}

bool HeldTask::Fail(uint64_t index) { return MarkDone(index); }

}  // namespace croupier
