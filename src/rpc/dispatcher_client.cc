#include "src/rpc/dispatcher_client.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/retry.h"
#include "src/control/call_deadline.h"
#include "src/net/tls_probe.h"
#include "src/rpc/grpc_util.h"

namespace croupier::rpc {

std::unique_ptr<DispatcherClient> DispatcherClient::Create(const std::string& address,
                                                           DispatcherClientOptions options) {
  return std::unique_ptr<DispatcherClient>(new DispatcherClient(address, std::move(options)));
}

grpc::ChannelArguments DispatcherClient::ChannelArgs(const DispatcherClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
  args.SetMaxSendMessageSize(kMaxControlMessageBytes);
  // Reconnect quickly after a dispatcher restart instead of gRPC's default of up to 2 minutes.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // And bound each connection attempt (gRPC's default is 20 s): an attempt made while the
  // dispatcher was down was seen to hang for seconds after it came back. The dispatcher's
  // handshake timeout is the same (kConnectTimeout, grpc_util.h), so that it holds no connection
  // its client has given up.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kConnectTimeout)));
  // No bandwidth-delay probes: they size HTTP/2 flow-control windows for large transfers, and a
  // control-plane message is small, so each probe is only a ping the dispatcher must answer
  // (benchmarks.md, "A connection per consumer").
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // A connection that stays open but answers nothing is given up and made again (grpc_util.h,
  // kKeepaliveTime), also between calls, and as often as it takes.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

DispatcherClient::DispatcherClient(std::string address, DispatcherClientOptions options)
    : address_(std::move(address)), options_([&options] {
        options.tls = ResolveTlsConfig(options.tls);
        return std::move(options);
      }()) {
  grpc::ChannelArguments args = ChannelArgs(options_);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options_.tls);
  if (!credentials.ok()) {
    setup_error_ =
        absl::Status(credentials.status().code(),
                     absl::StrCat("dispatcher ", address_, ": ", credentials.status().message()));
    return;
  }
  stub_ = v1::Dispatcher::NewStub(grpc::CreateCustomChannel(address_, *credentials, args));
}

std::string DispatcherClient::ConnectionHint(const absl::Status& status) const {
  if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return "";
  // Nothing listens there (or a firewall rejects): TLS is not the cause, the address is.
  if (absl::StrContains(status.message(), "Connection refused")) {
    return absl::StrCat(" (nothing accepts connections at ", address_,
                        ": is the dispatcher running, and is this its address and port?)");
  }
  // gRPC says "Socket closed" or "Connection reset" when the two sides disagree on TLS.
  if (options_.tls.enabled()) {
    return " (this client uses TLS: is the dispatcher started with --tls-cert, and does its "
           "certificate name this address and chain to --tls-ca?)";
  }
  return " (this client does not use TLS: if the dispatcher does, give --tls-ca or "
         "CROUPIER_TLS_CA)";
}

bool DispatcherClient::ProbeDue(const grpc::Status& failure) {
  // Nothing listens there: a probe would be refused too, and learn nothing.
  if (failure.error_message().find("Connection refused") != std::string::npos) return false;
  if (answered_once_.load()) return false;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now < next_probe_) return false;
  next_probe_ = now + kProbeEvery;
  ++probes_;
  return true;
}

uint64_t DispatcherClient::probes() const {
  absl::MutexLock lock(&mu_);
  return probes_;
}

namespace {

// gRPC's own UNAVAILABLE (no connection), not one the dispatcher answered with (e.g. a journal it
// cannot write).
bool IsConnectionFailure(const grpc::Status& status) {
  const std::string& m = status.error_message();
  return m.find("failed to connect") != std::string::npos ||
         m.find("Socket closed") != std::string::npos || m.find("andshake") != std::string::npos ||
         m.find("Connection reset") != std::string::npos;
}

}  // namespace

template <typename Response, typename Request, typename Method>
absl::StatusOr<Response> DispatcherClient::Call(const char* name, const Request& request,
                                                Method method, bool retry) {
  if (!setup_error_.ok()) return setup_error_;
  Response response;
  const std::string what = absl::StrCat("dispatcher ", address_, ": ", name);
  bool probed = false;
  // The dispatcher answered (UNAVAILABLE: e.g. its journal cannot be written), as opposed to
  // no connection: the waiting message says which.
  bool answered = false;
  // The caller's own deadline, if it comes first (call_deadline.h).
  const absl::Time deadline = std::min(absl::Now() + options_.timeout, CallDeadline::Current());
  absl::Status status = RetryWithBackoff(
      what, deadline,
      [&](int) {
        const absl::Duration left = deadline - absl::Now();
        auto context = MakeClientContext(
            std::clamp(left, absl::Milliseconds(50), options_.call_timeout), options_.auth_token);
        {
          absl::MutexLock lock(&mu_);
          if (cancelled_) {
            return absl::CancelledError(absl::StrCat(what, ": the client is cancelled"));
          }
          calls_.insert(context.get());
        }
        response.Clear();
        grpc::Status s = ((*stub_).*method)(context.get(), request, &response);
        {
          absl::MutexLock lock(&mu_);
          calls_.erase(context.get());
        }
        absl::Status result = FromGrpcStatus(s, what);
        answered = absl::IsUnavailable(result) && !IsConnectionFailure(s);
        if (!IsConnectionFailure(s)) {
          // Connected: the two sides agree on TLS, and no probe is needed from now on.
          if (!absl::IsDeadlineExceeded(result) && !absl::IsCancelled(result)) {
            answered_once_.store(true);
          }
        } else if (absl::IsUnavailable(result) && !probed && ProbeDue(s)) {
          // gRPC says only "failed to connect" when the two sides disagree on TLS or a
          // certificate is refused: find the cause with a handshake of our own, and stop retrying
          // if it is one that retrying cannot fix. Within the call's own deadline, and not
          // every attempt of every call: after a restart each probe is one more connection for
          // the dispatcher to accept (ProbeDue).
          absl::Status cause = net::ProbeTls(
              address_, options_.tls, absl::StrCat("dispatcher ", address_),
              std::clamp(deadline - absl::Now(), absl::Milliseconds(50),
                         std::min(options_.call_timeout, absl::Seconds(5))));
          if (!absl::IsUnavailable(cause)) probed = true;  // the server answered: conclusive
          if (!cause.ok() && !absl::IsUnavailable(cause)) {
            return absl::Status(cause.code(), absl::StrCat(what, ": ", cause.message()));
          }
        }
        return result;
      },
      RetryOptions{.retryable = [retry](const absl::Status& s) {
                     return retry && absl::IsUnavailable(s);
                   },
                   // Every process that waits for the dispatcher says so within seconds, with
                   // the address and why, not only at its deadline.
                   .still_waiting = [&](absl::Duration waited, const absl::Status& last) {
                     Log(LogLevel::kWarning, "client",
                         absl::StrCat(what,
                                      answered ? ": the dispatcher has refused for "
                                               : ": no answer for ",
                                      absl::FormatDuration(absl::Trunc(waited, absl::Seconds(1))),
                                      " (", last.message(), "); trying until ",
                                      absl::FormatDuration(deadline - (absl::Now() - waited)),
                                      " have passed"));
                   }});
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(status.message(), ConnectionHint(status)));
  }
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
  // One attempt for a heartbeat that waits for work (see the header).
  return Call<v1::ProducerHeartbeatResponse>("ProducerHeartbeat", r,
                                             &v1::Dispatcher::Stub::ProducerHeartbeat,
                                             /*retry=*/r.wait_for_work_ms() == 0);
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
absl::StatusOr<v1::DeleteJobResponse> DispatcherClient::DeleteJob(const v1::DeleteJobRequest& r) {
  return Call<v1::DeleteJobResponse>("DeleteJob", r, &v1::Dispatcher::Stub::DeleteJob);
}

void DispatcherClient::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* call : calls_) call->TryCancel();
}

}  // namespace croupier::rpc
