// The in-process test cluster: a dispatcher (InProcessDispatcher: DispatcherImpl without gRPC),
// producers (ProducerNode, each with its real data server on 127.0.0.1, port 0) and consumers
// (the real Consumer), all in one process. The control plane is called directly, or, with
// ControlPlaneKind::kGrpc, through the dispatcher's real gRPC server on 127.0.0.1 (DispatcherNode);
// the data plane is the real TCP (and shared-memory) one. For tests of the service's logic: exactly-once, the
// deal, failover, resume. What only real processes show (SIGKILL, signals, the network, TLS,
// memory) stays with the multi-process tests in tests/. It has no test framework in it: the
// Python package offers it too (croupier.testing, python/src/py_test_cluster.cc), and the helpers
// of the C++ tests are in cluster_testing.h.
//
//   ASSERT_OK_AND_ASSIGN(auto cluster, TestCluster::Start({.producers = 2}));
//   std::vector<std::string> files = testing::WriteDataset(cluster->dir(), {40, 40});
//   ASSERT_OK(cluster->CreateJob(spec).status());
//   ASSERT_OK_AND_ASSIGN(auto consumer, cluster->Connect("train", /*rank=*/0, /*world=*/2));
#ifndef CROUPIER_SRC_TESTING_TEST_CLUSTER_H_
#define CROUPIER_SRC_TESTING_TEST_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "croupier/consumer.h"
#include "proto/croupier.pb.h"
#include "src/control/in_process.h"
#include "src/node/dispatcher_node.h"
#include "src/node/producer_node.h"

namespace croupier::testing {

// How producers and consumers reach the dispatcher: its calls made directly (InProcessDispatcher),
// or its gRPC server on 127.0.0.1 with the gRPC client (DispatcherNode, rpc::DispatcherClient), as
// in a deployment.
enum class ControlPlaneKind { kInProcess, kGrpc };

struct TestClusterOptions {
  int producers = 1;
  // Fast enough for tests: producers beat every 100 ms and expire after 1 s of silence.
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
  absl::Duration producer_timeout = absl::Seconds(1);
  absl::Duration consumer_timeout = absl::Seconds(5);
  uint32_t rounds_per_task = 0;  // DispatcherOptions::rounds_per_task
  // How long a done job is kept before the dispatcher deletes it (DispatcherOptions::job_retention).
  absl::Duration job_retention = absl::InfiniteDuration();
  // ControlPlaneKind::kGrpc: the dispatcher's HTTP server (Prometheus metrics, the web page and
  // /api/...) on 127.0.0.1:metrics_port (0: any free port, see metrics_port(); -1: none).
  int metrics_port = -1;
  // Journal the dispatcher's state (in dir()), so that RestartDispatcher() replays it.
  bool journal = true;
  ControlPlaneKind control_plane = ControlPlaneKind::kInProcess;
  // The consumers' transport (ConsumerOptions::shm) where a Connect leaves it empty: "off" (TCP),
  // "on" (shared memory: the producers must offer it), "" ($CROUPIER_SHM, else auto).
  std::string consumer_shm;
  // The template of every producer (dispatcher, control plane and index cache are set here).
  ProducerNodeOptions producer;
};

// Thread-safe where its members are; Start and the destructor from one thread.
class TestCluster {
 public:
  // A temporary directory (dir()), the dispatcher and options.producers producers.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(TestClusterOptions options = {});
  ~TestCluster();  // stops every producer and the dispatcher, removes dir()

  // A directory for the test's files, removed with the cluster.
  const std::string& dir() const { return dir_; }
  // The dispatcher's gRPC address (127.0.0.1:port) with ControlPlaneKind::kGrpc; "in-process"
  // otherwise.
  std::string address() const;
  // The dispatcher's HTTP server's port, or 0 without one (see TestClusterOptions::metrics_port).
  int metrics_port() const;

  // CreateJob as a client would call it (exist_ok false).
  absl::StatusOr<v1::JobInfo> CreateJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::StatusResponse> Status();

  // Starts one more producer from options.producer; returns its index.
  absl::StatusOr<size_t> AddProducer();
  // Starts one more producer from `options` instead of the template (a producer of a Python job:
  // its supply); dispatcher, control plane, address and index cache
  // are set here. Returns its index.
  absl::StatusOr<size_t> AddProducer(ProducerNodeOptions options);
  size_t num_producers() const { return producers_.size(); }
  ProducerNode* producer(size_t i) { return producers_[i].get(); }
  // The producer stops at once, as a killed one: its data server closes, its heartbeats stop, and
  // the dispatcher orphans its tasks once it expires (producer_timeout).
  void StopProducer(size_t i);

  // A consumer of rank `rank` of `world` of `job`, through an in-process control plane. `options`
  // gives the rest (prefetch window, timeout, resume); dispatcher, job, rank and world are set.
  absl::StatusOr<std::unique_ptr<Consumer>> Connect(const std::string& job, uint32_t rank,
                                                    uint32_t world, ConsumerOptions options = {});

  // A client of the dispatcher through the cluster's control plane.
  std::unique_ptr<ControlPlane> NewClient(absl::Duration timeout = absl::Seconds(10));

  // The in-process dispatcher, to crash it, restart it from its journal, or look at its state.
  // ControlPlaneKind::kInProcess only: aborts the test binary otherwise.
  InProcessDispatcher& dispatcher();

 private:
  TestCluster() = default;

  TestClusterOptions options_;
  std::string dir_;
  std::unique_ptr<InProcessDispatcher> dispatcher_;  // kInProcess
  std::unique_ptr<DispatcherNode> node_;               // kGrpc
  std::vector<std::unique_ptr<ProducerNode>> producers_;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_TESTING_TEST_CLUSTER_H_
