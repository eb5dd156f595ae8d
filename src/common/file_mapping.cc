#include "src/common/file_mapping.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "src/common/env.h"

#if defined(__SANITIZE_THREAD__)
#define CROUPIER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CROUPIER_TSAN 1
#endif
#endif

namespace croupier {
namespace {

// The SIGBUS disposition before ours, to hand on every SIGBUS that is not a guarded copy's.
struct sigaction previous_action;
absl::once_flag install_once;
absl::Status install_status;

// Where a guarded copy on this thread jumps back to, or nullptr outside one. Set before the copy
// touches the mapping, so that the handler never touches this thread's variable for the first
// time (which could allocate).
thread_local sigjmp_buf* guarded_copy = nullptr;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  sigjmp_buf* jump = guarded_copy;
  if (jump != nullptr) siglongjmp(*jump, 1);
  if ((previous_action.sa_flags & SA_SIGINFO) != 0 && previous_action.sa_sigaction != nullptr) {
    previous_action.sa_sigaction(sig, info, context);
    return;
  }
  if ((previous_action.sa_flags & SA_SIGINFO) == 0 && previous_action.sa_handler != SIG_DFL &&
      previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(sig);
    return;
  }
  // The default action, as if this handler had never been installed (an ignored SIGBUS from a
  // fault cannot be ignored either: the kernel kills the process).
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

void InstallHandler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = &OnSigbus;
  sigemptyset(&action.sa_mask);
  // SA_NODEFER: the handler leaves by siglongjmp without restoring the signal mask, so SIGBUS
  // must not be blocked while it runs, or the next one on this thread would kill the process.
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  if (sigaction(SIGBUS, &action, &previous_action) != 0) {
    install_status = ErrnoToStatus(errno, "installing the SIGBUS handler for", "file mappings");
  }
}

}  // namespace

bool FileMapping::Supported() {
#ifdef CROUPIER_TSAN
  return false;
#else
  return true;
#endif
}

absl::StatusOr<std::unique_ptr<FileMapping>> FileMapping::Map(int fd, uint64_t size,
                                                              absl::string_view name) {
  if (size == 0) return absl::InvalidArgumentError(absl::StrCat("mapping 0 bytes of ", name));
  if (!Supported()) {
    return absl::UnimplementedError(
        absl::StrCat("mapping ", name, ": not under ThreadSanitizer (a guarded copy's SIGBUS "
                     "does not reach its handler there)"));
  }
  absl::call_once(install_once, &InstallHandler);
  if (!install_status.ok()) return install_status;
  void* data = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return ErrnoToStatus(errno, "mapping", name);
  // Records are read at random: fault in only the page touched, not the pages around it, which
  // for a file that is not in the page cache would read many times the bytes asked for.
  madvise(data, size, MADV_RANDOM);
  return std::unique_ptr<FileMapping>(new FileMapping(static_cast<const char*>(data), size));
}

FileMapping::~FileMapping() { munmap(const_cast<char*>(data_), size_); }

void FileMapping::Prefetch(uint64_t offset, size_t n) const {
  // The first four cache lines: the hardware prefetcher follows a sequential copy once it starts.
  const size_t lines = std::min<size_t>((n + 63) / 64, 4);
  for (size_t i = 0; i < lines; ++i) __builtin_prefetch(data_ + offset + 64 * i, 0, 0);
}

bool FileMapping::CopyOut(uint64_t offset, size_t n, char* dst) const {
  sigjmp_buf jump;
  // 0: no signal mask saved or restored (a system call each); SA_NODEFER keeps it unchanged.
  if (sigsetjmp(jump, 0) != 0) {
    guarded_copy = nullptr;
    return false;
  }
  guarded_copy = &jump;
  // The compiler must not move the copy out from between the two stores.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, data_ + offset, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  guarded_copy = nullptr;
  return true;
}

}  // namespace croupier
