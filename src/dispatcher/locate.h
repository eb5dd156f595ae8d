// Where the batches of an epoch are: the answer to Locate, a pure function of the DispatcherState.
#ifndef CROUPIER_SRC_DISPATCHER_LOCATE_H_
#define CROUPIER_SRC_DISPATCHER_LOCATE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/croupier.pb.h"
#include "src/dispatcher/dispatcher_state.h"

namespace croupier {

// Answers a LocateRequest. The tasks covering [first_batch, first_batch + num_batches) of the
// epoch, in batch order; each is either an outstanding task (with its owner's data address, or an
// empty address and task_id 0 when it is an orphan) or a run of task_id 0 with an empty address
// covering one or more whole tasks that are finished (finished = true) or not cut yet.
// epoch_finished is true once every task of the epoch is finished. Errors: NOT_FOUND for an unknown
// job; OUT_OF_RANGE for an epoch past a bounded job's last or a range past the end of the epoch;
// INVALID_ARGUMENT for num_batches 0.
absl::StatusOr<v1::LocateResponse> LocateTasks(const DispatcherState& state,
                                               const v1::LocateRequest& request);

// NOT_FOUND "job 'x' is unknown", listing the jobs there are.
absl::Status UnknownJobError(const DispatcherState& state, absl::string_view name);

}  // namespace croupier

#endif  // CROUPIER_SRC_DISPATCHER_LOCATE_H_
