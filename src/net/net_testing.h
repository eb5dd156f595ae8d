// Test-only helpers for the network code of src/net and src/transport: two connected loopback
// sockets, and the certificates of tests/tls_certs.sh (a CA, a server and a client certificate it
// signed, an expired one, another CA and a certificate it signed) in a temporary directory. Needs
// CROUPIER_SOURCE_DIR (the repository's root), which croupier_test() defines.
#ifndef CROUPIER_SRC_NET_NET_TESTING_H_
#define CROUPIER_SRC_NET_NET_TESTING_H_

#include <stdlib.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/net/socket.h"
#include "src/net/tls_config.h"

namespace croupier::testing {

// Socket calls' wait: until `d` from now.
inline net::IoWait Within(absl::Duration d) { return net::IoWait{.deadline = absl::Now() + d}; }

// A dialled socket (first) and the listener's accepted end of it (second), both non-blocking, on
// 127.0.0.1. Invalid sockets and a test failure when the loopback refuses.
inline std::pair<net::Socket, net::Socket> LoopbackPair() {
  absl::StatusOr<net::Socket> listener = net::Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status();
  if (!listener.ok()) return {};
  absl::StatusOr<net::Socket> dialled =
      net::Dial(absl::StrCat("127.0.0.1:", net::LocalPort(listener->fd())),
                net::IoWait{.deadline = absl::Now() + absl::Seconds(5)});
  EXPECT_TRUE(dialled.ok()) << dialled.status();
  if (!dialled.ok()) return {};
  net::Socket accepted(::accept4(listener->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  EXPECT_TRUE(accepted.valid()) << "accept on the loopback failed";
  return {*std::move(dialled), std::move(accepted)};
}

// A directory of certificates, removed with it. Thread-compatible; make one per test suite
// (SetUpTestSuite), since the openssl tool takes a moment.
class TlsFiles {
 public:
  // Runs the script; a test failure naming it when it fails.
  TlsFiles() {
    char tmpl[] = "/tmp/croupier-tls-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      ADD_FAILURE() << "cannot make a temporary directory for the certificates";
      return;
    }
    dir_ = tmpl;
    const std::string script = CROUPIER_SOURCE_DIR "/tests/tls_certs.sh";
    EXPECT_EQ(std::system(absl::StrCat("sh ", script, " ", dir_).c_str()), 0)
        << "cannot make certificates with " << script;
  }
  ~TlsFiles() {
    if (!dir_.empty()) std::system(absl::StrCat("rm -rf ", dir_).c_str());
  }
  TlsFiles(const TlsFiles&) = delete;
  TlsFiles& operator=(const TlsFiles&) = delete;

  // The path of one of the script's files, e.g. "ca.pem".
  std::string File(absl::string_view name) const { return absl::StrCat(dir_, "/", name); }

  // `cert`.pem and `cert`.key (none when empty), and `ca`.pem as the CA (none when empty).
  TlsConfig Config(absl::string_view cert, absl::string_view ca) const {
    TlsConfig config;
    if (!cert.empty()) {
      config.cert_file = File(absl::StrCat(cert, ".pem"));
      config.key_file = File(absl::StrCat(cert, ".key"));
    }
    if (!ca.empty()) config.ca_file = File(absl::StrCat(ca, ".pem"));
    return config;
  }

 private:
  std::string dir_;
};

// A test suite with the certificates, made once for all its tests: derive from it.
class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { files_ = new TlsFiles(); }
  static void TearDownTestSuite() {
    delete files_;
    files_ = nullptr;
  }
  static inline TlsFiles* files_ = nullptr;
};

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_NET_NET_TESTING_H_
