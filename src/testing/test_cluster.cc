#include "src/testing/test_cluster.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/common/status_macros.h"
#include "src/consumer/connect.h"
#include "src/rpc/dispatcher_client.h"

namespace croupier::testing {

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(TestClusterOptions options) {
  std::unique_ptr<TestCluster> cluster(new TestCluster());
  std::string tmpl = (std::filesystem::temp_directory_path() / "croupier_cluster.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a directory like ", tmpl));
  }
  cluster->dir_ = tmpl;
  cluster->options_ = std::move(options);
  const TestClusterOptions& o = cluster->options_;
  DispatcherOptions dispatcher;
  dispatcher.heartbeat_interval = o.heartbeat_interval;
  dispatcher.producer_timeout = o.producer_timeout;
  dispatcher.consumer_timeout = o.consumer_timeout;
  dispatcher.rounds_per_task = o.rounds_per_task;
  dispatcher.job_retention = o.job_retention;
  dispatcher.index_cache_dir = cluster->dir_ + "/index";
  if (o.journal) dispatcher.journal_path = cluster->dir_ + "/journal";
  dispatcher.journal_sync = false;
  if (o.control_plane == ControlPlaneKind::kGrpc) {
    // The node keeps its journal and index cache in its work directory, and ticks every second.
    DispatcherNodeOptions node;
    node.port = 0;
    node.work_dir = cluster->dir_ + "/dispatcher";
    node.metrics_port = o.metrics_port;
    node.dispatcher = std::move(dispatcher);
    node.dispatcher.journal_path.clear();
    node.dispatcher.index_cache_dir.clear();
    ASSIGN_OR_RETURN(cluster->node_, DispatcherNode::Start(std::move(node)));
  } else {
    if (o.metrics_port >= 0) {
      return absl::InvalidArgumentError(
          "a test cluster serves metrics only with ControlPlaneKind::kGrpc (its dispatcher node's "
          "HTTP server)");
    }
    InProcessDispatcherOptions d;
    d.dispatcher = std::move(dispatcher);
    d.tick_interval = std::min(o.heartbeat_interval, absl::Milliseconds(100));
    ASSIGN_OR_RETURN(cluster->dispatcher_, InProcessDispatcher::Start(std::move(d)));
  }
  for (int i = 0; i < o.producers; ++i) RETURN_IF_ERROR(cluster->AddProducer().status());
  return cluster;
}

TestCluster::~TestCluster() {
  for (auto& producer : producers_) {
    if (producer) producer->Shutdown();
  }
  producers_.clear();
  dispatcher_.reset();
  node_.reset();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string TestCluster::address() const {
  return node_ ? node_->address() : std::string("in-process");
}

int TestCluster::metrics_port() const { return node_ ? node_->metrics_port() : 0; }

std::unique_ptr<ControlPlane> TestCluster::NewClient(absl::Duration timeout) {
  if (node_) {
    return rpc::DispatcherClient::Create(
        node_->address(),
        {.call_timeout = std::min(timeout, absl::Seconds(10)), .timeout = timeout});
  }
  return dispatcher_->NewClient(timeout);
}

InProcessDispatcher& TestCluster::dispatcher() {
  if (!dispatcher_) {
    std::fprintf(stderr, "TestCluster::dispatcher(): the cluster's dispatcher is behind gRPC\n");
    std::abort();
  }
  return *dispatcher_;
}

absl::StatusOr<v1::JobInfo> TestCluster::CreateJob(const v1::JobSpec& spec) {
  v1::CreateJobRequest request;
  *request.mutable_spec() = spec;
  ASSIGN_OR_RETURN(v1::CreateJobResponse response, NewClient()->CreateJob(request));
  return response.job();
}

absl::StatusOr<v1::StatusResponse> TestCluster::Status() {
  return NewClient()->GetStatus(v1::StatusRequest());
}

absl::StatusOr<size_t> TestCluster::AddProducer() { return AddProducer(options_.producer); }

absl::StatusOr<size_t> TestCluster::AddProducer(ProducerNodeOptions options) {
  options.bind_address = "127.0.0.1";
  options.port = 0;
  options.index_cache_dir = dir_ + "/index";
  if (node_) {
    options.dispatcher = node_->address();  // the producer's own gRPC client
  } else {
    options.dispatcher = "in-process";
    InProcessDispatcher* dispatcher = dispatcher_.get();
    const absl::Duration timeout = options.connect_timeout;
    options.control_plane = [dispatcher, timeout] { return dispatcher->NewClient(timeout); };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ProducerNode> node, ProducerNode::Start(std::move(options)));
  producers_.push_back(std::move(node));
  return producers_.size() - 1;
}

void TestCluster::StopProducer(size_t i) {
  if (producers_[i]) producers_[i]->Shutdown();
}

absl::StatusOr<std::unique_ptr<Consumer>> TestCluster::Connect(const std::string& job,
                                                               uint32_t rank, uint32_t world,
                                                               ConsumerOptions options) {
  options.job = job;
  options.rank = rank;
  options.world = world;
  if (options.shm.empty()) options.shm = options_.consumer_shm;
  if (node_) {
    options.dispatcher = node_->address();
    return Consumer::Connect(std::move(options));  // the consumer's own gRPC client
  }
  options.dispatcher = "in-process";
  return ConnectConsumer(std::move(options), dispatcher_->NewClient(options.timeout));
}

}  // namespace croupier::testing
