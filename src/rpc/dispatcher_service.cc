#include "src/rpc/dispatcher_service.h"

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/control/call_deadline.h"
#include "src/control/caller_presence.h"
#include "src/rpc/grpc_util.h"

namespace croupier::rpc {
namespace {

// The client's deadline for a call (InfiniteFuture when it set none).
absl::Time CallDeadlineOf(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace

grpc::Status DispatcherService::Check(const char* name, const grpc::ServerContextBase& context) {
  absl::Status check = CheckCallMetadata(context, auth_token_);
  if (!check.ok()) {
    Log(LogLevel::kWarning, "dispatcher",
        absl::StrCat("refused ", name, " from ", context.peer(), ": ", check.message()));
  }
  return ToGrpcStatus(check);
}

template <typename Response>
grpc::Status DispatcherService::Answer(const char* name, const std::string& peer,
                                       absl::StatusOr<Response> result, Response* response) {
  if (!result.ok()) {
    Log(absl::IsInternal(result.status()) ? LogLevel::kError : LogLevel::kDebug, "dispatcher",
        absl::StrCat(name, " from ", peer, ": ", result.status().ToString()));
    return ToGrpcStatus(result.status());
  }
  *response = *std::move(result);
  return grpc::Status::OK;
}

template <typename Request, typename Response, typename Method>
grpc::Status DispatcherService::Handle(const char* name, const grpc::ServerContextBase& context,
                                       const Request& request, Response* response, Method method) {
  grpc::Status check = Check(name, context);
  if (!check.ok()) return check;
  // Bounds the call's wait for the dispatcher's journal (DispatcherImpl: no answer before what it
  // saw is durable) by the client's deadline.
  const CallDeadline bounded(CallDeadlineOf(context));
  return Answer(name, context.peer(), (impl_->*method)(request), response);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* DispatcherService::React(
    const char* name, grpc::CallbackServerContext* context, const Request& request,
    Response* response,
    void (DispatcherImpl::*method)(const Request&, DispatcherImpl::Done<Response>)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status check = Check(name, *context);
  if (!check.ok()) {
    reactor->Finish(check);
    return reactor;
  }
  // Bounds the call's wait for the journal (and for work) by the client's deadline, and lets a
  // call held for work see that its client has gone.
  const CallDeadline bounded(CallDeadlineOf(*context));
  const CallerPresence presence([context] { return context->IsCancelled(); });
  // The context lives until the reactor's Finish is done with: its peer is read only for an
  // error's log line.
  (impl_->*method)(request, [this, name, context, reactor,
                             response](absl::StatusOr<Response> result) {
    reactor->Finish(Answer(name, result.ok() ? std::string() : context->peer(),
                           std::move(result), response));
  });
  return reactor;
}

grpc::Status DispatcherService::CreateJob(grpc::ServerContext* c, const v1::CreateJobRequest* q,
                                          v1::CreateJobResponse* r) {
  return Handle("CreateJob", *c, *q, r, &DispatcherImpl::CreateJob);
}
grpc::ServerUnaryReactor* DispatcherService::GetJob(grpc::CallbackServerContext* c,
                                                    const v1::GetJobRequest* q,
                                                    v1::GetJobResponse* r) {
  return React("GetJob", c, *q, r, &DispatcherImpl::GetJob);
}
grpc::ServerUnaryReactor* DispatcherService::ProducerHeartbeat(
    grpc::CallbackServerContext* c, const v1::ProducerHeartbeatRequest* q,
    v1::ProducerHeartbeatResponse* r) {
  return React("ProducerHeartbeat", c, *q, r, &DispatcherImpl::ProducerHeartbeatOrWait);
}
grpc::ServerUnaryReactor* DispatcherService::ConsumerHeartbeat(
    grpc::CallbackServerContext* c, const v1::ConsumerHeartbeatRequest* q,
    v1::ConsumerHeartbeatResponse* r) {
  return React("ConsumerHeartbeat", c, *q, r, &DispatcherImpl::ConsumerHeartbeat);
}
grpc::ServerUnaryReactor* DispatcherService::Locate(grpc::CallbackServerContext* c,
                                                    const v1::LocateRequest* q,
                                                    v1::LocateResponse* r) {
  return React("Locate", c, *q, r, &DispatcherImpl::Locate);
}
grpc::ServerUnaryReactor* DispatcherService::GetStatus(grpc::CallbackServerContext* c,
                                                       const v1::StatusRequest* q,
                                                       v1::StatusResponse* r) {
  return React("GetStatus", c, *q, r, &DispatcherImpl::GetStatus);
}
grpc::ServerUnaryReactor* DispatcherService::DeleteJob(grpc::CallbackServerContext* c,
                                                       const v1::DeleteJobRequest* q,
                                                       v1::DeleteJobResponse* r) {
  return React("DeleteJob", c, *q, r, &DispatcherImpl::DeleteJob);
}

}  // namespace croupier::rpc
