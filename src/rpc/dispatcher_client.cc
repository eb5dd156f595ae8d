#include "src/rpc/dispatcher_client.h"

#include "absl/strings/str_cat.h"
#include "src/common/retry.h"
#include "src/rpc/grpc_util.h"

namespace croupier::rpc {

std::unique_ptr<DispatcherClient> DispatcherClient::Create(const std::string& address,
                                                           DispatcherClientOptions options) {
  return std::unique_ptr<DispatcherClient>(new DispatcherClient(address, std::move(options)));
}

DispatcherClient::DispatcherClient(std::string address, DispatcherClientOptions options)
    : address_(std::move(address)), options_(std::move(options)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
  args.SetMaxSendMessageSize(kMaxControlMessageBytes);
  // Reconnect quickly after a dispatcher restart instead of gRPC's default of up to 2 minutes.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // And bound each connection attempt (gRPC's minimum is 20 s): an attempt made while the
  // dispatcher was down was seen to hang for seconds after it came back.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  stub_ = v1::Dispatcher::NewStub(
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
}

template <typename Response, typename Request, typename Method>
absl::StatusOr<Response> DispatcherClient::Call(const char* name, const Request& request,
                                                Method method) {
  Response response;
  const std::string what = absl::StrCat("dispatcher ", address_, ": ", name);
  absl::Status status = RetryWithBackoff(
      what, absl::Now() + options_.timeout,
      [&](int) {
        auto context = MakeClientContext(options_.call_timeout, options_.auth_token);
        response.Clear();
        grpc::Status s = ((*stub_).*method)(context.get(), request, &response);
        return FromGrpcStatus(s, what);
      },
      RetryOptions{.retryable = [](const absl::Status& s) { return absl::IsUnavailable(s); }});
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::CreateJobResponse> DispatcherClient::CreateJob(const v1::CreateJobRequest& r) {
  return Call<v1::CreateJobResponse>("CreateJob", r, &v1::Dispatcher::Stub::CreateJob);
}
absl::StatusOr<v1::GetJobResponse> DispatcherClient::GetJob(const v1::GetJobRequest& r) {
  return Call<v1::GetJobResponse>("GetJob", r, &v1::Dispatcher::Stub::GetJob);
}
absl::StatusOr<v1::ProducerHeartbeatResponse> DispatcherClient::ProducerHeartbeat(
    const v1::ProducerHeartbeatRequest& r) {
  return Call<v1::ProducerHeartbeatResponse>("ProducerHeartbeat", r,
                                             &v1::Dispatcher::Stub::ProducerHeartbeat);
}
absl::StatusOr<v1::ConsumerHeartbeatResponse> DispatcherClient::ConsumerHeartbeat(
    const v1::ConsumerHeartbeatRequest& r) {
  return Call<v1::ConsumerHeartbeatResponse>("ConsumerHeartbeat", r,
                                             &v1::Dispatcher::Stub::ConsumerHeartbeat);
}
absl::StatusOr<v1::LocateResponse> DispatcherClient::Locate(const v1::LocateRequest& r) {
  return Call<v1::LocateResponse>("Locate", r, &v1::Dispatcher::Stub::Locate);
}
absl::StatusOr<v1::StatusResponse> DispatcherClient::GetStatus(const v1::StatusRequest& r) {
  return Call<v1::StatusResponse>("GetStatus", r, &v1::Dispatcher::Stub::GetStatus);
}

}  // namespace croupier::rpc
