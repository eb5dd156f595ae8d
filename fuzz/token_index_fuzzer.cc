// Fuzz target: the index of Megatron-LM's indexed dataset of token documents (ParseTokenIndex in
// src/io/indexed_dataset.h), which a token job reads from wherever its user keeps the shards.
//
// Input: the bytes of a .idx, checked against a .bin of 1 MiB. Properties checked: the parser
// refuses with DATA_LOSS (bad bytes) or INVALID_ARGUMENT (a dtype that is not token ids), or
// gives an index whose every document lies inside the .bin, and which encodes back to bytes that
// parse to the same index.
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "fuzz/fuzz_util.h"
#include "src/io/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace croupier;
  constexpr uint64_t kBinSize = uint64_t{1} << 20;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto index = ParseTokenIndex(bytes, kBinSize, "fuzz.idx");
  if (absl::IsInvalidArgument(index.status())) return 0;  // a dtype other than uint16 or int32
  if (fuzz::RefusedAsDataLoss(index.status(), "index errors are DATA_LOSS")) return 0;
  FUZZ_CHECK(index->lengths.size() == index->pointers.size(), "a pointer per document");
  const uint64_t token = TokenDTypeSize(index->dtype);
  for (size_t d = 0; d < index->lengths.size(); ++d) {
    FUZZ_CHECK(index->pointers[d] <= kBinSize, "a document starts inside the .bin");
    FUZZ_CHECK(index->lengths[d] * token <= kBinSize - index->pointers[d],
               "a document ends inside the .bin");
  }
  auto again = ParseTokenIndex(EncodeTokenIndex(*index), kBinSize, "again.idx");
  FUZZ_CHECK(again.ok(), "an encoded index parses");
  FUZZ_CHECK(again->dtype == index->dtype && again->lengths == index->lengths &&
                 again->pointers == index->pointers,
             "Encode then Parse gives the index back");
  return 0;
}
