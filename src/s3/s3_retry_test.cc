// The client's retry policy against a small in-process HTTP server that answers as a store
// under trouble would: throttling, answers cut short, refusals, listings in pages.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "croupier/record_index.h"
#include "croupier/tfrecord.h"
#include "src/s3/s3_client.h"
#include "src/s3/s3_env.h"

namespace croupier::s3 {
namespace {

constexpr char kObject[] = "0123456789abcdefghij";

class FakeStore {
 public:
  FakeStore() {
    server_.Get("/.*", [this](const httplib::Request& req, httplib::Response& res) {
      requests_++;
      // cpp-httplib's server would cut every answer to the Range asked for by itself; a store
      // does that in its handler, as these do, so the server is told there was no Range.
      const_cast<httplib::Request&>(req).ranges.clear();
      if (!absl::StartsWith(req.get_header_value("Authorization"), "AWS4-HMAC-SHA256 ")) {
        signed_ = false;
      }
      if (handler_) handler_(req, res, requests_.load());
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost, and the join below would wait forever.
    while (!server_.is_running()) absl::SleepFor(absl::Milliseconds(1));
  }
  ~FakeStore() {
    server_.stop();
    thread_.join();
  }

  S3Options Options() const {
    S3Options o;
    o.endpoint = "http://127.0.0.1:" + std::to_string(port_);
    o.credentials = {"AKTEST", "secret", "", "test"};
    o.max_attempts = 3;
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(5);
    o.read_timeout = absl::Seconds(2);
    return o;
  }

  std::function<void(const httplib::Request&, httplib::Response&, int n)> handler_;
  std::atomic<int> requests_{0};
  std::atomic<bool> signed_{true};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// Answers a ranged GET of `object` with at most `give` of the bytes asked for.
void ServeRange(const httplib::Request& req, httplib::Response& res, size_t give,
                absl::string_view object = kObject) {
  // "bytes=A-B"
  const std::string range = req.get_header_value("Range");
  const size_t dash = range.find('-');
  const size_t first = std::stoul(range.substr(6, dash - 6));
  const size_t last = std::stoul(range.substr(dash + 1));
  res.status = 206;
  res.set_header("Content-Range", absl::StrCat("bytes ", first, "-", last, "/", object.size()));
  res.set_content(std::string(object.substr(first, std::min(give, last - first + 1))),
                  "application/octet-stream");
}

void SlowDown(httplib::Response& res) {
  res.status = 503;
  res.set_content(
      "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
      "</Error>",
      "application/xml");
}

TEST(S3RetryTest, ThrottledTwiceThenServed) {
  FakeStore store;
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int n) {
    if (n <= 2) return SlowDown(res);
    ServeRange(req, res, 1000);
  };
  auto client = *S3Client::Create(store.Options());
  char buf[10];
  absl::StatusOr<size_t> got = client->GetRange({"b", "k"}, {5, 10}, buf);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::string(buf, *got), "56789abcde");
  S3Stats stats = client->stats();
  EXPECT_EQ(stats.requests, 3u);
  EXPECT_EQ(stats.retries, 2u);
  EXPECT_EQ(stats.throttles, 2u);
  EXPECT_EQ(stats.bytes, 10u);
  EXPECT_TRUE(store.signed_);
}

TEST(S3RetryTest, GivesUpAfterMaxAttemptsNamingTheCause) {
  FakeStore store;
  store.handler_ = [](const httplib::Request&, httplib::Response& res, int) { SlowDown(res); };
  auto client = *S3Client::Create(store.Options());
  char buf[4];
  absl::StatusOr<size_t> got = client->GetRange({"b", "k"}, {0, 4}, buf);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(got.status().message(),
                                "s3://b/k bytes [0, 4): 503 SlowDown: Please reduce"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "gave up after 3 attempts"))
      << got.status();
  EXPECT_EQ(store.requests_, 3);
  EXPECT_EQ(client->stats().failures, 1u);
}

TEST(S3RetryTest, PermanentErrorsAreNotRetried) {
  FakeStore store;
  store.handler_ = [](const httplib::Request&, httplib::Response& res, int) {
    res.status = 403;
    res.set_content("<Error><Code>SignatureDoesNotMatch</Code><Message>no.</Message></Error>",
                    "application/xml");
  };
  auto client = *S3Client::Create(store.Options());
  char buf[4];
  absl::StatusOr<size_t> got = client->GetRange({"b", "k"}, {0, 4}, buf);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(got.status().message(), "s3://b/k bytes [0, 4): 403 SignatureDoesNotMatch: no.");
  EXPECT_EQ(store.requests_, 1);
  EXPECT_EQ(client->stats().failures, 1u);
}

TEST(S3RetryTest, AMissingObjectIsAnAnswerNotAFailure) {
  FakeStore store;
  store.handler_ = [](const httplib::Request&, httplib::Response& res, int) {
    res.status = 404;
    res.set_content("<Error><Code>NoSuchKey</Code><Message>none.</Message></Error>",
                    "application/xml");
  };
  auto client = *S3Client::Create(store.Options());
  absl::StatusOr<std::string> got = client->Get({"b", "k.crindex"});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_EQ(store.requests_, 1);
  EXPECT_EQ(client->stats().requests, 1u);
  EXPECT_EQ(client->stats().failures, 0u);
}

TEST(S3RetryTest, AShortAnswerIsRetried) {
  FakeStore store;
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int n) {
    ServeRange(req, res, n == 1 ? 3 : 1000);
  };
  auto client = *S3Client::Create(store.Options());
  char buf[8];
  absl::StatusOr<size_t> got = client->GetRange({"b", "k"}, {0, 8}, buf);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::string(buf, 8), "01234567");
  EXPECT_EQ(client->stats().retries, 1u);
  EXPECT_EQ(client->stats().throttles, 0u);
}

// A small object (an index) is read whole in one GET: no HEAD first, no Range; an answer sent in
// chunks, without a Content-Length, is whole once its last chunk came.
TEST(S3RetryTest, AWholeObjectIsOneGet) {
  FakeStore store;
  std::atomic<bool> ranged{false};
  store.handler_ = [&](const httplib::Request& req, httplib::Response& res, int) {
    if (req.has_header("Range")) ranged = true;
    if (req.path == "/b/missing") {
      res.status = 404;
      res.set_content("<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>",
                      "application/xml");
      return;
    }
    if (req.path == "/b/chunked") {  // no Content-Length: the body ends with its last chunk
      res.set_chunked_content_provider("application/octet-stream",
                                       [](size_t, httplib::DataSink& sink) {
                                         sink.write(kObject, sizeof(kObject) - 1);
                                         sink.done();
                                         return true;
                                       });
      return;
    }
    res.set_content(kObject, "application/octet-stream");
  };
  auto client = *S3Client::Create(store.Options());
  absl::StatusOr<std::string> got = client->Get({"b", "k"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, kObject);
  EXPECT_EQ(store.requests_, 1);
  absl::StatusOr<std::string> chunked = client->Get({"b", "chunked"});
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  EXPECT_EQ(*chunked, kObject);
  EXPECT_FALSE(ranged);
  EXPECT_EQ(client->stats().bytes, 2 * (sizeof(kObject) - 1));
  absl::StatusOr<std::string> missing = client->Get({"b", "missing"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "s3://b/missing"))
      << missing.status();
}

// A whole read whose answer breaks off mid-body is tried again; one larger than a whole read
// takes fails, naming the object, rather than growing without bound.
TEST(S3RetryTest, AWholeReadCutShortIsRetriedAndAHugeOneRefused) {
  FakeStore store;
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int n) {
    if (req.path == "/b/huge") {
      res.set_content_provider(size_t{65} << 20, "application/octet-stream",
                               [](size_t, size_t, httplib::DataSink& sink) {
                                 static const std::string chunk(1 << 20, 'x');
                                 return sink.write(chunk.data(), chunk.size());
                               });
      return;
    }
    if (n == 1) {  // 5 bytes of the 20 promised, then the connection closes
      res.set_content_provider(sizeof(kObject) - 1, "application/octet-stream",
                               [](size_t, size_t, httplib::DataSink& sink) {
                                 sink.write(kObject, 5);
                                 return false;
                               });
      return;
    }
    res.set_content(kObject, "application/octet-stream");
  };
  auto client = *S3Client::Create(store.Options());
  absl::StatusOr<std::string> got = client->Get({"b", "k"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, kObject);
  EXPECT_EQ(client->stats().retries, 1u);
  absl::StatusOr<std::string> huge = client->Get({"b", "huge"});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "s3://b/huge"));
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "larger than the 64 MiB"));
}

// A record file opened with the size its index gave asks the store nothing until it is read.
TEST(S3RetryTest, AFileOfAKnownSizeIsOpenedWithoutAHead) {
  FakeStore store;  // a HEAD would reach its handler too, and count
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int) {
    ServeRange(req, res, 1000);
  };
  S3Env env(std::shared_ptr<S3Client>(*S3Client::Create(store.Options())));
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      env.OpenKnown("s3://b/k", FileStat{sizeof(kObject) - 1, 0, ""}, Env::ReadPattern::kRandom);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(store.requests_, 0);
  char buf[10];
  absl::StatusOr<size_t> got = (*file)->Read(5, sizeof(buf), buf);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::string(buf, *got), "56789abcde");
  EXPECT_EQ(store.requests_, 1);
}

// A file opened with a known ETag reads only that object: each GET says If-Match, and a store
// that refuses it (the object was written again) fails the read with DATA_LOSS naming it.
TEST(S3RetryTest, AFileOfAKnownEtagReadsOnlyThatObject) {
  FakeStore store;
  std::atomic<bool> replaced{false};
  store.handler_ = [&](const httplib::Request& req, httplib::Response& res, int) {
    EXPECT_EQ(req.get_header_value("If-Match"), "\"e1\"");
    if (replaced) {
      res.status = 412;
      res.set_content("<Error><Code>PreconditionFailed</Code><Message>At least one of the "
                      "pre-conditions you specified did not hold</Message></Error>",
                      "application/xml");
      return;
    }
    ServeRange(req, res, 1000);
  };
  S3Env env(std::shared_ptr<S3Client>(*S3Client::Create(store.Options())));
  auto file = *env.OpenKnown("s3://b/k", FileStat{sizeof(kObject) - 1, 0, "\"e1\""},
                             Env::ReadPattern::kRandom);
  char buf[4];
  ASSERT_TRUE(file->Read(0, sizeof(buf), buf).ok());
  replaced = true;
  const int before = store.requests_;
  absl::StatusOr<size_t> got = file->Read(0, sizeof(buf), buf);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(),
                                "s3://b/k changed since it was indexed (it is no longer the "
                                "object of ETag \"e1\"): s3://b/k bytes [0, 4): 412 "
                                "PreconditionFailed"))
      << got.status();
  EXPECT_EQ(store.requests_ - before, 1);  // not retried
  RandomAccessFile::Range range{0, 4, buf, 0};
  absl::Status ranges = file->ReadRanges(absl::MakeSpan(&range, 1));
  EXPECT_EQ(ranges.code(), absl::StatusCode::kDataLoss) << ranges;
  EXPECT_TRUE(absl::StrContains(ranges.message(), "changed since it was indexed")) << ranges;
}

// Indexing an object asks the store for its size twice: before the scan, which reads from the
// size that gave, and after it, to see that the object did not change meanwhile.
TEST(S3RetryTest, IndexingAnObjectAsksForItsSizeBeforeAndAfterTheScanOnly) {
  const std::string local = ::testing::TempDir() + "/s3_indexed.tfrecord";
  {
    auto writer = *RecordWriter::Create(local);
    for (absl::string_view record : {"one", "two", "three"}) {
      ASSERT_TRUE(writer->Write(record).ok());
    }
    ASSERT_TRUE(writer->Close().ok());
  }
  const std::string object = *ReadFileToString(*Env::Default(), local);
  FakeStore store;
  std::atomic<int> heads{0};
  store.handler_ = [&](const httplib::Request& req, httplib::Response& res, int) {
    res.set_header("Last-Modified", "Mon, 30 Nov 2026 16:00:00 GMT");
    if (req.method == "HEAD") {
      heads++;
      res.set_content(object, "application/octet-stream");
      return;
    }
    ServeRange(req, res, object.size(), object);
  };
  S3Options options = store.Options();
  options.index_prefix = "off";  // no shared index: the scan is the only way
  S3Env env(std::shared_ptr<S3Client>(*S3Client::Create(options)));
  IndexCache cache(::testing::TempDir() + "/s3_index_cache", &env);
  absl::StatusOr<std::shared_ptr<const RecordIndex>> index = cache.Get("s3://b/train.tfrecord");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ((*index)->num_records(), 3u);
  EXPECT_EQ((*index)->file_size, object.size());
  EXPECT_EQ(heads, 2);
}

TEST(S3RetryTest, ListingFollowsContinuationTokens) {
  FakeStore store;
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int) {
    const bool second = req.get_param_value("continuation-token") == "page 2";
    EXPECT_EQ(req.get_param_value("list-type"), "2");
    EXPECT_EQ(req.get_param_value("prefix"), "train/");
    res.set_content(
        second ? "<ListBucketResult><IsTruncated>false</IsTruncated>"
                 "<Contents><Key>train/b</Key><Size>7</Size></Contents></ListBucketResult>"
               : "<ListBucketResult><IsTruncated>true</IsTruncated>"
                 "<Contents><Key>train/a</Key><Size>5</Size>"
                 "<LastModified>2026-01-02T03:04:05.000Z</LastModified></Contents>"
                 "<NextContinuationToken>page 2</NextContinuationToken></ListBucketResult>",
        "application/xml");
  };
  auto client = *S3Client::Create(store.Options());
  auto listed = client->List("b", "train/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, "train/a");
  EXPECT_EQ((*listed)[0].size, 5u);
  EXPECT_EQ((*listed)[0].mtime_ns,
            absl::ToUnixNanos(
                absl::FromCivil(absl::CivilSecond(2026, 1, 2, 3, 4, 5), absl::UTCTimeZone())));
  EXPECT_EQ((*listed)[1].key, "train/b");
  EXPECT_EQ(store.requests_, 2);
}

TEST(S3RetryTest, AnUnreachableEndpointFailsSoonNamingIt) {
  S3Options o;
  {
    FakeStore closed;  // a port that was just free, and is closed again below
    o = closed.Options();
  }
  auto client = *S3Client::Create(o);
  const absl::Time start = absl::Now();
  absl::StatusOr<ObjectInfo> head = client->Head({"b", "k"});
  EXPECT_EQ(head.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(head.status().message(), o.endpoint)) << head.status();
  EXPECT_TRUE(absl::StrContains(head.status().message(), "s3://b/k")) << head.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// GetRanges: neighbours merged into one GET, the rest fetched at once; each range's bytes land
// where it asked, whatever the order asked; a failure names the object and the merged range.
TEST(S3RangesTest, NeighboursShareAGetAndEveryRangeGetsItsBytes) {
  FakeStore store;
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int) {
    ServeRange(req, res, 1000);
  };
  S3Options options = store.Options();
  options.max_request_bytes = 4;
  auto client = *S3Client::Create(options);
  std::string a(3, '.'), b(4, '.'), c(2, '.'), d(5, '.'), e(2, '.');
  std::vector<RandomAccessFile::Range> ranges = {
      {10, 3, a.data()}, {3, 4, b.data()}, {13, 2, c.data()}, {0, 5, d.data()}, {19, 5, e.data()}};
  ASSERT_TRUE(client->GetRanges({"b", "k"}, 20, absl::MakeSpan(ranges)).ok());
  EXPECT_EQ(a, "abc");
  EXPECT_EQ(b, "3456");
  EXPECT_EQ(c, "de");
  EXPECT_EQ(d, "01234");
  EXPECT_EQ(e.substr(0, 1), "j");  // clipped to the object: 1 byte
  EXPECT_EQ(ranges[4].got, 1u);
  // Merged: [0, 7) in 2 parts of at most 4 bytes, [10, 15) in 2, [19, 20) in 1.
  EXPECT_EQ(store.requests_.load(), 5);
  EXPECT_EQ(client->stats().ranges, 5u);
}

TEST(S3RangesTest, AFailedRangeNamesTheObjectAndTheMergedRange) {
  FakeStore store;
  store.handler_ = [](const httplib::Request& req, httplib::Response& res, int) {
    if (req.get_header_value("Range") == "bytes=10-14") {
      res.status = 403;
      res.set_content("<Error><Code>AccessDenied</Code><Message>no</Message></Error>",
                      "application/xml");
      return;
    }
    ServeRange(req, res, 1000);
  };
  auto client = *S3Client::Create(store.Options());
  std::string a(3, '.'), c(2, '.'), d(5, '.');
  std::vector<RandomAccessFile::Range> ranges = {
      {10, 3, a.data()}, {13, 2, c.data()}, {0, 5, d.data()}};
  absl::Status s = client->GetRanges({"b", "k"}, 20, absl::MakeSpan(ranges));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "s3://b/k bytes [10, 15): 403 AccessDenied")) << s;
}

}  // namespace
}  // namespace croupier::s3
