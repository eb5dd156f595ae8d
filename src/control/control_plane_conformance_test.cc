// The control plane's contract (control_plane.h), run against both implementations: the gRPC
// client of a dispatcher node (rpc::DispatcherClient to a DispatcherNode on a free port) and the
// in-process one (InProcessDispatcher). What a producer or a consumer sees of the dispatcher must
// not depend on which carries the calls, so the in-process cluster's tests speak for the gRPC one.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/control/call_deadline.h"
#include "src/control/control_plane.h"
#include "src/control/in_process.h"
#include "src/node/dispatcher_node.h"
#include "src/rpc/dispatcher_client.h"

namespace croupier {
namespace {

using ::testing::HasSubstr;

// A dispatcher behind one implementation of the control plane.
class Backend {
 public:
  virtual ~Backend() = default;
  // A client whose calls give up after `timeout`.
  virtual std::unique_ptr<ControlPlane> Client(absl::Duration timeout) = 0;
  // The dispatcher stops, as a killed process: nothing answers any more.
  virtual void Kill() = 0;
};

class InProcessBackend final : public Backend {
 public:
  InProcessBackend() {
    auto d = InProcessDispatcher::Start({});
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok()) dispatcher_ = *std::move(d);
  }
  std::unique_ptr<ControlPlane> Client(absl::Duration timeout) override {
    return dispatcher_->NewClient(timeout);
  }
  void Kill() override { dispatcher_->Crash(); }

 private:
  std::unique_ptr<InProcessDispatcher> dispatcher_;
};

class GrpcBackend final : public Backend {
 public:
  GrpcBackend() {
    char dir[] = "/tmp/croupier-conformance-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    DispatcherNodeOptions options;
    options.port = 0;
    options.work_dir = dir_;
    auto node = DispatcherNode::Start(std::move(options));
    EXPECT_TRUE(node.ok()) << node.status();
    if (node.ok()) node_ = *std::move(node);
  }
  ~GrpcBackend() override {
    node_.reset();
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }
  std::unique_ptr<ControlPlane> Client(absl::Duration timeout) override {
    rpc::DispatcherClientOptions options;
    options.timeout = timeout;
    options.call_timeout = std::min(timeout, absl::Seconds(2));
    return rpc::DispatcherClient::Create(node_->address(), options);
  }
  void Kill() override { node_->Shutdown(); }

 private:
  std::string dir_;
  std::unique_ptr<DispatcherNode> node_;
};

enum class Kind { kGrpc, kInProcess };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kGrpc ? "Grpc" : "InProcess";
}

// A job that reads no files: a map job of 100 records.
v1::JobSpec MapSpec(const std::string& name = "m") {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_source(v1::SOURCE_KIND_MAP);
  spec.set_features("x:int64");
  spec.set_batch_size(4);
  spec.set_num_consumers(2);
  spec.set_num_records(100);
  return spec;
}

v1::CreateJobRequest Create(const v1::JobSpec& spec, bool exist_ok = false) {
  v1::CreateJobRequest request;
  *request.mutable_spec() = spec;
  request.set_exist_ok(exist_ok);
  return request;
}

class ControlPlaneConformanceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kGrpc) {
      backend_ = std::make_unique<GrpcBackend>();
    } else {
      backend_ = std::make_unique<InProcessBackend>();
    }
    client_ = backend_->Client(absl::Seconds(5));
  }

  // The heartbeat of a producer at 127.0.0.1:1 with 2 free task slots, registered by sending it:
  // its id is the one the dispatcher gave.
  v1::ProducerHeartbeatRequest RegisteredProducer() {
    v1::ProducerHeartbeatRequest beat;
    beat.set_data_address("127.0.0.1:1");
    beat.set_free_task_slots(2);
    auto registered = client_->ProducerHeartbeat(beat);
    EXPECT_TRUE(registered.ok()) << registered.status();
    if (registered.ok()) beat.set_producer_id(registered->producer_id());
    return beat;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ControlPlane> client_;
};

TEST_P(ControlPlaneConformanceTest, AJobCreatedIsTheJobGotAndCreatingItAgainIsRefused) {
  auto created = client_->CreateJob(Create(MapSpec()));
  ASSERT_TRUE(created.ok()) << created.status();
  v1::GetJobRequest get;
  get.set_name("m");
  auto got = client_->GetJob(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().SerializeAsString(), created->job().SerializeAsString());
  EXPECT_EQ(got->job().num_records(), 100u);

  auto again = client_->CreateJob(Create(MapSpec()));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  auto exist_ok = client_->CreateJob(Create(MapSpec(), /*exist_ok=*/true));
  ASSERT_TRUE(exist_ok.ok()) << exist_ok.status();
  EXPECT_EQ(exist_ok->job().SerializeAsString(), created->job().SerializeAsString());

  get.set_name("nope");
  EXPECT_EQ(client_->GetJob(get).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ControlPlaneConformanceTest, ABadSpecIsRefusedNamingTheJob) {
  v1::JobSpec spec = MapSpec("bad");
  spec.set_batch_size(0);
  auto created = client_->CreateJob(Create(spec));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << created.status();
  EXPECT_THAT(created.status().message(), HasSubstr("bad"));
}

TEST_P(ControlPlaneConformanceTest, AProducerRegistersByHeartbeatAndTheStatusListsIt) {
  v1::ProducerHeartbeatRequest beat = RegisteredProducer();
  EXPECT_NE(beat.producer_id(), 0u);
  auto status = client_->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->producers_size(), 1);
  EXPECT_EQ(status->producers(0).producer_id(), beat.producer_id());
  EXPECT_EQ(status->producers(0).data_address(), "127.0.0.1:1");

  beat.set_producer_id(beat.producer_id() + 1000);  // one the dispatcher never gave
  EXPECT_EQ(client_->ProducerHeartbeat(beat).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ControlPlaneConformanceTest, ADeletedJobIsGone) {
  ASSERT_TRUE(client_->CreateJob(Create(MapSpec())).ok());
  v1::DeleteJobRequest del;
  del.set_name("m");
  auto deleted = client_->DeleteJob(del);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  v1::GetJobRequest get;
  get.set_name("m");
  EXPECT_EQ(client_->GetJob(get).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->DeleteJob(del).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ControlPlaneConformanceTest, CancelEndsAHeldHeartbeatAtOnceAndEveryLaterCall) {
  v1::ProducerHeartbeatRequest beat = RegisteredProducer();
  ASSERT_NE(beat.producer_id(), 0u);
  beat.set_wait_for_work_ms(5000);  // no job: the dispatcher holds it
  absl::StatusOr<v1::ProducerHeartbeatResponse> held;
  const absl::Time start = absl::Now();
  std::thread call([&] { held = client_->ProducerHeartbeat(beat); });
  absl::SleepFor(absl::Milliseconds(200));
  client_->Cancel();
  call.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(held.status().code(), absl::StatusCode::kCancelled) << held.status();
  EXPECT_EQ(client_->GetStatus({}).status().code(), absl::StatusCode::kCancelled);
}

TEST_P(ControlPlaneConformanceTest, ADeadDispatcherIsADeadlineNamingItsAddressWithinTheTimeout) {
  std::unique_ptr<ControlPlane> client = backend_->Client(absl::Seconds(1));
  backend_->Kill();
  const absl::Time start = absl::Now();
  auto status = client->GetStatus({});
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_EQ(status.status().code(), absl::StatusCode::kDeadlineExceeded) << status.status();
  EXPECT_THAT(status.status().message(), HasSubstr(client->address()));
}

// A caller's own deadline (call_deadline.h) ends a call sooner than the client's timeout: a
// consumer's Next() must not outlive its timeout because a call began just before it.
TEST_P(ControlPlaneConformanceTest, ACallEndsByTheCallersOwnDeadline) {
  std::unique_ptr<ControlPlane> client = backend_->Client(absl::Seconds(30));
  backend_->Kill();
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::StatusResponse> status = absl::UnknownError("not called");
  {
    const CallDeadline outer(start + absl::Seconds(20));
    const CallDeadline bounded(start + absl::Milliseconds(500));  // the nearer one counts
    status = client->GetStatus({});
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(status.status().code(), absl::StatusCode::kDeadlineExceeded) << status.status();
  EXPECT_THAT(status.status().message(), HasSubstr(client->address()));
  EXPECT_EQ(CallDeadline::Current(), absl::InfiniteFuture()) << "the scopes are closed";
}

INSTANTIATE_TEST_SUITE_P(Implementations, ControlPlaneConformanceTest,
                         ::testing::Values(Kind::kGrpc, Kind::kInProcess), KindName);

}  // namespace
}  // namespace croupier
