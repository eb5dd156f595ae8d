// What only the shared-memory transport promises (the conformance suite covers the rest): the
// batch is a mapping of a sealed segment, not a copy, and segments are gone once released.
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/protocol.h"
#include "src/transport/frame.h"
#include "src/transport/shm_socket.h"
#include "src/transport/shm_transport.h"
#include "src/transport/transport_testing.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// Mappings of batch segments in this process (/proc/self/maps names them "memfd:croupier-batch"):
// the clients' read-only ones ("r--s"), or all of them, the servers' read-write ones included.
int CountSegmentMappings(bool clients_only = true) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) {
    if (line.find("memfd:croupier-batch") == std::string::npos) continue;
    if (!clients_only || line.find(" r--s ") != std::string::npos) ++n;
  }
  return n;
}

class ShmTransportTest : public ::testing::Test {
 protected:
  testing::TestGuard guard_{absl::Seconds(60)};
  testing::FakeBatchSource source_;
};

TEST_F(ShmTransportTest, BatchesAreMappingsOfSealedSegmentsFreedOnRelease) {
  auto server = Transport::Shm()->StartServer({}, &source_);
  ASSERT_TRUE(server.ok()) << server.status();
  const Batch want = testing::MakeBatch(4 << 20, 7);
  source_.Put({"j", 0, 1}, want);
  auto client = Transport::Shm()->Connect((*server)->address(), {});
  ASSERT_TRUE(client.ok()) << client.status();
  const int before = CountSegmentMappings();
  {
    absl::StatusOr<Batch> got = (*client)->Fetch({"j", 0, 1}, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ContentHash(), want.ContentHash());
    EXPECT_EQ(CountSegmentMappings(), before + 1);
    // Page-aligned: a mapping, not a heap buffer; and read-only (mincore sees it resident).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->bytes().data()) % ::getpagesize(), 0u);
    // The batch outlives its client and server.
    Batch kept = *got;
    client->reset();
    (*server)->Shutdown();
    EXPECT_EQ(kept.ContentHash(), want.ContentHash());
  }
  EXPECT_EQ(CountSegmentMappings(), before);
}

TEST_F(ShmTransportTest, SegmentsAreReusedAndAllGoWithClientAndServer) {
  ASSERT_EQ(CountSegmentMappings(/*clients_only=*/false), 0);
  auto server = Transport::Shm()->StartServer({}, &source_);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::flat_hash_map<uint64_t, uint64_t> want;
  for (uint64_t i = 0; i < 200; ++i) {
    Batch batch = testing::MakeBatch(64 << 10, i);
    want[i] = batch.ContentHash();
    source_.Put({"j", 0, i}, std::move(batch));
  }
  auto client = Transport::Shm()->Connect((*server)->address(), {});
  ASSERT_TRUE(client.ok()) << client.status();
  // Two batches held at a time: the segment of a released batch is filled again, never that of
  // a held one.
  std::optional<Batch> held;
  for (uint64_t i = 0; i < 200; ++i) {
    auto got = (*client)->Fetch({"j", 0, i}, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->ContentHash(), want[i]);
    if (held.has_value()) {
      ASSERT_EQ(held->ContentHash(), want[i - 1]) << "overwritten while held";
    }
    held = *std::move(got);
  }
  // Reused: a handful of segments served 200 batches.
  EXPECT_LE(CountSegmentMappings(), 4);
  EXPECT_LE(CountSegmentMappings(/*clients_only=*/false), 8);
  held.reset();
  client->reset();
  (*server)->Shutdown();
  EXPECT_EQ(CountSegmentMappings(/*clients_only=*/false), 0);
  // TestGuard checks the descriptors.
}

TEST_F(ShmTransportTest, AnUnsealedOrMissizedSegmentIsRefused) {
  const Batch batch = testing::MakeBatch(4 << 10, 1);
  net::Socket plain(::memfd_create("croupier-batch", MFD_CLOEXEC));
  ASSERT_TRUE(plain.valid());
  ASSERT_EQ(::write(plain.fd(), batch.bytes().data(), batch.bytes().size()),
            static_cast<ssize_t>(batch.bytes().size()));
  auto unsealed = MapShmSegment(std::move(plain), batch.bytes().size(), "data server @x");
  EXPECT_EQ(unsealed.status().code(), absl::StatusCode::kDataLoss) << unsealed.status();
  EXPECT_THAT(unsealed.status().message(), HasSubstr("sealed"));

  auto sealed = MakeShmSegment(batch.bytes());
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  auto missized = MapShmSegment(*std::move(sealed), batch.bytes().size() + 64, "data server @x");
  EXPECT_EQ(missized.status().code(), absl::StatusCode::kDataLoss) << missized.status();
  EXPECT_THAT(missized.status().message(), HasSubstr("size"));

  auto good = MakeShmSegment(batch.bytes());
  ASSERT_TRUE(good.ok()) << good.status();
  auto mapped = MapShmSegment(*std::move(good), batch.bytes().size(), "data server @x");
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(mapped->ContentHash(), batch.ContentHash());
}

TEST_F(ShmTransportTest, AddressesAreAbstractNamesPairedWithTcpAddresses) {
  EXPECT_EQ(ShmAddressFor("10.0.0.5:4000"), "@croupier-shm/10.0.0.5:4000");
  const std::string long_name = ShmAddressFor(std::string(200, 'h') + ":1");
  EXPECT_LE(long_name.size(), 100u);
  EXPECT_EQ(long_name, ShmAddressFor(std::string(200, 'h') + ":1"));
  EXPECT_NE(long_name, ShmAddressFor(std::string(200, 'h') + ":2"));
  // Nobody listens there: refused at once, as a closed TCP port.
  auto none = Transport::Shm()->Connect(ShmAddressFor("192.0.2.1:9"), {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable) << none.status();
  EXPECT_THAT(none.status().message(),
              HasSubstr("cannot connect to data server @croupier-shm/192.0.2.1:9"));
  auto not_abstract = Transport::Shm()->Connect("127.0.0.1:5", {});
  EXPECT_EQ(not_abstract.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ShmTransportTest, TwoServersCannotTakeOneName) {
  DataServerOptions options;
  options.bind_address = ShmAddressFor(absl::StrCat("test-host:", ::getpid()));
  auto first = Transport::Shm()->StartServer(options, &source_);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Transport::Shm()->StartServer(options, &source_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(options.bind_address));
}

TEST_F(ShmTransportTest, AClientOfAnotherVersionIsRefusedAtTheHandshake) {
  auto server = Transport::Shm()->StartServer({}, &source_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto socket = net::DialUnix((*server)->address(),
                              net::IoWait{.deadline = absl::Now() + absl::Seconds(5)});
  ASSERT_TRUE(socket.ok()) << socket.status();
  const net::IoWait wait{.deadline = absl::Now() + absl::Seconds(5)};
  // The TCP protocol's version, as a client of the TCP transport would send.
  ASSERT_TRUE(net::SendAll(socket->fd(), frame::EncodeHello(kProtocolVersion, ""), wait, "s").ok());
  char header[frame::kHeaderBytes];
  ASSERT_TRUE(net::RecvAll(socket->fd(), header, sizeof(header), wait, "s").ok());
  auto h = frame::ParseHeader(absl::string_view(header, sizeof(header)));
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->type, static_cast<uint32_t>(frame::FrameType::kError));
  std::string body(h->length, '\0');
  ASSERT_TRUE(net::RecvAll(socket->fd(), body.data(), body.size(), wait, "s").ok());
  auto error = frame::ParseError(body);
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->code, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(error->message, HasSubstr(absl::StrCat("speaks version ", kShmProtocolVersion)));
}

TEST_F(ShmTransportTest, ARetiredClientGivesItsConnectionSlotBack) {
  DataServerOptions options;
  options.max_connections = 1;
  auto server = Transport::Shm()->StartServer(options, &source_);
  ASSERT_TRUE(server.ok()) << server.status();
  source_.Put({"j", 0, 0}, testing::MakeBatch(4 << 10, 1));
  auto retired = Transport::Shm()->Connect((*server)->address(), {});
  ASSERT_TRUE(retired.ok()) << retired.status();
  (*retired)->Retire();  // its idle connection closes now
  absl::StatusOr<std::unique_ptr<DataClient>> next = absl::UnknownError("not tried");
  for (const absl::Time until = absl::Now() + absl::Seconds(5); absl::Now() < until;) {
    next = Transport::Shm()->Connect((*server)->address(), {});
    if (next.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE((*next)->Fetch({"j", 0, 0}, absl::Now() + absl::Seconds(10)).ok());
}

TEST(ShmModeTest, ParsesOptionThenEnvironment) {
  EXPECT_EQ(*ParseShmMode("on"), ShmMode::kOn);
  EXPECT_EQ(*ParseShmMode("OFF"), ShmMode::kOff);
  EXPECT_EQ(*ParseShmMode("auto"), ShmMode::kAuto);
  auto bad = ParseShmMode("sometimes");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'sometimes'"));
  ::setenv("CROUPIER_SHM", "off", 1);
  EXPECT_EQ(*ParseShmMode(""), ShmMode::kOff);
  EXPECT_EQ(*ParseShmMode("on"), ShmMode::kOn);  // the option wins
  ::unsetenv("CROUPIER_SHM");
  EXPECT_EQ(*ParseShmMode(""), ShmMode::kAuto);
}

}  // namespace
}  // namespace croupier
