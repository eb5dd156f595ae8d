// The state of one connected rank, shared by a CroupierDataset and the copies tf.data makes of it
// (src/tf_op/dataset_op.cc). TensorFlow's headers only, like the op.
#ifndef CROUPIER_SRC_TF_OP_RANK_STATE_H_
#define CROUPIER_SRC_TF_OP_RANK_STATE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "src/tf_op/consumer_api.h"

namespace croupier_tf {

// One connected rank, shared by the dataset and by copies of it that tf.data makes when it
// rewrites the pipeline (AsGraphDefInternal refers to this state by id, so a rewrite never
// connects the rank a second time). Thread-safe; StartEpoch/Next on the consumer go under
// read_mu(), the slow path's own mutex.
class RankState {
 public:
  // The first iterator starts at `start` (epoch, step) when it is given (a trainer's own
  // checkpoint, e.g. Keras's BackupAndRestore), else where the dispatcher registered the rank.
  RankState(const CroupierConsumerApi* api, CroupierConsumer* consumer, std::string job,
            uint32_t rank, uint32_t world, const std::pair<uint64_t, uint64_t>* start = nullptr)
      : api_(api), consumer_(consumer), job_(std::move(job)), rank_(rank), world_(world) {
    if (start != nullptr) {
      resume_epoch_ = start->first;
      resume_step_ = start->second;
    } else {
      api_->registered_position(consumer_, &resume_epoch_, &resume_step_);
    }
    resume_ = resume_epoch_ != 0 || resume_step_ != 0;
    CroupierJobInfo info;
    api_->job_info(consumer_, &info);
    num_epochs_ = info.num_epochs;
    steps_per_epoch_ = info.dealt ? info.steps_per_epoch : 0;
  }
  ~RankState() { api_->destroy(consumer_); }

  const CroupierConsumerApi* api() const { return api_; }
  CroupierConsumer* consumer() const { return consumer_; }
  const std::string& job() const { return job_; }
  uint32_t rank() const { return rank_; }
  uint32_t world() const { return world_; }
  uint64_t num_epochs() const { return num_epochs_; }
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }  // 0: not dealt

  // A new iterator takes the rank over: older iterators of it fail from now on.
  int64_t Claim() { return ++generation_; }
  bool Current(int64_t generation) const { return generation_.load() == generation; }

  // Where an iterator that reads `epoch` (-1: the next one) starts: (epoch, step), and whether it
  // has anything to read (false: the registered position says this epoch was done).
  bool Plan(int64_t epoch, uint64_t* start_epoch, uint64_t* start_step) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t e = epoch >= 0 ? static_cast<uint64_t>(epoch) : next_epoch_;
    uint64_t s = 0;
    if (resume_) {
      if (epoch < 0) e = resume_epoch_;
      if (e < resume_epoch_) return false;
      if (e == resume_epoch_) s = resume_step_;
      resume_ = false;
    }
    next_epoch_ = e + 1;
    *start_epoch = e;
    *start_step = s;
    return true;
  }
  // A restored iterator at (epoch, step): the resume position no longer applies.
  void Restored(uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    resume_ = false;
    next_epoch_ = epoch + 1;
  }

  std::mutex& read_mu() { return read_mu_; }

 private:
  const CroupierConsumerApi* const api_;
  CroupierConsumer* const consumer_;
  const std::string job_;
  const uint32_t rank_, world_;
  uint64_t num_epochs_ = 0;
  uint64_t steps_per_epoch_ = 0;
  std::atomic<int64_t> generation_{0};
  std::mutex mu_;
  uint64_t next_epoch_ = 0;
  bool resume_ = false;
  uint64_t resume_epoch_ = 0, resume_step_ = 0;
  std::mutex read_mu_;  // one StartEpoch/Next at a time
};

// The live RankStates by id, for rewrites of a live dataset. Thread-safe.
class Registry {
 public:
  static Registry& Get() {
    static Registry* r = new Registry;
    return *r;
  }
  int64_t Add(const std::shared_ptr<RankState>& state) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = states_.begin(); it != states_.end();) {
      it = it->second.expired() ? states_.erase(it) : std::next(it);
    }
    states_[++last_id_] = state;
    return last_id_;
  }
  std::shared_ptr<RankState> Find(int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(id);
    return it == states_.end() ? nullptr : it->second.lock();
  }

 private:
  std::mutex mu_;
  int64_t last_id_ = 0;
  std::map<int64_t, std::weak_ptr<RankState>> states_;
};

}  // namespace croupier_tf

#endif  // CROUPIER_SRC_TF_OP_RANK_STATE_H_
