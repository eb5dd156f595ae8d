// Test helpers of the transport tests: a scriptable BatchSource, batches of a given size, a flood
// of clients without the token, and a guard that fails a test that overruns its time or leaves a
// thread or descriptor behind.
#ifndef CROUPIER_SRC_TRANSPORT_TRANSPORT_TESTING_H_
#define CROUPIER_SRC_TRANSPORT_TRANSPORT_TESTING_H_

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "gtest/gtest.h"
#include "src/net/socket.h"
#include "src/net/token.h"
#include "src/transport/batch_source.h"
#include "src/transport/frame.h"
#include "src/transport/transport.h"

namespace croupier::testing {

// A deadline `d` from now.
inline absl::Time In(absl::Duration d) { return absl::Now() + d; }

// A fixed-length column of `dtype` over `values`, `dims` of them per record. It views `values` and
// `dims`, which must outlive it.
template <typename T>
ColumnData FixedColumn(absl::string_view name, DType dtype, absl::Span<const int64_t> dims,
                       const std::vector<T>& values) {
  return ColumnData{name,
                    dtype,
                    /*variable_length=*/false,
                    dims,
                    values.size(),
                    absl::string_view(reinterpret_cast<const char*>(values.data()),
                                      sizeof(T) * values.size()),
                    {},
                    {}};
}

// A batch of about `bytes` bytes (at least a few hundred): an int64 "id" column and a float32
// "payload" column of pseudo-random values from `seed`.
inline Batch MakeBatch(size_t bytes, uint64_t seed) {
  constexpr uint64_t kRecords = 4;
  const size_t overhead = 512;
  const int64_t per_record = std::max<int64_t>(
      1, static_cast<int64_t>((bytes > overhead ? bytes - overhead : 0) / 4 / kRecords));
  std::vector<float> payload(kRecords * per_record);
  std::mt19937_64 rng(seed);
  for (float& f : payload) f = static_cast<float>(rng() % 100000) / 7.0f;
  std::vector<int64_t> ids(kRecords);
  for (uint64_t i = 0; i < kRecords; ++i) ids[i] = static_cast<int64_t>(seed * 100 + i);
  const std::vector<int64_t> dims = {per_record};
  const ColumnData columns[] = {FixedColumn("id", DType::kInt64, {}, ids),
                                 FixedColumn("payload", DType::kFloat32, dims, payload)};
  absl::StatusOr<Batch> batch = Batch::FromColumns(kRecords, columns);
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *std::move(batch);
}

// A batch decoded from tf.train.Examples by BatchBuilder, as producers make them.
inline Batch MakeExampleBatch(int records) {
  auto specs = ParseFeatureSpecs("image:bytes,label:int64,emb:float32[4],tokens:int64[*]");
  EXPECT_TRUE(specs.ok()) << specs.status();
  auto builder = BatchBuilder::Create(*specs);
  EXPECT_TRUE(builder.ok()) << builder.status();
  for (int i = 0; i < records; ++i) {
    const float f = static_cast<float>(i);
    absl::Status added = (*builder)->AddRecord(
        EncodeExample({{"image", Feature::Bytes({std::string(100 + i, static_cast<char>(i))})},
                       {"label", Feature::Ints({i})},
                       {"emb", Feature::Floats({f, -f, f / 2, 1})},
                       {"tokens", Feature::Ints(std::vector<int64_t>(i % 5, i))}}));
    EXPECT_TRUE(added.ok()) << added;
  }
  absl::StatusOr<Batch> batch = (*builder)->Finish();
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *std::move(batch);
}

// Expects `client` to fetch `key` within `timeout` and receive `batch`, byte for byte (by content
// hash).
inline void ExpectFetched(DataClient& client, const BatchKey& key, const Batch& batch,
                          absl::Duration timeout = absl::Seconds(5)) {
  auto got = client.Fetch(key, absl::Now() + timeout);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ContentHash(), batch.ContentHash());
}

// A BatchSource whose answers the test scripts. Thread-safe.
//   GetBatch: the error set with Fail(key), else the batch Put(key), else waits for one until
//     the deadline, then DEADLINE_EXCEEDED "batch <n> of job '<job>' epoch <e> not made by the
//     deadline".
//   GetAnyBatch: the next batch PutAny for (job, epoch); when none is queued, OUT_OF_RANGE "no
//     more batches of job '<job>' epoch <e>" once Finish(job, epoch) was called, else waits until
//     the deadline, then DEADLINE_EXCEEDED "no batch of job '<job>' epoch <e> ready".
//   Hold(): every call blocks, ignoring its deadline, until Unhold() (a source that hangs).
class FakeBatchSource final : public BatchSource {
 public:
  void Put(const BatchKey& key, Batch batch) {
    absl::MutexLock lock(&mu_);
    batches_.insert_or_assign(key, std::move(batch));
  }
  // Puts MakeBatch(bytes, seed) as `key` and returns it, what a fetch of `key` must give.
  Batch PutMade(const BatchKey& key, size_t bytes, uint64_t seed) {
    Batch batch = MakeBatch(bytes, seed);
    Put(key, batch);
    return batch;
  }
  // Every job's batches are served compressed with `codec` (TCP only).
  void SetCompression(Codec codec) {
    absl::MutexLock lock(&mu_);
    codec_ = codec;
  }
  Codec CompressionOf(absl::string_view job) override {
    absl::MutexLock lock(&mu_);
    return codec_;
  }
  void PutAny(const std::string& job, uint64_t epoch, uint64_t index, Batch batch) {
    absl::MutexLock lock(&mu_);
    queues_[{job, epoch}].emplace_back(index, std::move(batch));
  }
  void Finish(const std::string& job, uint64_t epoch) {
    absl::MutexLock lock(&mu_);
    finished_.insert({job, epoch});
  }
  void Fail(const BatchKey& key, absl::Status status) {
    absl::MutexLock lock(&mu_);
    errors_.insert_or_assign(key, std::move(status));
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Unhold() {
    absl::MutexLock lock(&mu_);
    held_ = false;
  }
  // Calls that have entered the source and not returned yet.
  int inside() const {
    absl::MutexLock lock(&mu_);
    return inside_;
  }
  // Waits until `n` calls are inside the source (or 5 s pass).
  bool AwaitInside(int n) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return inside_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5));
  }
  std::vector<std::pair<BatchKey, uint64_t>> served() const {
    absl::MutexLock lock(&mu_);
    return served_;
  }

  // Put or Fail already, and not held: the server may hold answers back for it.
  bool Ready(const BatchKey& key) override {
    absl::MutexLock lock(&mu_);
    return !held_ && (errors_.contains(key) || batches_.contains(key));
  }

  absl::StatusOr<Batch> GetBatch(const BatchKey& key, absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    Inside inside(this);
    if (auto it = errors_.find(key); it != errors_.end()) return it->second;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batches_.contains(key); };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("batch ", key.batch, " of job '", key.job,
                                                      "' epoch ", key.epoch,
                                                      " not made by the deadline"));
    }
    return batches_.at(key);
  }

  absl::StatusOr<std::pair<uint64_t, Batch>> GetAnyBatch(absl::string_view job, uint64_t epoch,
                                                         absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    Inside inside(this);
    const std::pair<std::string, uint64_t> id(job, epoch);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = queues_.find(id);
      return (it != queues_.end() && !it->second.empty()) || finished_.contains(id);
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no batch of job '", job, "' epoch ", epoch, " ready"));
    }
    auto& queue = queues_[id];
    if (queue.empty()) {
      return absl::OutOfRangeError(
          absl::StrCat("no more batches of job '", job, "' epoch ", epoch));
    }
    auto next = std::move(queue.front());
    queue.pop_front();
    return next;
  }

  void OnServed(const BatchKey& key, uint64_t bytes) override {
    absl::MutexLock lock(&mu_);
    served_.emplace_back(key, bytes);
  }

 private:
  // Counts a call while it is inside, and makes it wait while the source is held.
  class Inside {
   public:
    explicit Inside(FakeBatchSource* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) : s_(s) {
      ++s_->inside_;
      auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s_->mu_) { return !s_->held_; };
      s_->mu_.Await(absl::Condition(&released));
    }
    ~Inside() { --s_->inside_; }

   private:
    FakeBatchSource* const s_;
  };

  mutable absl::Mutex mu_;
  Codec codec_ ABSL_GUARDED_BY(mu_) = Codec::kNone;
  absl::flat_hash_map<BatchKey, Batch> batches_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BatchKey, absl::Status> errors_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<std::string, uint64_t>, std::deque<std::pair<uint64_t, Batch>>>
      queues_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::pair<std::string, uint64_t>> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<BatchKey, uint64_t>> served_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int inside_ ABSL_GUARDED_BY(mu_) = 0;
};

// Reads one whole frame (header and body, at most 1 MiB) from a raw socket within 5 s.
inline absl::StatusOr<std::pair<frame::FrameHeader, std::string>> RawReadFrame(int fd) {
  const net::IoWait wait{.deadline = absl::Now() + absl::Seconds(5)};
  char header[frame::kHeaderBytes];
  absl::Status got = net::RecvAll(fd, header, sizeof(header), wait, "test peer");
  if (!got.ok()) return got;
  absl::StatusOr<frame::FrameHeader> h = frame::ParseHeader(absl::string_view(header, 16));
  if (!h.ok()) return h.status();
  if (h->length > (1 << 20)) return absl::OutOfRangeError("frame too long for a test");
  std::string body(h->length, '\0');
  got = net::RecvAll(fd, body.data(), body.size(), wait, "test peer");
  if (!got.ok()) return got;
  return std::make_pair(*h, std::move(body));
}

// The next frame from the server on a raw socket, or the error its ERROR frame carries.
inline absl::StatusOr<std::pair<frame::FrameHeader, std::string>> RawReadAnswer(int fd) {
  auto got = RawReadFrame(fd);
  if (!got.ok() || got->first.type != static_cast<uint32_t>(frame::FrameType::kError)) return got;
  auto error = frame::ParseError(got->second);  // never an OK code
  return error.ok() ? absl::Status(error->code, error->message) : error.status();
}

// The client's side of the handshake on a raw socket, in protocol `version`, proving `token`
// (none when empty) without checking the server's proof: OK once HELLO_OK has come; the
// server's ERROR as a status.
inline absl::Status RawClientHandshake(int fd, uint32_t version, absl::string_view token) {
  const net::IoWait wait{.deadline = absl::Now() + absl::Seconds(5)};
  const std::string nonce(kNonceBytes, 'c');
  absl::Status sent = net::SendAll(fd, frame::EncodeHello(version, nonce), wait, "test peer");
  if (!sent.ok()) return sent;
  auto challenge = RawReadAnswer(fd);
  if (!challenge.ok()) return challenge.status();
  auto parsed = frame::ParseChallenge(challenge->second);
  if (!parsed.ok()) return parsed.status();
  const std::string proof =
      token.empty() ? std::string()
                    : TokenProof(token, frame::ProofLabel(version, false), nonce, parsed->nonce);
  sent = net::SendAll(fd, frame::EncodeAuth(proof), wait, "test peer");
  if (!sent.ok()) return sent;
  auto ok = RawReadAnswer(fd);
  if (!ok.ok()) return ok.status();
  if (ok->first.type != static_cast<uint32_t>(frame::FrameType::kHelloOk)) {
    return absl::DataLossError(absl::StrCat("frame type ", ok->first.type, " for HELLO_OK"));
  }
  return absl::OkStatus();
}

// A TCP connection from `source` (an address of this host: 127.0.0.x) to 127.0.0.1:`port`, made
// by `deadline` unless `stop` fires (CANCELLED).
inline absl::StatusOr<net::Socket> DialFrom(const std::string& source, int port,
                                            absl::Time deadline, const net::WakeEvent* stop) {
  net::Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return absl::InternalError("socket() failed");
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &local.sin_addr);
  if (::bind(socket.fd(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", source));
  }
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::connect(socket.fd(), reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0 &&
      errno != EINPROGRESS) {
    return absl::UnavailableError("connect failed");
  }
  const absl::Status ready =
      net::WaitReady(socket.fd(), POLLOUT, net::IoWait{.deadline = deadline, .wake = stop},
                     absl::Now(), "connecting to", "the server");
  if (!ready.ok()) return ready;
  int error = 0;
  socklen_t len = sizeof(error);
  ::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &len);
  if (error != 0) return absl::UnavailableError("connect failed");
  return socket;
}

// Clients without the token that reconnect in a loop to 127.0.0.1:`port` until Stop, from each
// address of `sources`: `silent` threads per address, each holding a connection that sends
// `silent_prefix` (nothing by default; the start of a TLS record, say) and then nothing until the
// server closes it, then opening the next; and `looping` threads per address, each sending a
// HELLO and an AUTH without a proof (`version`), then reconnecting. Counts what the server did to
// them. Thread-safe.
class HandshakeFlood {
 public:
  HandshakeFlood(int port, const std::vector<std::string>& sources, int silent, int looping,
                 uint32_t version = frame::kDataProtocolVersion, std::string silent_prefix = "")
      : silent_prefix_(std::move(silent_prefix)) {
    auto stop = net::WakeEvent::Create();
    EXPECT_TRUE(stop.ok()) << stop.status();
    stop_ = *std::move(stop);
    for (const std::string& source : sources) {
      for (int i = 0; i < silent; ++i) {
        threads_.emplace_back([this, port, source] { Silent(port, source); });
      }
      for (int i = 0; i < looping; ++i) {
        threads_.emplace_back([this, port, source, version] { Looping(port, source, version); });
      }
    }
  }
  ~HandshakeFlood() { Stop(); }
  HandshakeFlood(const HandshakeFlood&) = delete;
  HandshakeFlood& operator=(const HandshakeFlood&) = delete;

  // Ends every thread promptly.
  void Stop() {
    stop_->Notify();
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }
  // Connections made.
  uint64_t connections() const { return connections_.load(); }
  // Silent connections the server closed without a word, before its handshake timeout (5 s):
  // evicted for newer ones.
  uint64_t dropped() const { return dropped_.load(); }
  // Connections refused with an ERROR naming the handshake slots.
  uint64_t refused() const { return refused_.load(); }

 private:
  // A new connection to `port` from `source`, counted; nullopt (after a short pause, unless
  // stopping) when it cannot be made.
  std::optional<net::Socket> Connect(int port, const std::string& source) {
    absl::StatusOr<net::Socket> socket =
        DialFrom(source, port, absl::Now() + absl::Seconds(5), stop_.get());
    if (!socket.ok()) {
      if (!absl::IsCancelled(socket.status())) absl::SleepFor(absl::Milliseconds(5));
      return std::nullopt;
    }
    ++connections_;
    return *std::move(socket);
  }

  void Silent(int port, const std::string& source) {
    while (!stop_->notified()) {
      std::optional<net::Socket> socket = Connect(port, source);
      if (!socket.has_value()) continue;
      const absl::Time opened = absl::Now();
      if (!silent_prefix_.empty()) {
        net::SendAll(socket->fd(), silent_prefix_,
                     net::IoWait{.deadline = absl::Now() + absl::Seconds(5), .wake = stop_.get()},
                     "the server")
            .IgnoreError();
      }
      std::string got;
      char buffer[4096];
      while (true) {
        absl::StatusOr<size_t> n = net::RecvSome(
            socket->fd(), buffer, sizeof(buffer),
            net::IoWait{.deadline = absl::Now() + absl::Seconds(10), .wake = stop_.get()},
            "the server");
        if (n.ok() && *n > 0) {
          got.append(buffer, *n);
          continue;
        }
        if (!n.ok() && absl::IsCancelled(n.status())) return;
        break;  // closed or reset by the server
      }
      if (got.find("in their handshake already") != std::string::npos) {
        ++refused_;
      } else if (got.empty() && absl::Now() - opened < absl::Seconds(4)) {
        ++dropped_;
      }
    }
  }

  void Looping(int port, const std::string& source, uint32_t version) {
    while (!stop_->notified()) {
      std::optional<net::Socket> socket = Connect(port, source);
      if (!socket.has_value()) continue;
      const absl::Status refused = RawClientHandshake(socket->fd(), version, "");
      if (refused.message().find("in their handshake already") != absl::string_view::npos) {
        ++refused_;
      }
    }
  }

  const std::string silent_prefix_;
  std::unique_ptr<net::WakeEvent> stop_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> connections_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> refused_{0};
};

// What FetchRetrying did.
struct Fetched {
  absl::StatusOr<Batch> batch = absl::UnknownError("not tried");
  absl::Duration took;  // from the first connect to the batch, or to giving up
  int attempts = 0;
};

// As a consumer does with a server that refuses it for a while: connects to `address` with
// `options` and fetches `key`, again 10 ms after each UNAVAILABLE, until `within` has passed.
inline Fetched FetchRetrying(Transport* transport, const std::string& address,
                             const DataClientOptions& options, const BatchKey& key,
                             absl::Duration within) {
  Fetched fetched;
  const absl::Time start = absl::Now();
  while (true) {
    ++fetched.attempts;
    absl::StatusOr<std::unique_ptr<DataClient>> client = transport->Connect(address, options);
    fetched.batch = client.ok() ? (*client)->Fetch(key, absl::Now() + absl::Seconds(5))
                                : absl::StatusOr<Batch>(client.status());
    fetched.took = absl::Now() - start;
    if (!absl::IsUnavailable(fetched.batch.status()) || fetched.took >= within) return fetched;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// What a scripted server saw of a client's handshake.
struct SeenHandshake {
  std::string hello;  // the HELLO, prefix and payload
  std::string auth;   // the AUTH frame, header and body; empty when the client sent none
  bool closed_after_challenge = false;  // the client closed instead of sending AUTH
};

// The server's side of the handshake on a raw socket, in protocol `version`: reads the HELLO and
// answers CHALLENGE with a proof of `token` (`proof` instead, when given: a forged one), then
// reads the AUTH frame. Does not answer it: the caller sends HELLO_OK or ERROR.
inline SeenHandshake RawServerHandshake(int fd, uint32_t version, absl::string_view token,
                                        std::optional<std::string> proof = std::nullopt) {
  SeenHandshake seen;
  const net::IoWait wait{.deadline = absl::Now() + absl::Seconds(5)};
  char prefix[frame::kHelloPrefixBytes];
  if (!net::RecvAll(fd, prefix, sizeof(prefix), wait, "client").ok()) return seen;
  auto hello = frame::ParseHelloPrefix(absl::string_view(prefix, sizeof(prefix)));
  if (!hello.ok()) return seen;
  std::string nonce(hello->payload_length, '\0');
  if (!net::RecvAll(fd, nonce.data(), nonce.size(), wait, "client").ok()) return seen;
  seen.hello = std::string(prefix, sizeof(prefix)) + nonce;
  const std::string server_nonce(kNonceBytes, 's');
  const std::string server_proof =
      proof.has_value() ? *proof
      : token.empty()   ? std::string()
                        : TokenProof(token, frame::ProofLabel(version, true), nonce, server_nonce);
  net::SendAll(fd, frame::EncodeChallenge(server_nonce, server_proof), wait, "client")
      .IgnoreError();
  char header[frame::kHeaderBytes];
  absl::Status got = net::RecvAll(fd, header, sizeof(header), wait, "client");
  if (!got.ok()) {
    seen.closed_after_challenge = absl::IsUnavailable(got);
    return seen;
  }
  auto h = frame::ParseHeader(absl::string_view(header, sizeof(header)));
  if (!h.ok() || h->length > 4096) return seen;
  std::string body(h->length, '\0');
  if (!net::RecvAll(fd, body.data(), body.size(), wait, "client").ok()) return seen;
  seen.auth = std::string(header, sizeof(header)) + body;
  return seen;
}

inline int CountOpenFds() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir) != nullptr) ++n;
    ::closedir(dir);
  }
  return n;
}

// The threads of this process now, as /proc says.
inline int ProcThreads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

inline int CountThreads() {
  // A sanitizer runtime (ThreadSanitizer) starts a thread of its own at the process's first
  // pthread_create; start and join one thread first so that it is counted from the beginning.
  // The joined thread itself can linger in /proc for a moment, and a first count that saw it
  // would find a thread missing at the end: wait until the count has held for 100 ms (1 s at
  // most), once per process.
  static const bool runtime_threads_started = [] {
    std::thread([] {}).join();
    int last = ProcThreads(), same = 0;
    for (int i = 0; i < 100 && same < 10; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
      const int now = ProcThreads();
      same = now == last ? same + 1 : 0;
      last = now;
    }
    return true;
  }();
  (void)runtime_threads_started;
  return ProcThreads();
}

// Declare it as the first member of a fixture, so that it is built before and destroyed after
// everything the test makes: it aborts the test binary when the test runs longer than `limit`
// (no test may hang the suite), and fails the test when threads or descriptors outlive it.
// Thread-compatible.
class TestGuard {
 public:
  explicit TestGuard(absl::Duration limit = absl::Seconds(60))
      : fds_(CountOpenFds()), threads_(CountThreads()) {
    watchdog_ = std::thread([this, limit] {
      if (!done_.WaitForNotificationWithTimeout(limit)) {
        std::fprintf(stderr, "test ran longer than %s; aborting\n",
                     absl::FormatDuration(limit).c_str());
        std::abort();
      }
    });
  }
  ~TestGuard() {
    done_.Notify();
    watchdog_.join();
    // A joined thread can linger in /proc for a moment after pthread_join returns.
    const absl::Time until = absl::Now() + absl::Seconds(2);
    while ((CountThreads() != threads_ || CountOpenFds() != fds_) && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(CountThreads(), threads_) << "threads left behind";
    EXPECT_EQ(CountOpenFds(), fds_) << "descriptors left behind";
  }

 private:
  const int fds_;
  const int threads_;
  absl::Notification done_;
  std::thread watchdog_;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TRANSPORT_TRANSPORT_TESTING_H_
