// Fuzz target: the record index file reader (ParseRecordIndex in include/croupier/record_index.h,
// src/io/record_index.cc). Index files live in a cache directory that anyone with write access to
// it, or a crash half-way through a write, can damage.
//
// Input: the bytes of an index file. Properties checked: the parser gives DATA_LOSS or an index
// whose offsets start at 0, ascend with room for a record's framing between them and end inside
// the file size it records (so data_length never underflows), and that serializes back to exactly
// the input bytes.
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "croupier/record_index.h"
#include "croupier/tfrecord.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace croupier;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto index = ParseRecordIndex(bytes, "fuzz.crindex");
  if (fuzz::RefusedAsDataLoss(index.status(), "index errors are DATA_LOSS")) return 0;
  uint64_t framed_total = 0;
  for (uint64_t i = 0; i < index->num_records(); ++i) {
    const uint64_t start = index->offsets[i];
    const uint64_t end = i + 1 < index->num_records() ? index->offsets[i + 1] : index->file_size;
    FUZZ_CHECK(i > 0 || start == 0, "the first record starts at 0");
    FUZZ_CHECK(start <= end && end - start >= kRecordOverheadBytes, "room for each record");
    FUZZ_CHECK(index->data_length(i) == end - start - kRecordOverheadBytes, "data_length");
    framed_total += end - start;
  }
  FUZZ_CHECK(index->num_records() == 0 || framed_total == index->file_size, "records tile");
  FUZZ_CHECK(SerializeRecordIndex(*index) == bytes, "Parse then Serialize gives the bytes back");
  return 0;
}
