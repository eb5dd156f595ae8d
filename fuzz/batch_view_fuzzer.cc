// Fuzz target: the batch validator (BatchView::Parse and Batch::FromBuffer in
// include/croupier/batch.h, src/io/batch_view.cc). A consumer runs it on the bytes of every BATCH
// frame it receives from the network, so it must survive anything.
//
// Input: the bytes of a batch buffer. Properties checked: both entry points agree; errors are
// DATA_LOSS; an accepted batch's every value can be read inside the buffer (ASan checks the
// reads) and its shapes add up; and Batch::FromColumns rebuilds a batch with the same content.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "croupier/batch.h"
#include "fuzz/fuzz_util.h"
#include "src/io/batch_testing.h"

namespace croupier::fuzz {
namespace {

void Run(absl::string_view bytes) {
  // As the TCP client receives it: into an aligned buffer from Batch::AllocateBuffer.
  std::shared_ptr<uint8_t> buffer = Batch::AllocateBuffer(bytes.size());
  FUZZ_CHECK(buffer != nullptr || bytes.empty(), "allocate");
  if (!bytes.empty()) std::memcpy(buffer.get(), bytes.data(), bytes.size());
  auto batch = Batch::FromBuffer(buffer, bytes.size());
  auto copied = Batch::FromBytes(bytes);
  FUZZ_CHECK(batch.ok() == copied.ok(), "FromBuffer and FromBytes agree");
  if (RefusedAsDataLoss(batch.status(), "batch errors are DATA_LOSS")) return;
  absl::StatusOr<uint64_t> read = ReadEveryValue(batch->view());
  FUZZ_CHECK(read.ok(), std::string(read.status().message()).c_str());
  volatile uint64_t sink = *read;
  (void)sink;
  FUZZ_CHECK(batch->ContentHash() == copied->ContentHash(), "same bytes, same hash");

  // Rebuilding from the columns must work and keep every array.
  const BatchView& view = batch->view();
  std::vector<ColumnData> columns;
  for (const ColumnView& c : view.columns()) {
    columns.push_back(ColumnData{c.name, c.dtype, c.variable_length, c.dims, c.num_values, c.values,
                                 c.offsets, c.row_splits});
  }
  auto rebuilt = Batch::FromColumns(view.num_records(), columns);
  FUZZ_CHECK(rebuilt.ok(), "a valid batch's columns make a batch");
  const BatchView& again = rebuilt->view();
  FUZZ_CHECK(again.num_records() == view.num_records(), "records");
  FUZZ_CHECK(again.columns().size() == view.columns().size(), "columns");
  for (size_t i = 0; i < view.columns().size(); ++i) {
    const ColumnView& a = view.columns()[i];
    const ColumnView& b = again.columns()[i];
    FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.variable_length == b.variable_length &&
                   a.dims == b.dims && a.num_values == b.num_values && a.values == b.values,
               "rebuilt column");
    FUZZ_CHECK(std::equal(a.offsets.begin(), a.offsets.end(), b.offsets.begin(), b.offsets.end()),
               "rebuilt offsets");
    FUZZ_CHECK(std::equal(a.row_splits.begin(), a.row_splits.end(), b.row_splits.begin(),
                          b.row_splits.end()),
               "rebuilt splits");
  }
}

}  // namespace
}  // namespace croupier::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  croupier::fuzz::Run(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
