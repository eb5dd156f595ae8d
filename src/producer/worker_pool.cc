#include "src/producer/worker_pool.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(Options options) {
  if (!options.spawn || !options.bury) {
    return absl::InvalidArgumentError("a worker pool needs its spawn and bury functions");
  }
  if (options.batch_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a worker pool's batch timeout must be more than 0");
  }
  if (!options.kill) options.kill = [](int pid) { ::kill(pid, SIGKILL); };
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(options)));
  for (size_t k = 0; k < pool->options_.workers; ++k) {
    absl::StatusOr<std::shared_ptr<Worker>> worker = pool->Spawn(k);
    if (!worker.ok()) {
      pool->Close();
      return worker.status();
    }
    absl::MutexLock lock(&pool->mu_);
    pool->workers_.insert(*worker);
    pool->idle_.push_back(*std::move(worker));
  }
  return pool;
}

WorkerPool::~WorkerPool() { Close(); }

absl::StatusOr<std::shared_ptr<WorkerPool::Worker>> WorkerPool::Spawn(size_t index) {
  absl::StatusOr<Started> started = options_.spawn(index);
  if (!started.ok()) return started.status();
  auto worker = std::make_shared<Worker>();
  worker->index = index;
  worker->channel =
      std::make_unique<WorkerChannel>(started->fd, started->pid, options_.max_idle_slots);
  return worker;
}

absl::StatusOr<Batch> WorkerPool::Make(uint64_t epoch, uint64_t batch,
                                       absl::Span<const uint64_t> ids) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = poisoned_.find({epoch, batch}); it != poisoned_.end()) {
      return absl::InternalError(absl::StrCat(it->second, " (not tried again)"));
    }
  }
  std::vector<std::string> deaths;  // the workers that died making this batch, in words
  std::shared_ptr<Worker> worker = Take();
  while (worker != nullptr) {
    WorkerChannel::Made made = worker->channel->Make(epoch, batch, ids, options_.batch_timeout);
    if (auto* result = std::get_if<absl::StatusOr<Batch>>(&made)) {
      GiveBack(worker);
      return *std::move(result);
    }
    const auto [before, stuck] = std::get<WorkerChannel::Died>(made);
    const std::shared_ptr<Worker> dead = std::move(worker);
    const int dead_pid = dead->channel->pid();
    if (stuck) options_.kill(dead_pid);
    const std::string how = stuck ? absl::StrCat("stuck: no answer within ",
                                                 absl::ToDoubleSeconds(options_.batch_timeout),
                                                 " s, so killed; ", Bury(dead))
                                  : Bury(dead);
    if (!before) deaths.push_back(absl::StrCat("worker pid ", dead_pid, " (", how, ")"));
    worker = Replace(dead->index);
    std::string then;
    if (worker == nullptr) {
      absl::MutexLock lock(&mu_);
      then = absl::StrCat("not replaced: ", stopped_.value_or(""));
    } else {
      const int pid = worker->channel->pid();
      then = deaths.size() == 2 ? absl::StrCat("replaced by pid ", pid,
                                               "; the batch fails, having killed 2 workers")
             : deaths.size() == 1
                 ? absl::StrCat("replaced by pid ", pid, ", which makes the batch again")
                 : absl::StrCat("replaced by pid ", pid, ", which makes the batch");
    }
    if (options_.on_death) {
      options_.on_death(absl::StrCat("croupier produce: worker ", dead->index, " (pid ", dead_pid,
                                     ") died (", how, ") ",
                                     before ? "before it got" : "while making", " batch ", batch,
                                     " of epoch ", epoch, "; ", then));
    }
    if (deaths.size() == 2) {
      if (worker != nullptr) GiveBack(worker);
      std::string message = absl::StrCat(
          "batch ", batch, " of epoch ", epoch,
          " was tried twice and killed its worker both times: ", deaths[0], ", then ", deaths[1],
          "; a record of it may crash or hang the source or the transform every time");
      absl::MutexLock lock(&mu_);
      poisoned_[{epoch, batch}] = message;
      return absl::InternalError(message);
    }
  }
  absl::MutexLock lock(&mu_);
  const std::string stopped = stopped_.value_or("");
  if (!deaths.empty()) {
    return absl::UnavailableError(absl::StrCat(deaths[0], " died making batch ", batch,
                                               " of epoch ", epoch,
                                               ", which this producer does not make again: ",
                                               stopped));
  }
  return absl::UnavailableError(absl::StrCat("this producer has no worker left to make batch ",
                                             batch, " of epoch ", epoch, ": ", stopped));
}

std::optional<std::string> WorkerPool::Broken() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return std::nullopt;
    if (stopped_ && workers_.empty() && replacing_ == 0) return stopped_;
  }
  if (!options_.gone) return std::nullopt;
  std::string gone = options_.gone();  // its workers die with it, asked for a batch or not
  if (gone.empty()) return std::nullopt;
  return gone;
}

std::vector<int> WorkerPool::pids() const {
  std::vector<int> out;
  absl::MutexLock lock(&mu_);
  for (const auto& w : workers_) out.push_back(w->channel->pid());
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<WorkerPool::Worker> WorkerPool::Take() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return !p->idle_.empty() || (p->workers_.empty() && p->replacing_ == 0);
      },
      this));
  if (idle_.empty()) return nullptr;
  std::shared_ptr<Worker> worker = std::move(idle_.front());
  idle_.pop_front();
  return worker;
}

void WorkerPool::GiveBack(const std::shared_ptr<Worker>& worker) {
  absl::MutexLock lock(&mu_);
  if (workers_.contains(worker)) idle_.push_back(worker);
}

std::string WorkerPool::Bury(const std::shared_ptr<Worker>& worker) {
  const std::string how = options_.bury(worker->channel->pid());
  worker->channel->Close();
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  workers_.erase(worker);
  ++replacing_;  // until Replace has replaced it or not
  deaths_.push_back(now);
  while (now - deaths_.front() > options_.window) deaths_.pop_front();
  if (!stopped_ && deaths_.size() > options_.max_deaths) {
    stopped_ = absl::StrCat(deaths_.size(), " workers of this producer died within ",
                            absl::ToDoubleSeconds(options_.window), " s, more than the ",
                            options_.max_deaths, " it replaces: it replaces no more");
  }
  return how;
}

std::shared_ptr<WorkerPool::Worker> WorkerPool::Replace(size_t index) {
  bool stopped;
  {
    absl::MutexLock lock(&mu_);
    stopped = stopped_.has_value();
  }
  std::shared_ptr<Worker> worker;
  if (!stopped) {
    absl::StatusOr<std::shared_ptr<Worker>> spawned = Spawn(index);
    if (spawned.ok()) {
      worker = *std::move(spawned);
    } else {
      absl::MutexLock lock(&mu_);
      if (!stopped_) stopped_ = std::string(spawned.status().message());
    }
  }
  absl::MutexLock lock(&mu_);
  --replacing_;  // Take() waiting for a worker checks whether any is left
  if (worker != nullptr && !closed_) {
    workers_.insert(worker);
  } else if (worker != nullptr) {
    worker->channel->Close();  // the pool closed meanwhile
    worker = nullptr;
  }
  return worker;
}

void WorkerPool::Close() {
  std::vector<std::shared_ptr<Worker>> workers;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    workers.assign(workers_.begin(), workers_.end());
    workers_.clear();
    idle_.clear();
    if (!stopped_) stopped_ = "the producer is closing";
  }
  // Each live worker exits when it reads the end of its channel.
  for (const auto& w : workers) w->channel->Close();
}

}  // namespace croupier
