#include "src/transport/tcp_client.h"

#include <memory>
#include <utility>

#include "src/common/status_macros.h"
#include "src/net/tls_context.h"
#include "src/transport/pooled_data_client.h"
#include "src/transport/tcp_client_connection.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<DataClient>> ConnectTcpDataClient(const std::string& address,
                                                                 const DataClientOptions& options) {
  RETURN_IF_ERROR(CheckDataClientOptions(options));  // before the TLS files
  std::shared_ptr<const net::TlsContext> tls;        // null: plaintext
  if (options.tls.enabled()) {
    ASSIGN_OR_RETURN(tls, net::TlsContext::ForClient(options.tls));
  }
  return PooledDataClient<TcpClientConnection>::Connect(
      address, options,
      [address, options, tls = std::move(tls)](absl::Time deadline, const net::WakeEvent* cancel) {
        return TcpClientConnection::Open(address, options, deadline, cancel, tls.get());
      });
}

}  // namespace croupier
