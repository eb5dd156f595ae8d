// CroupierDataset: a tf.data source dataset that reads one rank of a croupier job.
//
// Compiled with TensorFlow's headers and flags only (tf.sysconfig); it includes nothing of
// croupier's C++ and reaches the consumer library through the C table of consumer_api.h, which
// croupier/tf.py hands over (croupier_tf_set_consumer_api) after loading this library. See
// docs/tensorflow.md for the semantics.
//
// Elements: one tensor per feature in the order of the `features` attr, with two tensors (values,
// row splits) for a variable-length feature. Numeric arrays are not copied: the tensors point into
// the received batch buffer, which stays alive while any of them does.
//
// Epochs: with epoch >= 0 every iterator reads that epoch; with epoch = -1 each new iterator reads
// the next epoch. A rank's first iterator starts where the dispatcher registered the rank (its
// last acknowledged position), as croupier.Consumer does, or at the op's start (epoch, step).
// An iterator saves and restores the croupier position (epoch, step) through tf.train.Checkpoint.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/tf_op/batch_tensors.h"
#include "src/tf_op/consumer_api.h"
#include "src/tf_op/rank_state.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/dataset.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace croupier_tf {

using ::tensorflow::DataType;
using ::tensorflow::DataTypeVector;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace data = ::tensorflow::data;

std::atomic<const CroupierConsumerApi*> g_api{nullptr};

absl::Status ApiError(int code, const char* message) {
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

class CroupierDatasetOp : public data::DatasetOpKernel {
 public:
  explicit CroupierDatasetOp(::tensorflow::OpKernelConstruction* ctx) : DatasetOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("features", &features_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ragged", &ragged_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_types", &output_types_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_shapes", &output_shapes_));
    OP_REQUIRES(ctx, features_.size() == ragged_.size(),
                absl::InvalidArgumentError("features and ragged differ in length"));
    size_t outputs = 0;
    for (bool r : ragged_) outputs += r ? 2 : 1;
    OP_REQUIRES(ctx, outputs == output_types_.size() && outputs == output_shapes_.size(),
                absl::InvalidArgumentError("output_types/output_shapes do not match features"));
  }

  void MakeDataset(::tensorflow::OpKernelContext* ctx, data::DatasetBase** output) override;

 private:
  class Dataset;
  std::vector<std::string> features_;
  std::vector<bool> ragged_;
  DataTypeVector output_types_;
  std::vector<PartialTensorShape> output_shapes_;
};

class CroupierDatasetOp::Dataset : public data::DatasetBase {
 public:
  Dataset(::tensorflow::OpKernelContext* ctx, std::shared_ptr<RankState> state, int64_t state_id,
          std::string dispatcher, int64_t epoch, std::vector<std::string> features,
          std::vector<bool> ragged, DataTypeVector types,
          std::vector<PartialTensorShape> shapes)
      : DatasetBase(data::DatasetContext(ctx)),
        state_(std::move(state)),
        state_id_(state_id),
        dispatcher_(std::move(dispatcher)),
        epoch_(epoch),
        features_(std::move(features)),
        ragged_(std::move(ragged)),
        types_(std::move(types)),
        shapes_(std::move(shapes)) {}

  std::unique_ptr<data::IteratorBase> MakeIteratorInternal(
      const std::string& prefix) const override {
    return std::make_unique<Iterator>(
        Iterator::Params{this, absl::StrCat(prefix, "::Croupier")});
  }
  const DataTypeVector& output_dtypes() const override { return types_; }
  const std::vector<PartialTensorShape>& output_shapes() const override { return shapes_; }
  std::string DebugString() const override {
    return absl::StrCat("CroupierDatasetOp(", dispatcher_, ", job ",
                                         state_->job(), ", rank ", state_->rank(), " of ",
                                         state_->world(), ")::Dataset");
  }
  // A dealt job's steps per epoch: what an iteration from the start of an epoch yields (one that
  // resumes mid-epoch yields fewer). Keras sizes its epochs by it.
  int64_t CardinalityInternal(data::CardinalityOptions options) const override {
    const uint64_t steps = state_->steps_per_epoch();
    return steps > 0 ? static_cast<int64_t>(steps) : data::kUnknownCardinality;
  }
  absl::Status InputDatasets(std::vector<const DatasetBase*>* inputs) const override {
    return absl::OkStatus();
  }
  // The position (epoch, step) is the whole state: a restored iterator asks the service for the
  // same batches again.
  absl::Status CheckExternalState() const override { return absl::OkStatus(); }

 protected:
  absl::Status AsGraphDefInternal(data::SerializationContext* ctx,
                                  DatasetGraphDefBuilder* b,
                                  ::tensorflow::Node** output) const override {
    std::vector<::tensorflow::Node*> inputs(13);
    TF_RETURN_IF_ERROR(b->AddScalar(::tensorflow::tstring(dispatcher_), &inputs[0]));
    TF_RETURN_IF_ERROR(b->AddScalar(::tensorflow::tstring(state_->job()), &inputs[1]));
    TF_RETURN_IF_ERROR(b->AddScalar(static_cast<int64_t>(state_->rank()), &inputs[2]));
    TF_RETURN_IF_ERROR(b->AddScalar(static_cast<int64_t>(state_->world()), &inputs[3]));
    TF_RETURN_IF_ERROR(b->AddScalar(epoch_, &inputs[4]));
    TF_RETURN_IF_ERROR(b->AddScalar(::tensorflow::tstring(""), &inputs[5]));
    TF_RETURN_IF_ERROR(b->AddScalar(1.0, &inputs[6]));
    TF_RETURN_IF_ERROR(b->AddScalar(int64_t{1}, &inputs[7]));
    TF_RETURN_IF_ERROR(b->AddScalar(int64_t{1}, &inputs[8]));
    TF_RETURN_IF_ERROR(b->AddScalar(true, &inputs[9]));
    TF_RETURN_IF_ERROR(b->AddScalar(state_id_, &inputs[10]));
    // No start: a rewrite finds the live state by its id, and the state keeps its start.
    TF_RETURN_IF_ERROR(b->AddScalar(int64_t{-1}, &inputs[11]));
    TF_RETURN_IF_ERROR(b->AddScalar(int64_t{-1}, &inputs[12]));
    ::tensorflow::AttrValue features, ragged, types, shapes;
    b->BuildAttrValue(features_, &features);
    b->BuildAttrValue(ragged_, &ragged);
    b->BuildAttrValue(types_, &types);
    b->BuildAttrValue(shapes_, &shapes);
    return b->AddDataset(this, inputs,
                         {{"features", features},
                          {"ragged", ragged},
                          {"output_types", types},
                          {"output_shapes", shapes}},
                         output);
  }

 private:
  // Reads the epoch it planned at its first element. Thread-safe (mu_), as tf.data requires.
  class Iterator : public data::DatasetIterator<Dataset> {
   public:
    explicit Iterator(const Params& params) : DatasetIterator<Dataset>(params) {}

    absl::Status Initialize(data::IteratorContext* ctx) override {
      generation_ = dataset()->state_->Claim();
      return absl::OkStatus();
    }

    absl::Status GetNextInternal(data::IteratorContext* ctx, std::vector<Tensor>* out,
                                 bool* end_of_sequence) override {
      std::lock_guard<std::mutex> lock(mu_);
      RankState& state = *dataset()->state_;
      const CroupierConsumerApi* api = state.api();
      *end_of_sequence = false;
      if (phase_ == kFinished) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      std::lock_guard<std::mutex> read_lock(state.read_mu());
      if (!state.Current(generation_)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "croupier job '", state.job(), "' rank ", state.rank(),
            ": a newer iterator of this dataset took the rank over; read one iterator at a "
            "time"));
      }
      char error[2048];
      if (phase_ == kNotStarted || phase_ == kRestored) {
        if (phase_ == kNotStarted && !state.Plan(dataset()->epoch_, &epoch_, &step_)) {
          phase_ = kFinished;
          *end_of_sequence = true;
          return absl::OkStatus();
        }
        const int code = api->start_epoch(state.consumer(), epoch_, step_, error, sizeof error);
        if (code == static_cast<int>(absl::StatusCode::kOutOfRange)) {
          // Past a bounded job's last epoch: nothing to read with epoch=-1, an error otherwise.
          if (dataset()->epoch_ < 0 && step_ == 0) {
            phase_ = kFinished;
            *end_of_sequence = true;
            return absl::OkStatus();
          }
          return absl::InvalidArgumentError(error);  // OUT_OF_RANGE would read as the end
        }
        if (code != 0) return ApiError(code, error);
        phase_ = kReading;
      }
      CroupierBatch* raw = nullptr;
      const int code = api->next(state.consumer(), &raw, error, sizeof error);
      if (code != 0) {
        // The consumer restarts at this position on the next call.
        phase_ = kRestored;
        if (code == static_cast<int>(absl::StatusCode::kOutOfRange)) {
          return absl::InternalError(error);
        }
        return ApiError(code, error);
      }
      if (raw == nullptr) {
        phase_ = kFinished;
        ++epoch_;
        step_ = 0;
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      BatchRef* batch = new BatchRef(api, raw);
      absl::Status status = Convert(api, batch, out);
      batch->Unref();
      if (!status.ok()) {
        out->clear();
        phase_ = kRestored;  // a retry reads the same step again
        return status;
      }
      ++step_;
      return absl::OkStatus();
    }

   protected:
    std::shared_ptr<data::model::Node> CreateNode(
        data::IteratorContext* ctx, data::model::Node::Args args) const override {
      return data::model::MakeSourceNode(std::move(args));
    }

    absl::Status SaveInternal(data::SerializationContext* ctx,
                              data::IteratorStateWriter* writer) override {
      std::lock_guard<std::mutex> lock(mu_);
      TF_RETURN_IF_ERROR(writer->WriteScalar(prefix(), "phase", static_cast<int64_t>(phase_)));
      TF_RETURN_IF_ERROR(writer->WriteScalar(prefix(), "epoch", static_cast<int64_t>(epoch_)));
      TF_RETURN_IF_ERROR(writer->WriteScalar(prefix(), "step", static_cast<int64_t>(step_)));
      return absl::OkStatus();
    }

    absl::Status RestoreInternal(data::IteratorContext* ctx,
                                 data::IteratorStateReader* reader) override {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t phase = 0, epoch = 0, step = 0;
      TF_RETURN_IF_ERROR(reader->ReadScalar(prefix(), "phase", &phase));
      TF_RETURN_IF_ERROR(reader->ReadScalar(prefix(), "epoch", &epoch));
      TF_RETURN_IF_ERROR(reader->ReadScalar(prefix(), "step", &step));
      if (phase == kNotStarted) {
        phase_ = kNotStarted;
        return absl::OkStatus();
      }
      if (phase < 0 || phase > kFinished || epoch < 0 || step < 0) {
        return absl::DataLossError(absl::StrCat(
            "croupier iterator checkpoint: bad position phase ", phase, " epoch ", epoch,
            " step ", step));
      }
      epoch_ = static_cast<uint64_t>(epoch);
      step_ = static_cast<uint64_t>(step);
      phase_ = phase == kFinished ? kFinished : kRestored;
      dataset()->state_->Restored(phase == kFinished && epoch_ > 0 ? epoch_ - 1 : epoch_);
      return absl::OkStatus();
    }

   private:
    enum Phase : int64_t { kNotStarted = 0, kRestored = 1, kReading = 2, kFinished = 3 };

    // The batch's columns as the dataset's output tensors, checked against the declared types
    // and shapes.
    absl::Status Convert(const CroupierConsumerApi* api, BatchRef* batch,
                         std::vector<Tensor>* out) {
      const Dataset& d = *dataset();
      const uint64_t n = api->batch_num_records(batch->get());
      const uint32_t num_columns = api->batch_num_columns(batch->get());
      std::vector<CroupierColumn> columns(num_columns);
      for (uint32_t i = 0; i < num_columns; ++i) {
        api->batch_column(batch->get(), i, &columns[i]);
      }
      size_t output = 0;
      for (size_t f = 0; f < d.features_.size(); ++f) {
        const std::string& name = d.features_[f];
        const CroupierColumn* c = nullptr;
        for (const CroupierColumn& col : columns) {
          if (col.name_size == name.size() && std::memcmp(col.name, name.data(), name.size()) == 0) {
            c = &col;
          }
        }
        auto fail = [&](const std::string& what) {
          return absl::InvalidArgumentError(absl::StrCat(
              "croupier job '", d.state_->job(), "' epoch ", epoch_, " step ", step_,
              ": feature '", name, "' ", what));
        };
        if (c == nullptr) return fail("is not in the batch");
        const DataType want = d.types_[output];
        const DataType have = TfDataType(c->dtype);
        if (have == ::tensorflow::DT_INVALID) {
          return fail(absl::StrCat("has dtype code ", c->dtype, ", which this op does not know"));
        }
        if (want != have) {
          return fail(absl::StrCat("is ", ::tensorflow::DataTypeString(have),
                                                    ", the dataset declares ",
                                                    ::tensorflow::DataTypeString(want)));
        }
        if ((c->variable_length != 0) != d.ragged_[f]) {
          return fail(c->variable_length ? "has variable length, the dataset declares a fixed shape"
                                         : "has a fixed shape, the dataset declares ragged");
        }
        if (c->variable_length) {
          const TensorShape values_shape({static_cast<int64_t>(c->num_values)});
          out->push_back(have == ::tensorflow::DT_STRING
                             ? StringTensor(*c, values_shape)
                             : NumericTensor(batch, have, values_shape, c->values, c->values_size));
          out->push_back(NumericTensor(batch, ::tensorflow::DT_INT64,
                                       TensorShape({static_cast<int64_t>(n + 1)}), c->row_splits,
                                       (n + 1) * sizeof(uint64_t)));
          output += 2;
          continue;
        }
        TensorShape shape({static_cast<int64_t>(n)});
        for (uint32_t k = 0; k < c->rank; ++k) shape.AddDim(c->dims[k]);
        if (!d.shapes_[output].IsCompatibleWith(shape)) {
          return fail(absl::StrCat("has shape ", shape.DebugString(),
                                                    ", the dataset declares ",
                                                    d.shapes_[output].DebugString()));
        }
        if (static_cast<uint64_t>(shape.num_elements()) != c->num_values) {
          return fail("has a value count that does not match its shape");
        }
        out->push_back(have == ::tensorflow::DT_STRING
                           ? StringTensor(*c, shape)
                           : NumericTensor(batch, have, shape, c->values, c->values_size));
        output += 1;
      }
      return absl::OkStatus();
    }

    std::mutex mu_;
    int64_t generation_ = 0;
    Phase phase_ = kNotStarted;
    uint64_t epoch_ = 0;
    uint64_t step_ = 0;  // the next step to yield
  };

  const std::shared_ptr<RankState> state_;
  const int64_t state_id_;
  const std::string dispatcher_;
  const int64_t epoch_;
  const std::vector<std::string> features_;
  const std::vector<bool> ragged_;
  const DataTypeVector types_;
  const std::vector<PartialTensorShape> shapes_;
};

template <typename T>
absl::Status ScalarInput(::tensorflow::OpKernelContext* ctx, const char* name, T* value) {
  return data::ParseScalarArgument<T>(ctx, name, value);
}

void CroupierDatasetOp::MakeDataset(::tensorflow::OpKernelContext* ctx,
                                    data::DatasetBase** output) {
  ::tensorflow::tstring dispatcher, job, auth_token;
  int64_t rank = 0, world = 0, epoch = -1, prefetch_batches = 0, prefetch_bytes = 0, state_id = 0;
  double timeout = 0;
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "dispatcher", &dispatcher));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "job", &job));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "rank", &rank));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "world", &world));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "epoch", &epoch));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "auth_token", &auth_token));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "timeout_seconds", &timeout));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "prefetch_batches", &prefetch_batches));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "prefetch_bytes", &prefetch_bytes));
  bool resume = true;
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "resume", &resume));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "state_id", &state_id));
  int64_t start_epoch = -1, start_step = -1;
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "start_epoch", &start_epoch));
  OP_REQUIRES_OK(ctx, ScalarInput(ctx, "start_step", &start_step));
  OP_REQUIRES(ctx,
              (start_epoch == -1 && start_step == -1) || (start_epoch >= 0 && start_step >= 0),
              absl::InvalidArgumentError(absl::StrCat(
                  "croupier dataset: start (", start_epoch, ", ", start_step,
                  ") must be an epoch and a step, both 0 or more (or both -1: none)")));
  OP_REQUIRES(ctx, world >= 1 && rank >= 0 && rank < world && world <= UINT32_MAX,
              absl::InvalidArgumentError(absl::StrCat(
                  "croupier dataset: rank ", rank, " is not in [0, world=", world, ")")));
  OP_REQUIRES(ctx, epoch >= -1,
              absl::InvalidArgumentError(absl::StrCat(
                  "croupier dataset: epoch ", epoch, " is negative (-1: the next epoch)")));
  OP_REQUIRES(ctx, prefetch_batches >= 0 && prefetch_bytes >= 1,
              absl::InvalidArgumentError(absl::StrCat(
                  "croupier dataset: prefetch ", prefetch_batches, " batches and ", prefetch_bytes,
                  " bytes: the window must be 0 batches (automatic) or more, and 1 byte or "
                  "more")));
  const CroupierConsumerApi* api = g_api.load();
  OP_REQUIRES(ctx, api != nullptr,
              absl::FailedPreconditionError(
                  "croupier dataset: the consumer library is not set; create the dataset with "
                  "croupier.tf.dataset(), which loads it"));
  std::shared_ptr<RankState> state;
  if (state_id != 0) state = Registry::Get().Find(state_id);  // a rewrite of a live dataset
  if (state == nullptr) {
    CroupierConnectOptions options{};
    const std::string dispatcher_s(dispatcher), job_s(job), token_s(auth_token);
    options.dispatcher = dispatcher_s.c_str();
    options.job = job_s.c_str();
    options.rank = static_cast<uint32_t>(rank);
    options.world = static_cast<uint32_t>(world);
    options.auth_token = token_s.c_str();
    options.prefetch_batches = static_cast<uint32_t>(prefetch_batches);
    options.prefetch_bytes = static_cast<uint64_t>(prefetch_bytes);
    options.timeout_seconds = timeout;
    options.resume = resume ? 1 : 0;
    CroupierConsumer* consumer = nullptr;
    char error[2048];
    const int code = api->connect(&options, &consumer, error, sizeof error);
    OP_REQUIRES(ctx, code == 0, ApiError(code, error));
    const std::pair<uint64_t, uint64_t> start{static_cast<uint64_t>(start_epoch),
                                              static_cast<uint64_t>(start_step)};
    state = std::make_shared<RankState>(api, consumer, job_s, static_cast<uint32_t>(rank),
                                        static_cast<uint32_t>(world),
                                        start_epoch >= 0 ? &start : nullptr);
    state_id = Registry::Get().Add(state);
  }
  *output = new Dataset(ctx, std::move(state), state_id, std::string(dispatcher), epoch,
                        features_, ragged_, output_types_, output_shapes_);
}

REGISTER_OP("CroupierDataset")
    .Input("dispatcher: string")
    .Input("job: string")
    .Input("rank: int64")
    .Input("world: int64")
    .Input("epoch: int64")
    .Input("auth_token: string")
    .Input("timeout_seconds: float64")
    .Input("prefetch_batches: int64")
    .Input("prefetch_bytes: int64")
    .Input("resume: bool")
    .Input("state_id: int64")
    .Input("start_epoch: int64")
    .Input("start_step: int64")
    .Output("handle: variant")
    .Attr("features: list(string) >= 1")
    .Attr("ragged: list(bool) >= 1")
    .Attr("output_types: list(type) >= 1")
    .Attr("output_shapes: list(shape) >= 1")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

REGISTER_KERNEL_BUILDER(Name("CroupierDataset").Device(::tensorflow::DEVICE_CPU),
                        CroupierDatasetOp);

}  // namespace croupier_tf

// Called by croupier/tf.py with croupier._croupier's table after loading this library.
extern "C" __attribute__((visibility("default"))) int croupier_tf_set_consumer_api(
    const CroupierConsumerApi* api) {
  if (api == nullptr || api->version != CROUPIER_CONSUMER_API_VERSION ||
      api->size != sizeof(CroupierConsumerApi)) {
    return 1;
  }
  croupier_tf::g_api.store(api);
  return 0;
}
