// Fuzz target: the record counts a dispatcher keeps beside a pattern's objects in a store
// (ParseKeptCounts in src/dispatcher/kept_counts.h), which every later job on the pattern reads
// back from wherever the store's users can write.
//
// Input: the bytes of a .crcounts object. Properties checked: the parser refuses with DATA_LOSS,
// or gives counts that serialize to bytes that parse to the same counts.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "src/dispatcher/kept_counts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace croupier;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto counts = ParseKeptCounts(bytes, "fuzz.crcounts");
  if (fuzz::RefusedAsDataLoss(counts.status(), "kept counts errors are DATA_LOSS")) return 0;
  auto again = ParseKeptCounts(SerializeKeptCounts(*counts), "again.crcounts");
  FUZZ_CHECK(again.ok(), "serialized counts parse");
  FUZZ_CHECK(again->SerializeAsString() == counts->SerializeAsString(),
             "Serialize then Parse gives the counts back");
  return 0;
}
