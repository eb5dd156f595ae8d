// Which task a producer with a free slot gets next: a pure function of the DispatcherState, so a
// restarted dispatcher continues where the journal left off.
#ifndef CROUPIER_SRC_DISPATCHER_TASK_ASSIGNMENT_H_
#define CROUPIER_SRC_DISPATCHER_TASK_ASSIGNMENT_H_

#include <optional>
#include <string>

#include "proto/croupier.pb.h"
#include "src/dispatcher/dispatcher_state.h"

namespace croupier {

// The next task to assign to `producer`, with task_id = state.next_task_id(), or nullopt when
// there is none:
//   1. the orphan of a removed producer with the lowest (epoch, first batch), ties by job name;
//   2. otherwise a new task at the cursor of a job that is not exhausted, taking the jobs in
//      creation order, round-robin, starting after state.last_cut_job().
// Only jobs the producer can make count: a Python job's tasks go only to its sources
// (Producer::source_job), task t of an epoch to source t % source_count, and a source takes no
// other job's tasks. And no task of an idle job (Job::idle: no consumer has registered yet, or
// its consumers all left), which would hold a producer's slots for nobody.
// Applying TaskAssigned{task, producer} for the result always succeeds (for a known producer).
std::optional<v1::Task> NextTask(const DispatcherState& state,
                                 const DispatcherState::Producer& producer);

// Why batch `first_batch` of `epoch` of `job` (its task not assigned to anyone) waits, in words,
// for a consumer's error: no producer can make the job (and which kind it needs), the job is
// idle, or every producer that can make it is busy, with what it holds.
std::string WhyNotAssigned(const DispatcherState& state, const DispatcherState::Job& job,
                           uint64_t epoch, uint64_t first_batch);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_TASK_ASSIGNMENT_H_
