// The TCP data client: a PooledDataClient (pooled_data_client.h) of TcpClientConnections.
#ifndef CROUPIER_SRC_TRANSPORT_TCP_CLIENT_H_
#define CROUPIER_SRC_TRANSPORT_TCP_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/transport/transport.h"

namespace croupier {

// What Transport::Tcp()->Connect runs: checks the options and the TLS files (INVALID_ARGUMENT,
// or src/net/tls_stream.h's errors), then opens the first connection at once so that a bad address,
// token or version fails here. The client is thread-safe (DataClient).
absl::StatusOr<std::unique_ptr<DataClient>> ConnectTcpDataClient(const std::string& address,
                                                                 const DataClientOptions& options);

}  // namespace croupier

#endif  // CROUPIER_SRC_TRANSPORT_TCP_CLIENT_H_
