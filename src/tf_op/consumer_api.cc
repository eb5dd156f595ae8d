// The C interface of consumer_api.h over croupier::Consumer. Compiled into croupier._croupier
// (python/CMakeLists.txt) with the project's flags and libraries; only croupier_consumer_api is
// exported from the module.
#include "src/tf_op/consumer_api.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "croupier/batch.h"
#include "croupier/consumer.h"
#include "croupier/dtype.h"

struct CroupierConsumer {
  std::unique_ptr<croupier::Consumer> consumer;
};

struct CroupierBatch {
  croupier::Batch batch;
};

namespace croupier {
namespace {

// The C codes are DType's values: BatchColumn hands the dtype over as it is.
static_assert(CROUPIER_DTYPE_BYTES == static_cast<int>(DType::kBytes));
static_assert(CROUPIER_DTYPE_FLOAT32 == static_cast<int>(DType::kFloat32));
static_assert(CROUPIER_DTYPE_INT64 == static_cast<int>(DType::kInt64));
static_assert(CROUPIER_DTYPE_BOOL == static_cast<int>(DType::kBool));
static_assert(CROUPIER_DTYPE_INT8 == static_cast<int>(DType::kInt8));
static_assert(CROUPIER_DTYPE_INT16 == static_cast<int>(DType::kInt16));
static_assert(CROUPIER_DTYPE_INT32 == static_cast<int>(DType::kInt32));
static_assert(CROUPIER_DTYPE_UINT8 == static_cast<int>(DType::kUInt8));
static_assert(CROUPIER_DTYPE_UINT16 == static_cast<int>(DType::kUInt16));
static_assert(CROUPIER_DTYPE_UINT32 == static_cast<int>(DType::kUInt32));
static_assert(CROUPIER_DTYPE_UINT64 == static_cast<int>(DType::kUInt64));
static_assert(CROUPIER_DTYPE_FLOAT16 == static_cast<int>(DType::kFloat16));
static_assert(CROUPIER_DTYPE_BFLOAT16 == static_cast<int>(DType::kBFloat16));
static_assert(CROUPIER_DTYPE_FLOAT64 == static_cast<int>(DType::kFloat64));
static_assert(CROUPIER_DTYPE_FLOAT64 == kLastDTypeCode);

int Fail(const absl::Status& status, char* error, size_t error_size) {
  if (error != nullptr && error_size > 0) {
    const std::string message(status.message());
    const size_t n = std::min(message.size(), error_size - 1);
    std::memcpy(error, message.data(), n);
    error[n] = '\0';
  }
  return static_cast<int>(status.code());
}

int Connect(const CroupierConnectOptions* o, CroupierConsumer** out, char* error,
            size_t error_size) {
  *out = nullptr;
  ConsumerOptions options;
  options.dispatcher = o->dispatcher != nullptr ? o->dispatcher : "";
  options.job = o->job != nullptr ? o->job : "";
  options.rank = o->rank;
  options.world = o->world;
  options.auth_token = o->auth_token != nullptr ? o->auth_token : "";
  options.prefetch_batches = o->prefetch_batches;
  options.prefetch_bytes = o->prefetch_bytes;
  if (!(o->timeout_seconds > 0) || !std::isfinite(o->timeout_seconds)) {
    return Fail(absl::InvalidArgumentError("the timeout must be a positive number of seconds"),
                error, error_size);
  }
  options.timeout = absl::Seconds(o->timeout_seconds);
  options.resume = o->resume != 0;
  absl::StatusOr<std::unique_ptr<Consumer>> consumer = Consumer::Connect(std::move(options));
  if (!consumer.ok()) return Fail(consumer.status(), error, error_size);
  *out = new CroupierConsumer{std::move(*consumer)};
  return 0;
}

const char* Features(const CroupierConsumer* c) { return c->consumer->job().features.c_str(); }

void JobInfo(const CroupierConsumer* c, CroupierJobInfo* out) {
  const JobSummary& j = c->consumer->job();
  out->num_consumers = j.num_consumers;
  out->batch_size = j.batch_size;
  out->num_records = j.num_records;
  out->num_epochs = j.num_epochs;
  out->steps_per_epoch = j.steps_per_epoch;
  out->dealt = j.mode == DealMode::kDealt ? 1 : 0;
}

void RegisteredPosition(const CroupierConsumer* c, uint64_t* epoch, uint64_t* step) {
  const ConsumerPosition p = c->consumer->registered_position();
  *epoch = p.epoch;
  *step = p.step;
}

int StartEpoch(CroupierConsumer* c, uint64_t epoch, uint64_t step, char* error,
               size_t error_size) {
  absl::Status status = c->consumer->StartEpoch(epoch, step);
  return status.ok() ? 0 : Fail(status, error, error_size);
}

int Next(CroupierConsumer* c, CroupierBatch** out, char* error, size_t error_size) {
  *out = nullptr;
  absl::StatusOr<std::optional<Batch>> batch = c->consumer->Next();
  if (!batch.ok()) return Fail(batch.status(), error, error_size);
  if (batch->has_value()) *out = new CroupierBatch{std::move(**batch)};
  return 0;
}

void Position(const CroupierConsumer* c, uint64_t* epoch, uint64_t* step) {
  const ConsumerPosition p = c->consumer->position();
  *epoch = p.epoch;
  *step = p.step;
}

void Close(CroupierConsumer* c) { c->consumer->Close(); }

void Destroy(CroupierConsumer* c) {
  if (c == nullptr) return;
  c->consumer->Close();
  delete c;
}

uint64_t BatchNumRecords(const CroupierBatch* b) { return b->batch.num_records(); }

uint32_t BatchNumColumns(const CroupierBatch* b) {
  return static_cast<uint32_t>(b->batch.view().columns().size());
}

void BatchColumn(const CroupierBatch* b, uint32_t index, CroupierColumn* out) {
  const ColumnView& c = b->batch.view().columns()[index];
  out->name = c.name.data();
  out->name_size = c.name.size();
  out->dtype = static_cast<int>(c.dtype);
  out->variable_length = c.variable_length ? 1 : 0;
  out->rank = static_cast<uint32_t>(c.dims.size());
  out->dims = c.dims.data();
  out->num_values = c.num_values;
  out->values = c.values.data();
  out->values_size = c.values.size();
  out->offsets = c.offsets.empty() ? nullptr : c.offsets.data();
  out->row_splits = c.row_splits.empty() ? nullptr : c.row_splits.data();
}

uint64_t BatchContentHash(const CroupierBatch* b) { return b->batch.ContentHash(); }

void BatchRelease(CroupierBatch* b) { delete b; }

constexpr CroupierConsumerApi kApi = {
    CROUPIER_CONSUMER_API_VERSION,
    sizeof(CroupierConsumerApi),
    &Connect,
    &Features,
    &JobInfo,
    &RegisteredPosition,
    &StartEpoch,
    &Next,
    &Position,
    &Close,
    &Destroy,
    &BatchNumRecords,
    &BatchNumColumns,
    &BatchColumn,
    &BatchContentHash,
    &BatchRelease,
};

}  // namespace
}  // namespace croupier

extern "C" __attribute__((visibility("default"))) const CroupierConsumerApi*
croupier_consumer_api(void) {
  return &croupier::kApi;
}
