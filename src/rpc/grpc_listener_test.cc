// GrpcListener in front of a real gRPC server: connections that would take the reserved
// descriptors are closed at once, the others served.
#include "src/rpc/grpc_listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/croupier.grpc.pb.h"
#include "src/net/socket.h"
#include "src/rpc/dispatcher_client.h"

namespace croupier::rpc {
namespace {

// Every method unimplemented: an answer of any kind shows the connection was served.
class NothingService final : public v1::Dispatcher::Service {};

int LowestFreeDescriptor() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::close(fd);
  return fd;
}

// True if the peer closes `fd` within `wait`.
bool ClosedByPeer(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

TEST(GrpcListenerTest, ConnectionsIntoTheReserveAreClosedAtOnceAndTheOthersServed) {
  grpc::ServerBuilder builder;
  NothingService service;
  builder.RegisterService(&service);
  // Admitted: descriptors below the lowest free one now plus 200 (the server's own threads take
  // some); the connections' client ends are in this process too, so fewer than 100 fit.
  const int admitted_below = LowestFreeDescriptor() + 200;
  int limit = 0;
  {
    rlimit l{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &l), 0);
    limit = static_cast<int>(std::min<rlim_t>(l.rlim_cur, 1 << 20));
  }
  auto listener = GrpcListener::Create(builder, "127.0.0.1", 0, grpc::InsecureServerCredentials(),
                                       {.reserve = limit - admitted_below, .name = "test server"});
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  (*listener)->Start();
  EXPECT_GT((*listener)->port(), 0);

  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>((*listener)->port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<net::Socket> clients;
  for (int i = 0; i < 150; ++i) {
    net::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(s.valid());
    ASSERT_EQ(::connect(s.fd(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
    clients.push_back(std::move(s));
  }
  // Connections past the admitted descriptors are closed within moments; the first ones are
  // held by gRPC, waiting for their HTTP/2 preface.
  int closed = 0;
  for (const net::Socket& s : clients) {
    closed += ClosedByPeer(s.fd(), std::chrono::milliseconds(100)) ? 1 : 0;
  }
  EXPECT_GT(closed, 0);
  EXPECT_LT(closed, 150);
  EXPECT_GE((*listener)->shed(), static_cast<uint64_t>(closed));
  EXPECT_GT((*listener)->accepted(), 0u);

  // Once descriptors are free, a client is served.
  clients.clear();
  auto client = DispatcherClient::Create(
      absl::StrCat("127.0.0.1:", (*listener)->port()),
      {.auth_token = "", .call_timeout = absl::Seconds(5), .timeout = absl::Seconds(5), .tls = {}});
  auto status = client->GetStatus(v1::StatusRequest());
  EXPECT_TRUE(absl::IsUnimplemented(status.status())) << status.status();

  (*listener)->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

}  // namespace
}  // namespace croupier::rpc
