// Fuzz target: the TFRecord reader (include/croupier/tfrecord.h, src/io/tfrecord_reader.cc).
//
// The input is a whole TFRecord file. RecordReader reads it to the end or to its first error,
// with a small buffer so that records larger than the buffer take the growing path; CheckRecord
// (the random-access check) sees every prefix the reader framed. Properties checked: every error
// is DATA_LOSS, the reader stays failed after one, the records it returns lie inside the file and
// are exactly what CheckRecord accepts at that offset, and the offsets add up to the file size at
// a clean end.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "croupier/tfrecord.h"
#include "fuzz/fuzz_util.h"

namespace croupier::fuzz {
namespace {

void CheckReader(absl::string_view file) {
  const std::string& path = WriteScratchFile(file);
  RecordReaderOptions options;
  options.buffer_bytes = 1;  // raised to the 4096-byte minimum: small files still fill it
  auto reader = RecordReader::Open(path, options);
  FUZZ_CHECK(reader.ok(), "open the scratch file");
  uint64_t records = 0;
  while (true) {
    auto next = (*reader)->Next();
    if (!next.ok()) {
      FUZZ_CHECK(absl::IsDataLoss(next.status()), "reader errors are DATA_LOSS");
      auto again = (*reader)->Next();
      FUZZ_CHECK(!again.ok() && again.status() == next.status(), "a failed reader stays failed");
      break;
    }
    if (!next->has_value()) {
      FUZZ_CHECK((*reader)->offset() == file.size(), "a clean end is the end of the file");
      break;
    }
    const uint64_t at = (*reader)->record_offset();
    const absl::string_view data = **next;
    FUZZ_CHECK(at + kRecordOverheadBytes + data.size() == (*reader)->offset(), "offsets add up");
    FUZZ_CHECK((*reader)->offset() <= file.size(), "a record lies inside the file");
    FUZZ_CHECK(file.substr(at + kRecordHeaderBytes, data.size()) == data, "data is the file's");
    auto checked = CheckRecord(file.substr(at, data.size() + kRecordOverheadBytes), "fuzz", at);
    FUZZ_CHECK(checked.ok() && *checked == data, "CheckRecord accepts what the reader read");
    ++records;
  }
}

void CheckRandomAccess(absl::string_view file) {
  // What IndexedRecordFile hands CheckRecord: any slice may be a stale or hostile index's guess.
  for (size_t cut : {size_t{0}, size_t{15}, size_t{16}, file.size() / 2, file.size()}) {
    if (cut > file.size()) continue;
    auto r = CheckRecord(file.substr(0, cut), "fuzz", 0);
    FUZZ_CHECK(r.ok() || absl::IsDataLoss(r.status()), "CheckRecord errors are DATA_LOSS");
    if (r.ok()) FUZZ_CHECK(r->size() + kRecordOverheadBytes == cut, "the record fills the slice");
  }
}

}  // namespace
}  // namespace croupier::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view file(reinterpret_cast<const char*>(data), size);
  croupier::fuzz::CheckReader(file);
  croupier::fuzz::CheckRandomAccess(file);
  return 0;
}
