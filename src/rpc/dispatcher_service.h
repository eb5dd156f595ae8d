// The gRPC face of the dispatcher: a thin adapter that checks each call's protocol version and
// token, hands the request to DispatcherImpl and converts the status. No logic lives here.
//
// Every method but CreateJob uses gRPC's callback API and is answered when DispatcherImpl calls
// back: once the journal is durable (from the journal's answering thread: no gRPC thread waits
// for an fdatasync or a commit interval), or later for a heartbeat held for work
// (DispatcherImpl::ProducerHeartbeatOrWait). The answer is handed to gRPC without a
// thread waiting for the client to read it, so that clients that never read (a slow-reader flood)
// cannot hold the server's threads. CreateJob stays synchronous because it may index files for a
// long time, which must not happen on gRPC's callback threads; only an authenticated client can
// hold its thread, since an error answer carries no flow-controlled data.
#ifndef CROUPIER_SRC_RPC_DISPATCHER_SERVICE_H_
#define CROUPIER_SRC_RPC_DISPATCHER_SERVICE_H_

#include <string>

#include "proto/croupier.grpc.pb.h"
#include "src/dispatcher/dispatcher_impl.h"

namespace croupier::rpc {

using DispatcherServiceBase =
    v1::Dispatcher::WithCallbackMethod_GetJob<v1::Dispatcher::WithCallbackMethod_ProducerHeartbeat<
        v1::Dispatcher::WithCallbackMethod_ConsumerHeartbeat<
            v1::Dispatcher::WithCallbackMethod_Locate<
                v1::Dispatcher::WithCallbackMethod_GetStatus<
                    v1::Dispatcher::WithCallbackMethod_DeleteJob<v1::Dispatcher::Service>>>>>>;

// Thread-safe, as DispatcherImpl is.
class DispatcherService final : public DispatcherServiceBase {
 public:
  DispatcherService(DispatcherImpl* impl, std::string auth_token)
      : impl_(impl), auth_token_(std::move(auth_token)) {}

  grpc::Status CreateJob(grpc::ServerContext* context, const v1::CreateJobRequest* request,
                         v1::CreateJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request,
                                   v1::GetJobResponse* response) override;
  grpc::ServerUnaryReactor* ProducerHeartbeat(grpc::CallbackServerContext* context,
                                              const v1::ProducerHeartbeatRequest* request,
                                              v1::ProducerHeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* ConsumerHeartbeat(grpc::CallbackServerContext* context,
                                              const v1::ConsumerHeartbeatRequest* request,
                                              v1::ConsumerHeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Locate(grpc::CallbackServerContext* context,
                                   const v1::LocateRequest* request,
                                   v1::LocateResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const v1::DeleteJobRequest* request,
                                      v1::DeleteJobResponse* response) override;

 private:
  // The call's protocol version and token (logged when refused).
  grpc::Status Check(const char* name, const grpc::ServerContextBase& context);
  // `result` into `response`, or its error (logged) as the call's status.
  template <typename Response>
  grpc::Status Answer(const char* name, const std::string& peer, absl::StatusOr<Response> result,
                      Response* response);
  // Check, then the method's result through Answer.
  template <typename Request, typename Response, typename Method>
  grpc::Status Handle(const char* name, const grpc::ServerContextBase& context,
                      const Request& request, Response* response, Method method);
  // Check, then the method, answered through the context's default reactor when the method
  // calls back: no gRPC thread waits for the dispatcher's journal (DispatcherImpl's Done forms).
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* React(
      const char* name, grpc::CallbackServerContext* context, const Request& request,
      Response* response,
      void (DispatcherImpl::*method)(const Request&, DispatcherImpl::Done<Response>));

  DispatcherImpl* const impl_;
  const std::string auth_token_;
};

}  // namespace croupier::rpc

#endif  // CROUPIER_SRC_RPC_DISPATCHER_SERVICE_H_
