#include "src/node/dispatcher_node.h"

#include "absl/strings/str_cat.h"
#include "croupier_web/index_html.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/job/job_json.h"
#include "src/metrics/prometheus.h"
#include "src/node/open_files.h"
#include "src/rpc/grpc_util.h"
#include "src/s3/s3_env.h"

namespace croupier {
namespace {

// The status as JSON, as `croupier status --json` prints it (proto3 JSON, every field, the job
// settings by their text names).
std::string StatusJson(const absl::StatusOr<v1::StatusResponse>& status) {
  if (!status.ok()) {
    return absl::StrCat("{\"error\": \"", absl::StatusCodeToString(status.status().code()),
                        "\"}\n");
  }
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  return ToUserJson(*status, options) + "\n";
}

// `text` as the inside of a JSON string.
std::string JsonEscaped(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) escaped.push_back(c);
  }
  return escaped;
}

HttpReply ScaleError(int http_status, absl::StatusCode code, const std::string& message) {
  return {http_status, absl::StrCat("{\"error\": \"", absl::StatusCodeToString(code),
                                    "\", \"message\": \"", JsonEscaped(message), "\"}\n")};
}

// What an engine's autoscaler reads (docs/operations.md, "How many producers"): the number of
// producers the dispatcher recommends, in the shape a KEDA metrics-api trigger reads
// (valueLocation "producers.recommended"): the cluster's `croupier producer` processes, or with
// ?job=NAME that job's producers (its own for a map job, the shared ones for a TFRecord job).
// While the dispatcher is still measuring the figure is the number registered, so that nothing
// scales on a guess. An unknown job is a 404, a stream job (which has no target) a 409, each with
// a JSON error naming it.
HttpReply ScaleJson(const absl::StatusOr<v1::StatusResponse>& status, const HttpQuery& query) {
  if (!status.ok()) {
    return ScaleError(503, status.status().code(), std::string(status.status().message()));
  }
  const v1::ProducerAdvice* advice = &status->producer_advice();
  std::string job;
  if (auto it = query.find("job"); it != query.end()) {
    job = it->second;
    advice = nullptr;
    for (const v1::JobSummary& summary : status->job_summaries()) {
      if (summary.name() == job) advice = &summary.producer_advice();
    }
    if (advice == nullptr) {
      return ScaleError(404, absl::StatusCode::kNotFound,
                        absl::StrCat("no job '", job, "' on this dispatcher"));
    }
    if (advice->fixed()) {
      return ScaleError(409, absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("job '", job, "': ", advice->reason()));
    }
  }
  const uint32_t recommended =
      advice->recommended() > 0 ? advice->recommended() : advice->producers();
  return {200,
          absl::StrCat(
              "{\"producers\": {\"recommended\": ", recommended,
              ", \"measured\": ", advice->recommended() > 0 ? "true" : "false",
              ", \"registered\": ", advice->producers(), ", \"target\": ", advice->target(),
              ", \"reason\": \"", JsonEscaped(advice->reason()), "\"",
              job.empty() ? "" : absl::StrCat(", \"job\": \"", JsonEscaped(job), "\""), "}}\n")};
}

}  // namespace

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

  // Every connection costs a descriptor, and gRPC stops accepting once it is out of them (1,100
  // idle connections under the common soft limit of 1,024 kept a dispatcher from accepting any
  // for minutes): take the whole hard limit. gRPC 1.51 has no option to cap connections.
  TakeTheHardDescriptorLimit("dispatcher");

  std::unique_ptr<DispatcherNode> node(new DispatcherNode());
  node->options_ = options;
  ASSIGN_OR_RETURN(node->impl_, DispatcherImpl::Create(options.dispatcher));
  node->service_ = std::make_unique<rpc::DispatcherService>(node->impl_.get(), options.auth_token);

  options.tls = ResolveTlsConfig(options.tls);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   rpc::MakeServerCredentials(options.tls));
  node->options_.tls = options.tls;
  grpc::ServerBuilder builder;
  const std::string listen = absl::StrCat(options.bind_address, ":", options.port);
  // Accepted by a listener of ours that outlives running out of descriptors (gRPC 1.51's stops
  // for good) and keeps a reserve of them free for the journal.
  ASSIGN_OR_RETURN(node->listener_,
                   rpc::GrpcListener::Create(builder, options.bind_address, options.port,
                                             credentials,
                                             {.reserve = options.descriptor_reserve}));
  node->port_ = node->listener_->port();
  builder.RegisterService(node->service_.get());
  builder.SetMaxReceiveMessageSize(rpc::kMaxControlMessageBytes);
  builder.SetMaxSendMessageSize(rpc::kMaxControlMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(options.handshake_timeout)));
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.max_connection_idle)));
  // Dead peers are found by pings every minute, answered within 20 s. The clients' own pings
  // (rpc::kKeepaliveTime) are welcome, with or without a call outstanding, as often as
  // rpc::kMinPingInterval.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      static_cast<int>(absl::ToInt64Milliseconds(rpc::kMinPingInterval)));
  // No bandwidth-delay probes (a ping each, on every connection that receives data): they size
  // flow-control windows for large transfers, and the control plane's messages are small. With a
  // connection per consumer they cost the dispatcher a quarter of its CPU (benchmarks.md, "A
  // connection per consumer").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  grpc::ResourceQuota quota("croupier-dispatcher");
  quota.Resize(options.grpc_memory_bytes);
  builder.SetResourceQuota(quota);
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || node->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("the dispatcher cannot serve on ", listen));
  }
  node->listener_->Start();
  DispatcherNode* raw = node.get();
  if (options.metrics_port >= 0) {
    std::vector<HttpRoute> routes = {
        {"/metrics", kPrometheusContentType,
         [raw] {
           auto status = raw->impl_->GetStatus(v1::StatusRequest());
           // What it asked of object stores: the listings, the objects it indexed and the
           // indexes it read and stored as it created jobs.
           return status.ok() ? metrics::FormatPrometheus(*status) +
                                    metrics::FormatS3Prometheus(s3::ProcessS3Counters().Snapshot())
                              : std::string();
         }},
        {"/", "text/html; charset=utf-8", [] { return std::string(web::kIndexHtml); }},
        {"/api/status", "application/json",
         [raw] { return StatusJson(raw->impl_->GetStatus(v1::StatusRequest())); }},
        {"/api/history", "application/json", [raw] { return raw->history_.ToJson(); }},
        {"/api/scale", "application/json", nullptr,
         [raw](const HttpQuery& query) {
           return ScaleJson(raw->impl_->GetStatus(v1::StatusRequest()), query);
         }},
    };
    ASSIGN_OR_RETURN(node->metrics_, MetricsServer::Start(options.bind_address,
                                                          options.metrics_port, std::move(routes)));
  }
  node->ticker_ = std::thread([raw] {
    while (!raw->stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      raw->impl_->Tick();
      auto status = raw->impl_->GetStatus(v1::StatusRequest());
      if (status.ok()) raw->history_.Add(absl::Now(), *status);
    }
  });
  Log(LogLevel::kInfo, "dispatcher",
      absl::StrCat("listening on ", node->address(), ", work directory ", options.work_dir,
                   options.auth_token.empty() ? "" : ", auth token required",
                   !options.tls.enabled()       ? ""
                   : options.tls.ca_file.empty() ? ", TLS"
                                                 : ", mutual TLS",
                   node->metrics_ ? absl::StrCat(", web page on http://", options.bind_address, ":",
                                                 node->metrics_port(), "/, metrics at /metrics")
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
    // Held producer heartbeats are answered first: the server's shutdown waits for its calls.
    impl_->StopWaiting();
    // No connection is handed to a server that is shutting down (gRPC would leak it).
    if (listener_) listener_->Stop();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      server_->Wait();
    }
    Log(LogLevel::kInfo, "dispatcher", absl::StrCat("stopped (", address(), ")"));
  });
}

DispatcherNode::~DispatcherNode() { Shutdown(); }

}  // namespace croupier
