// A read-only mapping of a file, read by copying out of it, that survives the file being cut
// short under it.
//
// Why: the producer reads its records at random, one small read each. Through pread, each read
// is a system call and a page-cache lookup, and measured in the end-to-end job (records of
// 1.1 KB, global shuffle) that was about 40% of the producer's CPU. Copying out of a mapping
// costs a memcpy, and a page fault only on a page's first touch.
//
// The hazard of a mapping is a file truncated while it is mapped: touching a page past the new
// end raises SIGBUS, which kills the process. CopyOut guards its copy: SIGBUS inside it makes it
// return false (the caller then reads the file the ordinary way, and gets the short read that
// names the change), and every other SIGBUS goes to the handler that was there before, or kills
// the process as it would have.
//
// The pages copied out of stay mapped, so they count in the process's RSS (as file pages, which
// the kernel can reclaim like the rest of the page cache).
//
// Under ThreadSanitizer, Map fails (UNIMPLEMENTED) and callers read the ordinary way: a SIGBUS
// inside the guarded copy killed the process there instead of reaching the handler.
#ifndef CROUPIER_SRC_COMMON_FILE_MAPPING_H_
#define CROUPIER_SRC_COMMON_FILE_MAPPING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace croupier {

// Thread-safe: immutable after Map.
class FileMapping {
 public:
  // Maps the first `size` bytes of the open file `fd` (which may be closed afterwards). `name`
  // is for errors. INVALID_ARGUMENT for a size of 0; UNIMPLEMENTED under ThreadSanitizer; the
  // mmap error otherwise.
  static absl::StatusOr<std::unique_ptr<FileMapping>> Map(int fd, uint64_t size,
                                                          absl::string_view name);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  // False under ThreadSanitizer (see above).
  static bool Supported();

  uint64_t size() const { return size_; }

  // Starts bringing the first bytes of [offset, offset + n) into the CPU's cache (prefetch
  // instructions, which never fault). Requires offset + n <= size().
  void Prefetch(uint64_t offset, size_t n) const;

  // Copies [offset, offset + n) into dst, which must not be inside the mapping. Requires
  // offset + n <= size(). False if the file no longer holds those bytes (dst then holds an
  // arbitrary part of them).
  bool CopyOut(uint64_t offset, size_t n, char* dst) const;

 private:
  FileMapping(const char* data, uint64_t size) : data_(data), size_(size) {}

  const char* const data_;
  const uint64_t size_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_FILE_MAPPING_H_
