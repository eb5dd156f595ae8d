// What the data-plane benchmarks serve: a batch of an exact size, and a source that hands out
// that same pre-built batch for every request, so that making batches costs nothing and only the
// transport is measured.
#ifndef CROUPIER_BENCH_FIXED_SOURCE_H_
#define CROUPIER_BENCH_FIXED_SOURCE_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "croupier/batch.h"
#include "src/transport/batch_source.h"

namespace croupier::bench {

// A batch of exactly `bytes` bytes (a multiple of 64, at least 256): one float32 column. Exits the
// program, with the reason, if the batch cannot be built.
inline Batch MakeBatch(size_t bytes) {
  const size_t overhead = 192;  // header, one descriptor, the name, padding to 64
  const size_t floats = (bytes - overhead) / 4;
  std::vector<float> values(floats);
  for (size_t i = 0; i < floats; ++i) values[i] = static_cast<float>(i % 1000) * 0.5f;
  const std::vector<int64_t> dims = {static_cast<int64_t>(floats)};
  const ColumnData column{
      "x",    DType::kFloat32,
      false,  dims,
      floats, absl::string_view(reinterpret_cast<const char*>(values.data()), 4 * floats),
      {},     {}};
  auto batch = Batch::FromColumns(1, {column});
  if (!batch.ok()) {
    std::fprintf(stderr, "a batch of %zu bytes: %s\n", bytes, batch.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(batch);
}

// Hands out the same pre-built batch for every key, always ready (so pipelined answers are
// written together). Thread-safe.
class FixedSource final : public BatchSource {
 public:
  explicit FixedSource(Batch batch) : batch_(std::move(batch)) {}
  absl::StatusOr<Batch> GetBatch(const BatchKey&, absl::Time) override { return batch_; }
  bool Ready(const BatchKey&) override { return true; }
  absl::StatusOr<std::pair<uint64_t, Batch>> GetAnyBatch(absl::string_view, uint64_t,
                                                         absl::Time) override {
    return std::make_pair(uint64_t{0}, batch_);
  }

 private:
  const Batch batch_;
};

}  // namespace croupier::bench

#endif  // CROUPIER_BENCH_FIXED_SOURCE_H_
