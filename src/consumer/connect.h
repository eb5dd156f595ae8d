// Consumer::Connect over any control plane (src/control/control_plane.h): the gRPC client for a
// dispatcher process, or an in-process dispatcher (the in-process test cluster).
#ifndef CROUPIER_SRC_CONSUMER_CONNECT_H_
#define CROUPIER_SRC_CONSUMER_CONNECT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "croupier/consumer.h"
#include "src/control/control_plane.h"

namespace croupier {

// Consumer::Connect's contract, with `control` as the dispatcher (options.dispatcher is then
// only a name for messages). The consumer owns `control`.
absl::StatusOr<std::unique_ptr<Consumer>> ConnectConsumer(ConsumerOptions options,
                                                          std::unique_ptr<ControlPlane> control);

}  // namespace croupier

#endif  // CROUPIER_SRC_CONSUMER_CONNECT_H_
