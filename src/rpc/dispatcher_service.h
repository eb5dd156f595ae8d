// The gRPC face of the dispatcher: a thin adapter that checks each call's protocol version and
// token, hands the request to DispatcherImpl and converts the status. No logic lives here.
#ifndef CROUPIER_SRC_RPC_DISPATCHER_SERVICE_H_
#define CROUPIER_SRC_RPC_DISPATCHER_SERVICE_H_

#include <string>

#include "proto/croupier.grpc.pb.h"
#include "src/dispatcher/dispatcher_impl.h"

namespace croupier::rpc {

// Thread-safe, as DispatcherImpl is.
class DispatcherService final : public v1::Dispatcher::Service {
 public:
  DispatcherService(DispatcherImpl* impl, std::string auth_token)
      : impl_(impl), auth_token_(std::move(auth_token)) {}

  grpc::Status CreateJob(grpc::ServerContext* context, const v1::CreateJobRequest* request,
                         v1::CreateJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ProducerHeartbeat(grpc::ServerContext* context,
                                 const v1::ProducerHeartbeatRequest* request,
                                 v1::ProducerHeartbeatResponse* response) override;
  grpc::Status ConsumerHeartbeat(grpc::ServerContext* context,
                                 const v1::ConsumerHeartbeatRequest* request,
                                 v1::ConsumerHeartbeatResponse* response) override;
  grpc::Status Locate(grpc::ServerContext* context, const v1::LocateRequest* request,
                      v1::LocateResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::StatusRequest* request,
                         v1::StatusResponse* response) override;

 private:
  template <typename Request, typename Response, typename Method>
  grpc::Status Handle(const char* name, grpc::ServerContext* context, const Request& request,
                      Response* response, Method method);

  DispatcherImpl* const impl_;
  const std::string auth_token_;
};

}  // namespace croupier::rpc

#endif  // CROUPIER_SRC_RPC_DISPATCHER_SERVICE_H_
