// The options of a producer that serves one job of its own (croupier.produce, croupier.serve,
// croupier.tokens.produce): written once for the bindings that start one (py_produce.cc,
// py_service.cc).
#ifndef CROUPIER_PYTHON_SRC_PRODUCER_OPTIONS_H_
#define CROUPIER_PYTHON_SRC_PRODUCER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "src/node/producer_node.h"

namespace croupier::py {

// Serves at `bind` (advertised as `advertise_host`, empty: the bind address), reaches the
// dispatcher within `timeout` seconds with `auth_token` (empty: $CROUPIER_AUTH_TOKEN), makes
// batches on `threads` threads into a buffer of `buffer_bytes` holding up to `max_tasks` tasks,
// from `supply`.
ProducerNodeOptions OwnProducerOptions(const std::string& dispatcher, const std::string& auth_token,
                                       int threads, uint64_t buffer_bytes, uint32_t max_tasks,
                                       const std::string& bind, const std::string& advertise_host,
                                       double timeout, ProducerSupply supply);

}  // namespace croupier::py

#endif  // CROUPIER_PYTHON_SRC_PRODUCER_OPTIONS_H_
