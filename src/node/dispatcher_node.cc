#include "src/node/dispatcher_node.h"

#include "absl/strings/str_cat.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/metrics/prometheus.h"
#include "src/rpc/grpc_util.h"

namespace croupier {

absl::StatusOr<std::unique_ptr<DispatcherNode>> DispatcherNode::Start(
    DispatcherNodeOptions options) {
  if (options.work_dir.empty()) {
    return absl::InvalidArgumentError("the dispatcher needs a work directory (--work-dir)");
  }
  Env& env = *Env::Default();
  RETURN_IF_ERROR(env.CreateDirs(options.work_dir));
  // Fail now, not at the first job, if the work directory cannot be written.
  const std::string probe = options.work_dir + "/.croupier-write-test";
  RETURN_IF_ERROR(env.WriteFileAtomically(probe, "ok"));
  std::remove(probe.c_str());
  if (options.dispatcher.index_cache_dir.empty()) {
    options.dispatcher.index_cache_dir = options.work_dir + "/index";
  }
  // Replayed by DispatcherImpl::Create before the server listens, so no call sees a partial state.
  if (options.dispatcher.journal_path.empty()) {
    options.dispatcher.journal_path = options.work_dir + "/" + kJournalFileName;
  }

  std::unique_ptr<DispatcherNode> node(new DispatcherNode());
  node->options_ = options;
  ASSIGN_OR_RETURN(node->impl_, DispatcherImpl::Create(options.dispatcher));
  node->service_ = std::make_unique<rpc::DispatcherService>(node->impl_.get(), options.auth_token);

  grpc::ServerBuilder builder;
  const std::string listen = absl::StrCat(options.bind_address, ":", options.port);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &node->port_);
  builder.RegisterService(node->service_.get());
  builder.SetMaxReceiveMessageSize(rpc::kMaxControlMessageBytes);
  builder.SetMaxSendMessageSize(rpc::kMaxControlMessageBytes);
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || node->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("the dispatcher cannot listen on ", listen, " (port in use?)"));
  }
  DispatcherNode* raw = node.get();
  if (options.metrics_port >= 0) {
    ASSIGN_OR_RETURN(node->metrics_,
                     MetricsServer::Start(options.bind_address, options.metrics_port, [raw] {
                       auto status = raw->impl_->GetStatus(v1::StatusRequest());
                       return status.ok() ? metrics::FormatPrometheus(*status) : std::string();
                     }));
  }
  node->ticker_ = std::thread([raw] {
    while (!raw->stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) raw->impl_->Tick();
  });
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("listening on ", node->address(), ", work directory ", options.work_dir,
                   options.auth_token.empty() ? "" : ", auth token required",
                   node->metrics_ ? absl::StrCat(", metrics on http://", options.bind_address,
                                                 ":", node->metrics_port(), "/metrics")
                                  : ""));
  return node;
}

std::string DispatcherNode::address() const {
  return absl::StrCat(options_.bind_address, ":", port_);
}

void DispatcherNode::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (ticker_.joinable()) ticker_.join();
    if (metrics_) metrics_->Stop();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      server_->Wait();
    }
    Log(LogLevel::kInfo, "dispatcher", absl::StrCat("stopped (", address(), ")"));
  });
}

DispatcherNode::~DispatcherNode() { Shutdown(); }

}  // namespace croupier
