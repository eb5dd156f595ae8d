// DispatcherState as a snapshot: Snapshot() writes the state as SnapshotJob and SnapshotEnd
// updates (proto/journal.proto), and applying them to a fresh state rebuilds it, checking that
// every reference fits (owners, ids, ranks) before anything changes.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "croupier/plan.h"
#include "src/dispatcher/dispatcher_state.h"

namespace croupier {
namespace {

absl::Status BadSnapshot(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("journal snapshot does not fit: ", what));
}

}  // namespace

bool DispatcherState::Fresh() const {
  return jobs_.empty() && producers_.empty() && consumers_.empty() && last_producer_id_ == 0 &&
         last_consumer_id_ == 0 && last_task_id_ == 0 && last_cut_job_.empty();
}

std::vector<journal::Update> DispatcherState::Snapshot() const {
  return SnapshotWithoutJobInfo().FillJobInfos();
}

std::vector<journal::Update> DispatcherState::PartialSnapshot::FillJobInfos() && {
  for (size_t i = 0; i < job_infos.size(); ++i) {
    *updates[i].mutable_snapshot_job()->mutable_job() = *job_infos[i];
  }
  job_infos.clear();
  return std::move(updates);
}

DispatcherState::PartialSnapshot DispatcherState::SnapshotWithoutJobInfo() const {
  PartialSnapshot partial;
  std::vector<journal::Update>& out = partial.updates;
  for (const std::string& name : job_order_) {
    const Job& job = jobs_.find(name)->second;
    journal::SnapshotJob* s = out.emplace_back().mutable_snapshot_job();
    partial.job_infos.push_back(job.info);
    s->set_plan_version(kPlanVersion);  // a job of another plan version is never in the state
    s->set_next_epoch(job.next_epoch);
    s->set_next_batch(job.next_batch);
    s->set_tasks_finished(job.tasks_finished);
    s->set_batches_finished(job.batches_finished);
    for (const auto& [key, o] : job.outstanding) {
      journal::SnapshotTask* t = s->add_outstanding();
      t->set_epoch(key.first);
      t->set_first_batch(key.second);
      t->set_num_batches(o.num_batches);
      t->set_task_id(o.task_id);
      t->set_producer_id(o.producer_id);
    }
    for (const auto& [rank, p] : job.rank_positions) {
      journal::SnapshotRank* r = s->add_ranks();
      r->set_rank(rank);
      r->set_epoch(p.first);
      r->set_step(p.second);
    }
    s->set_idle(job.idle);
  }
  journal::SnapshotEnd* end = out.emplace_back().mutable_snapshot_end();
  for (const auto& [id, p] : producers_) {
    journal::ProducerRegistered* r = end->add_producers();
    r->set_producer_id(id);
    r->set_data_address(p.data_address);
    r->set_source_job(p.source_job);
    r->set_source_index(p.source_index);
    r->set_draining(p.draining);
  }
  for (const auto& [id, c] : consumers_) {
    journal::ConsumerRegistered* r = end->add_consumers();
    r->set_consumer_id(id);
    r->set_job(c.job);
    r->set_rank(c.rank);
    r->set_epoch(c.epoch);
    r->set_step(c.step);
    r->set_lease(c.lease);  // a compaction must not strip the consumers' capabilities
  }
  end->set_last_cut_job(last_cut_job_);
  end->set_last_producer_id(last_producer_id_);
  end->set_last_consumer_id(last_consumer_id_);
  end->set_last_task_id(last_task_id_);
  return partial;
}

absl::Status DispatcherState::ApplySnapshotJob(const journal::SnapshotJob& u) {
  if (!Fresh()) return BadSnapshot("a snapshot_job after other updates");
  for (const journal::SnapshotJob& other : snapshot_jobs_) {
    if (other.job().spec().name() == u.job().spec().name()) {
      return BadSnapshot(absl::StrCat("job '", u.job().spec().name(), "' twice"));
    }
  }
  snapshot_jobs_.push_back(u);
  return absl::OkStatus();
}

absl::Status DispatcherState::ApplySnapshotEnd(const journal::SnapshotEnd& u) {
  if (!Fresh()) return BadSnapshot("a snapshot_end after other updates");
  // Built aside and swapped in whole, so that a refused snapshot leaves the state as it was.
  DispatcherState next;
  for (const journal::SnapshotJob& s : snapshot_jobs_) {
    journal::JobCreated created;
    *created.mutable_job() = s.job();
    created.set_plan_version(s.plan_version());
    if (absl::Status c = next.ApplyJobCreated(created); !c.ok()) return c;
    Job& job = *next.MutableJob(s.job().spec().name());
    const std::string& name = job.name();
    const uint64_t epochs = job.config.num_epochs;
    if (s.next_batch() >= std::max<uint64_t>(1, job.info->batches_per_epoch()) ||
        (epochs > 0 && s.next_epoch() > epochs)) {
      return BadSnapshot(absl::StrCat("job '", name, "' has its cursor at batch ", s.next_batch(),
                                      " of ", job.info->batches_per_epoch()));
    }
    job.next_epoch = s.next_epoch();
    job.next_batch = s.next_batch();
    job.tasks_finished = s.tasks_finished();
    job.batches_finished = s.batches_finished();
    job.idle = s.idle();
    for (const journal::SnapshotRank& r : s.ranks()) {
      if (r.rank() >= job.config.num_consumers()) {
        return BadSnapshot(absl::StrCat("job '", name, "' has no rank ", r.rank()));
      }
      if (absl::Status p = CheckPosition(job, r.epoch(), r.step()); !p.ok()) {
        return BadSnapshot(p.message());
      }
      SetRankPosition(job, r.rank(), TaskKey(r.epoch(), r.step()));
    }
    for (const journal::SnapshotTask& t : s.outstanding()) {
      const TaskKey key(t.epoch(), t.first_batch());
      // A task as the job cuts them: it starts where one starts, and ends where that one ends.
      const bool cut_so =
          t.first_batch() >= job.config.FirstBatch(t.epoch()) &&
          t.first_batch() < job.config.EndBatch(t.epoch()) &&
          job.config.TaskStart(t.epoch(), t.first_batch()) == t.first_batch() &&
          job.config.TaskEnd(t.epoch(), t.first_batch()) == t.first_batch() + t.num_batches();
      if (!cut_so || !job.IsCut(key.first, key.second) ||
          !job.outstanding.emplace(key, Outstanding{t.num_batches(), t.task_id(), t.producer_id()})
               .second) {
        return BadSnapshot(absl::StrCat("job '", name, "' has a bad outstanding task at epoch ",
                                        t.epoch(), " batch ", t.first_batch()));
      }
    }
  }
  for (const journal::ProducerRegistered& p : u.producers()) {
    if (p.producer_id() == 0 || p.producer_id() > u.last_producer_id() ||
        next.producers_.contains(p.producer_id()) || next.ProducerAt(p.data_address()) != nullptr) {
      return BadSnapshot(absl::StrCat("producer ", p.producer_id(), " at ", p.data_address()));
    }
    if (!p.source_job().empty() && next.FindJob(p.source_job()) == nullptr) {
      return BadSnapshot(absl::StrCat("producer ", p.producer_id(),
                                      " is the source of unknown job '", p.source_job(), "'"));
    }
    next.AddProducer(Producer{
        p.producer_id(), p.data_address(), p.source_job(), p.source_index(), {}, p.draining()});
  }
  for (auto& [name, job] : next.jobs_) {
    for (const auto& [key, o] : job.outstanding) {
      if (o.producer_id == 0 && o.task_id == 0) {
        next.orphans_.insert(OrphanKey{key.first, key.second, name});
        continue;
      }
      auto owner = next.producers_.find(o.producer_id);
      if (owner == next.producers_.end() || o.task_id == 0 || o.task_id > u.last_task_id() ||
          next.tasks_.contains(o.task_id)) {
        return BadSnapshot(absl::StrCat("task ", o.task_id, " of job '", name,
                                        "' owned by producer ", o.producer_id));
      }
      owner->second.tasks.insert(o.task_id);
      v1::Task& task = next.tasks_[o.task_id];
      task.set_task_id(o.task_id);
      task.set_job(name);
      task.set_epoch(key.first);
      task.set_first_batch(key.second);
      task.set_num_batches(o.num_batches);
    }
  }
  for (const journal::ConsumerRegistered& c : u.consumers()) {
    const Job* job = next.FindJob(c.job());
    if (c.consumer_id() == 0 || c.consumer_id() > u.last_consumer_id() ||
        next.consumers_.contains(c.consumer_id()) || job == nullptr ||
        c.rank() >= job->config.num_consumers() || next.ConsumerAt(c.job(), c.rank()) != nullptr) {
      return BadSnapshot(absl::StrCat("consumer ", c.consumer_id(), " of rank ", c.rank(),
                                      " of job '", c.job(), "'"));
    }
    if (absl::Status p = CheckPosition(*job, c.epoch(), c.step()); !p.ok()) {
      return BadSnapshot(p.message());
    }
    next.AddConsumer(Consumer{c.consumer_id(), c.job(), c.rank(), c.epoch(), c.step(), c.lease()});
  }
  if (!u.last_cut_job().empty() && next.FindJob(u.last_cut_job()) == nullptr) {
    return BadSnapshot(absl::StrCat("last cut job '", u.last_cut_job(), "' is unknown"));
  }
  next.last_cut_job_ = u.last_cut_job();
  next.last_producer_id_ = u.last_producer_id();
  next.last_consumer_id_ = u.last_consumer_id();
  next.last_task_id_ = u.last_task_id();
  *this = std::move(next);
  return absl::OkStatus();
}

}  // namespace croupier
