// Fuzz target: the tf.train.Example decoder (include/croupier/example.h, src/io/example_*.cc) on
// both its paths: the generic ParseExample and the BatchBuilder that decodes into columns
// (include/croupier/batch.h, src/io/batch_builder.cc).
//
// Input: one byte choosing a set of feature specs, then records separated by "#REC#". Each
// record goes to ParseExample and to a BatchBuilder; Finish's batch must parse as a BatchView.
// Properties checked:
//   - ParseExample gives DATA_LOSS or an Example that survives EncodeExample and parses back equal
//     (packed and unpacked);
//   - when ParseExample accepts a record, the builder's verdict is what the specs say of the parsed
//     Example (missing, wrong kind, wrong count: INVALID_ARGUMENT, never DATA_LOSS), and the values
//     it appends are the Example's;
//   - a refused record leaves the builder as it was.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "fuzz/fuzz_util.h"

namespace croupier::fuzz {
namespace {

// Short names, so that the fuzzer finds them; every dtype with scalar, fixed and variable shapes.
constexpr const char* kSpecSets[] = {
    "a:bytes,b:float32,c:int64",
    "a:bytes[*],b:float32[*],c:int64[*]",
    "a:float32[2],b:int64[2,2],c:bytes[3]",
    "a:int64[*],b:bytes,c:float32[*]",
};

// What the builder must say of `example` (already parsed): OK, or INVALID_ARGUMENT.
bool Fits(const Example& example, const std::vector<FeatureSpec>& specs) {
  for (const FeatureSpec& spec : specs) {
    const Feature* found = nullptr;
    for (const auto& [name, feature] : example) {
      if (name == spec.name) found = &feature;
    }
    if (found == nullptr) return false;
    if (found->kind_set && found->dtype != spec.dtype) return false;
    if (!spec.variable_length && static_cast<int64_t>(found->size()) != spec.NumElements()) {
      return false;
    }
  }
  return true;
}

const Feature* FindFeature(const Example& example, absl::string_view name) {
  for (const auto& [n, feature] : example) {
    if (n == name) return &feature;
  }
  return nullptr;
}

// The accepted records' values, column by column, must be what the batch holds.
void CheckBatch(const BatchView& view, const std::vector<FeatureSpec>& specs,
                const std::vector<Example>& accepted) {
  FUZZ_CHECK(view.num_records() == accepted.size(), "one batch record per accepted record");
  FUZZ_CHECK(view.columns().size() == specs.size(), "one column per spec");
  for (size_t i = 0; i < specs.size(); ++i) {
    const ColumnView& c = view.columns()[i];
    FUZZ_CHECK(c.name == specs[i].name && c.dtype == specs[i].dtype, "columns follow the specs");
    uint64_t v = 0;
    for (size_t r = 0; r < accepted.size(); ++r) {
      const Feature* f = FindFeature(accepted[r], specs[i].name);
      if (c.variable_length) {
        FUZZ_CHECK(c.row_splits[r] == v && c.row_splits[r + 1] == v + f->size(), "row splits");
      }
      for (size_t k = 0; k < f->size(); ++k, ++v) {
        FUZZ_CHECK(v < c.num_values, "values in range");
        switch (c.dtype) {
          case DType::kBytes:
            FUZZ_CHECK(c.bytes(v) == f->bytes[k], "bytes value");
            break;
          case DType::kFloat32:
            FUZZ_CHECK(std::memcmp(&c.floats()[v], &f->floats[k], 4) == 0, "float bits");
            break;
          case DType::kInt64:
            FUZZ_CHECK(c.ints()[v] == f->ints[k], "int64 value");
            break;
          default:
            FUZZ_CHECK(false, "a builder column of an Example's dtype");
        }
      }
    }
    FUZZ_CHECK(v == c.num_values, "no extra values");
  }
}

void Run(absl::string_view input) {
  if (input.empty()) return;
  constexpr size_t kNumSets = sizeof(kSpecSets) / sizeof(kSpecSets[0]);
  const uint8_t choice = static_cast<uint8_t>(input[0]) % kNumSets;
  auto specs = ParseFeatureSpecs(kSpecSets[choice]);
  FUZZ_CHECK(specs.ok(), "spec set parses");
  auto builder = BatchBuilder::Create(*specs);
  FUZZ_CHECK(builder.ok(), "builder");
  std::vector<Example> accepted;
  bool comparable = true;
  for (absl::string_view record : absl::StrSplit(input.substr(1), "#REC#")) {
    auto parsed = ParseExample(record);
    FUZZ_CHECK(parsed.ok() || absl::IsDataLoss(parsed.status()), "ParseExample: DATA_LOSS only");
    if (parsed.ok()) {
      for (bool packed : {true, false}) {
        auto again = ParseExample(EncodeExample(*parsed, packed));
        FUZZ_CHECK(again.ok() && *again == *parsed, "Encode then Parse gives the same Example");
      }
    }
    const uint64_t before = (*builder)->num_records();
    const uint64_t before_bytes = (*builder)->buffered_bytes();
    absl::Status added = (*builder)->AddRecord(record);
    if (added.ok()) {
      FUZZ_CHECK((*builder)->num_records() == before + 1, "an accepted record is counted");
    } else {
      FUZZ_CHECK(absl::IsInvalidArgument(added) || absl::IsDataLoss(added), "builder codes");
      FUZZ_CHECK(
          (*builder)->num_records() == before && (*builder)->buffered_bytes() == before_bytes,
          "a refused record leaves the builder as it was");
    }
    if (parsed.ok()) {
      FUZZ_CHECK(added.ok() == Fits(*parsed, *specs), "builder verdict matches ParseExample's");
      FUZZ_CHECK(!absl::IsDataLoss(added), "no DATA_LOSS for a record ParseExample accepts");
      if (added.ok()) accepted.push_back(*std::move(parsed));
    } else if (added.ok()) {
      // Malformed only inside features no spec names, which the builder skips unread (formats.md):
      // the batch still must be valid, but there is no parsed Example to compare it with.
      comparable = false;
    }
  }
  auto batch = (*builder)->Finish();
  FUZZ_CHECK(batch.ok(), "Finish");
  auto view = BatchView::Parse(batch->bytes());
  FUZZ_CHECK(view.ok(), "the builder's batch is a valid batch");
  if (comparable) CheckBatch(*view, *specs, accepted);
}

}  // namespace
}  // namespace croupier::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  croupier::fuzz::Run(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
