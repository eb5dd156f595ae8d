#include "src/s3/s3_client.h"

#include <httplib.h>

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/retry.h"
#include "src/common/status_macros.h"
#include "src/s3/fetch_pool.h"
#include "src/s3/s3_connections.h"
#include "src/s3/s3_error.h"
#include "src/s3/sigv4.h"
#include "src/s3/xml_scan.h"

namespace croupier::s3 {
namespace {

// An error document or one page of a listing (1,000 keys) is far below this; more is not S3.
constexpr size_t kMaxBodyBytes = 64 << 20;

int64_t ParseHttpDate(absl::string_view text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", text, absl::UTCTimeZone(), &t, &err)) return 0;
  return absl::ToUnixNanos(t);
}

int64_t ParseIsoDate(absl::string_view text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return 0;
  // Whole seconds, as HEAD's Last-Modified (an HTTP date) gives it: a listing may add
  // milliseconds, and the two must compare equal for the same object.
  return absl::ToUnixSeconds(t) * 1'000'000'000;
}

// What a failed exchange means, in words (cpp-httplib's names are one word each).
std::string DescribeFailure(httplib::Error err) {
  switch (err) {
    case httplib::Error::Connection:
      return "could not connect";
    case httplib::Error::ConnectionTimeout:
      return "timed out connecting";
    case httplib::Error::Read:
      return "connection reset, closed or stalled while reading the answer";
    case httplib::Error::Write:
      return "connection failed while sending the request";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate was not trusted";
    default:
      return httplib::to_string(err);
  }
}

}  // namespace

// One call, and what came back of its last attempt.
struct S3Client::Request {
  std::string method;  // "GET", "HEAD" or "PUT"
  S3Path path;         // key ignored for a listing
  bool listing = false;
  std::vector<std::pair<std::string, std::string>> query;
  std::optional<ByteRange> range;
  bool whole = false;          // a GET of the whole object into `body`
  char* dst = nullptr;         // where a ranged GET's bytes go
  std::string what;            // "s3://b/k bytes [0, 10)", for messages
  absl::string_view put_body;  // what a PUT sends
  std::string if_match;        // an ETag the object must still have (If-Match), or empty

  // The answer.
  int status = 0;
  std::string body;  // error document or listing
  uint64_t received = 0;
  bool overflow = false;
  bool throttled = false;
  std::string content_range, content_length, last_modified, etag;

  void ResetAnswer() {
    status = 0;
    body.clear();
    received = 0;
    overflow = throttled = false;
    content_range.clear();
    content_length.clear();
    last_modified.clear();
    etag.clear();
  }
};

absl::StatusOr<std::unique_ptr<S3Client>> S3Client::Create(S3Options options) {
  if (options.endpoint.empty()) {
    options.endpoint = absl::StrCat("https://s3.", options.region, ".amazonaws.com");
  }
  ASSIGN_OR_RETURN(Endpoint endpoint, ParseEndpoint(options.endpoint));
  if (options.max_attempts < 1) options.max_attempts = 1;
  auto connections = std::make_unique<S3Connections>(options, std::move(endpoint));
  return std::unique_ptr<S3Client>(new S3Client(std::move(options), std::move(connections)));
}

S3Client::S3Client(S3Options options, std::unique_ptr<S3Connections> connections)
    : options_(std::move(options)),
      connections_(std::move(connections)),
      pool_(std::make_unique<FetchPool>(options_.max_in_flight)) {}

S3Client::~S3Client() = default;

absl::Status S3Client::Attempt(Request& req) {
  counters_.AddRequest();
  const Endpoint& endpoint = connections_->endpoint();
  const std::string host_name =
      options_.path_style ? endpoint.host : absl::StrCat(req.path.bucket, ".", endpoint.host);
  std::string uri = options_.path_style ? absl::StrCat("/", UriEncode(req.path.bucket, false)) : "";
  if (!req.listing) absl::StrAppend(&uri, "/", UriEncode(req.path.key, true));
  if (uri.empty()) uri = "/";

  SigningInput in;
  in.method = req.method;
  in.canonical_uri = uri;
  in.query = req.query;
  in.region = options_.region;
  in.access_key_id = options_.credentials.access_key_id;
  in.secret_access_key = options_.credentials.secret_access_key;
  in.headers["host"] = endpoint.HostHeader(host_name);
  in.headers["x-amz-date"] = AmzDate(absl::Now());
  if (req.method == "PUT") in.payload_sha256 = Sha256Hex(req.put_body);
  in.headers["x-amz-content-sha256"] = in.payload_sha256;
  if (!options_.credentials.session_token.empty()) {
    in.headers["x-amz-security-token"] = options_.credentials.session_token;
  }
  if (req.range) {
    ASSIGN_OR_RETURN(in.headers["range"], RangeHeader(*req.range));
  }
  if (!req.if_match.empty()) in.headers["if-match"] = req.if_match;
  httplib::Headers headers(in.headers.begin(), in.headers.end());
  headers.emplace("Authorization", AuthorizationHeader(in));
  headers.emplace("Accept-Encoding", "identity");
  std::string target = uri;
  if (!req.query.empty()) absl::StrAppend(&target, "?", CanonicalQuery(req.query));

  std::unique_ptr<httplib::Client> client = connections_->Take(host_name);
  auto on_answer = [&](const httplib::Response& r) {
    req.status = r.status;
    return true;
  };
  auto on_bytes = [&](const char* data, size_t n) {
    if (req.dst != nullptr && req.status >= 200 && req.status < 300) {
      if (req.received + n > req.range->length) {
        req.overflow = true;
        return false;
      }
      std::memcpy(req.dst + req.received, data, n);
    } else {
      if (req.body.size() + n > kMaxBodyBytes) {
        req.overflow = true;
        return false;
      }
      req.body.append(data, n);
    }
    req.received += n;
    return true;
  };
  httplib::Result result = req.method == "HEAD" ? client->Head(target.c_str(), headers)
                           : req.method == "PUT"
                               ? client->Put(target.c_str(), headers, req.put_body.data(),
                                             req.put_body.size(), "application/octet-stream")
                               : client->Get(target.c_str(), headers, on_answer, on_bytes);
  const std::string where = absl::StrCat(endpoint.scheme, "://", endpoint.HostHeader(host_name));
  if (!result) {
    const httplib::Error err = result.error();
    if (req.overflow && req.whole) {
      return absl::ResourceExhaustedError(absl::StrCat(
          req.what, ": the object is larger than the ", kMaxBodyBytes >> 20,
          " MiB a whole read takes"));
    }
    if (req.overflow) {
      return absl::DataLossError(
          absl::StrCat(req.what, ": the store answered more bytes than asked"));
    }
    const bool retryable =
        err != httplib::Error::SSLServerVerification && err != httplib::Error::SSLLoadingCerts;
    return TransportToStatus(
        absl::StrCat(DescribeFailure(err),
                     req.received > 0 ? absl::StrCat(" after ", req.received, " bytes") : ""),
        retryable, where, req.what);
  }
  connections_->GiveBack(host_name, std::move(client));
  const httplib::Response& res = result.value();
  req.status = res.status;
  req.content_range = res.get_header_value("Content-Range");
  req.content_length = res.get_header_value("Content-Length");
  req.last_modified = res.get_header_value("Last-Modified");
  req.etag = res.get_header_value("ETag");
  if (req.method == "PUT") req.body = res.body.substr(0, kMaxBodyBytes);
  if (res.status < 200 || res.status >= 300) {
    req.throttled = IsThrottle(res.status, req.body);
    return AnswerToStatus(res.status, req.body, req.what);
  }
  // A whole read must hold every byte the answer announced. An answer without a length (chunked)
  // ended with its last chunk, or the read above failed.
  uint64_t announced = 0;
  if (req.whole && absl::SimpleAtoi(req.content_length, &announced) &&
      announced != req.received) {
    return absl::UnavailableError(absl::StrCat(req.what, ": the answer was cut short after ",
                                               req.received, " bytes of ", announced,
                                               " (endpoint ", where, ")"));
  }
  if (req.range) {
    if (res.status == 206) {
      absl::StatusOr<ContentRange> got = ParseContentRange(req.content_range);
      if (!got.ok() || got->range.offset != req.range->offset) {
        return absl::DataLossError(
            absl::StrCat(req.what, ": the store answered Content-Range '", req.content_range, "'"));
      }
    } else if (req.range->offset != 0) {
      return absl::DataLossError(
          absl::StrCat(req.what, ": the store ignored the Range header (HTTP ", res.status, ")"));
    }
    if (req.received < req.range->length) {
      return absl::UnavailableError(absl::StrCat(req.what, ": the answer was cut short after ",
                                                 req.received, " bytes (endpoint ", where, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status S3Client::Send(Request& req) {
  int attempts = 0;
  RetryOptions retry;
  retry.initial_backoff = options_.initial_backoff;
  retry.max_backoff = options_.max_backoff;
  retry.retryable = [&](const absl::Status& s) {
    return absl::IsUnavailable(s) && attempts < options_.max_attempts;
  };
  absl::Status status = RetryWithBackoff(
      absl::StrCat(req.method, " ", req.what), absl::Now() + options_.request_deadline,
      [&](int attempt) {
        attempts = attempt + 1;
        req.ResetAnswer();
        absl::Status s = Attempt(req);
        if (absl::IsUnavailable(s) && attempts < options_.max_attempts) {
          counters_.AddRetry(req.throttled);
          Log(LogLevel::kWarning, "s3",
              absl::StrCat("retrying ", req.method, " ", s.message(), " (attempt ", attempts,
                           " of ", options_.max_attempts, ")"));
        }
        return s;
      },
      retry);
  if (!status.ok()) {
    // A NOT_FOUND is the store's answer, not its failure: an index looked for before anyone
    // stored it is one, as a matter of course.
    if (!absl::IsNotFound(status)) counters_.AddFailure();
    if (absl::IsUnavailable(status) && attempts > 1) {
      return absl::UnavailableError(
          absl::StrCat(status.message(), " (gave up after ", attempts, " attempts)"));
    }
  }
  return status;
}

absl::StatusOr<ObjectInfo> S3Client::Head(const S3Path& path) {
  Request req;
  req.method = "HEAD";
  req.path = path;
  req.what = path.ToString();
  RETURN_IF_ERROR(Send(req));
  ObjectInfo info;
  info.key = path.key;
  if (!absl::SimpleAtoi(req.content_length, &info.size)) {
    return absl::DataLossError(absl::StrCat(req.what, ": HEAD answered no Content-Length"));
  }
  info.mtime_ns = ParseHttpDate(req.last_modified);
  info.etag = req.etag;
  return info;
}

absl::StatusOr<size_t> S3Client::GetRange(const S3Path& path, const ByteRange& range, char* dst,
                                          absl::string_view if_match) {
  if (range.length == 0) return 0;
  Request req;
  req.method = "GET";
  req.path = path;
  req.range = range;
  req.if_match = std::string(if_match);
  req.dst = dst;
  req.what = absl::StrCat(path.ToString(), " ", range.ToString());
  RETURN_IF_ERROR(Send(req));
  counters_.AddBytes(req.received);
  return static_cast<size_t>(req.received);
}

absl::StatusOr<std::string> S3Client::Get(const S3Path& path) {
  Request req;
  req.method = "GET";
  req.path = path;
  req.whole = true;
  req.what = absl::StrCat(path.ToString(), " (whole)");
  RETURN_IF_ERROR(Send(req));
  counters_.AddBytes(req.received);
  return std::move(req.body);
}

absl::Status S3Client::Put(const S3Path& path, absl::string_view body) {
  Request req;
  req.method = "PUT";
  req.path = path;
  req.put_body = body;
  req.what = absl::StrCat(path.ToString(), " (", body.size(), " bytes written)");
  return Send(req);
}

absl::StatusOr<std::vector<ObjectInfo>> S3Client::List(const std::string& bucket,
                                                       const std::string& prefix) {
  std::vector<ObjectInfo> out;
  std::string token;
  while (true) {
    Request req;
    req.method = "GET";
    req.path = {bucket, prefix};
    req.listing = true;
    req.query = {{"list-type", "2"}, {"prefix", prefix}};
    if (!token.empty()) req.query.emplace_back("continuation-token", token);
    req.what = absl::StrCat("listing s3://", bucket, "/", prefix, "*");
    RETURN_IF_ERROR(Send(req));
    for (absl::string_view entry : XmlElements(req.body, "Contents")) {
      ObjectInfo info;
      info.key = XmlText(entry, "Key").value_or("");
      if (!absl::SimpleAtoi(XmlText(entry, "Size").value_or(""), &info.size)) {
        return absl::DataLossError(
            absl::StrCat(req.what, ": an entry without a size (key '", info.key, "')"));
      }
      info.mtime_ns = ParseIsoDate(XmlText(entry, "LastModified").value_or(""));
      info.etag = XmlText(entry, "ETag").value_or("");
      out.push_back(std::move(info));
    }
    if (XmlText(req.body, "IsTruncated").value_or("false") != "true") break;
    std::optional<std::string> next = XmlText(req.body, "NextContinuationToken");
    if (!next || next->empty()) {
      return absl::DataLossError(
          absl::StrCat(req.what, ": a truncated listing without a continuation token"));
    }
    token = *std::move(next);
  }
  return out;
}

}  // namespace croupier::s3
