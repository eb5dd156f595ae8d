// Tensors over a received batch: numeric ones point into its buffer (no copy) and keep it alive;
// byte strings are copied. TensorFlow's headers only, like the op (src/tf_op/dataset_op.cc).
#ifndef CROUPIER_SRC_TF_OP_BATCH_TENSORS_H_
#define CROUPIER_SRC_TF_OP_BATCH_TENSORS_H_

#include <cstdint>
#include <cstring>

#include "src/tf_op/consumer_api.h"
#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/framework/tensor.h"

namespace croupier_tf {

// A received batch, released when the last tensor pointing into it goes. Thread-safe (a
// reference count).
class BatchRef : public ::tensorflow::core::RefCounted {
 public:
  BatchRef(const CroupierConsumerApi* api, CroupierBatch* batch) : api_(api), batch_(batch) {}
  ~BatchRef() override { api_->batch_release(batch_); }
  CroupierBatch* get() const { return batch_; }

 private:
  const CroupierConsumerApi* api_;
  CroupierBatch* batch_;
};

// The TensorFlow dtype of a column's CROUPIER_DTYPE_* code; DT_INVALID for a code it does not
// know. Each has the same element size and bytes: TensorFlow's bool is one byte, 0 or 1, and its
// bfloat16 the upper 16 bits of a float32.
inline ::tensorflow::DataType TfDataType(int dtype) {
  switch (dtype) {
    case CROUPIER_DTYPE_BYTES:
      return ::tensorflow::DT_STRING;
    case CROUPIER_DTYPE_FLOAT32:
      return ::tensorflow::DT_FLOAT;
    case CROUPIER_DTYPE_INT64:
      return ::tensorflow::DT_INT64;
    case CROUPIER_DTYPE_BOOL:
      return ::tensorflow::DT_BOOL;
    case CROUPIER_DTYPE_INT8:
      return ::tensorflow::DT_INT8;
    case CROUPIER_DTYPE_INT16:
      return ::tensorflow::DT_INT16;
    case CROUPIER_DTYPE_INT32:
      return ::tensorflow::DT_INT32;
    case CROUPIER_DTYPE_UINT8:
      return ::tensorflow::DT_UINT8;
    case CROUPIER_DTYPE_UINT16:
      return ::tensorflow::DT_UINT16;
    case CROUPIER_DTYPE_UINT32:
      return ::tensorflow::DT_UINT32;
    case CROUPIER_DTYPE_UINT64:
      return ::tensorflow::DT_UINT64;
    case CROUPIER_DTYPE_FLOAT16:
      return ::tensorflow::DT_HALF;
    case CROUPIER_DTYPE_BFLOAT16:
      return ::tensorflow::DT_BFLOAT16;
    case CROUPIER_DTYPE_FLOAT64:
      return ::tensorflow::DT_DOUBLE;
    default:
      return ::tensorflow::DT_INVALID;
  }
}

// A tensor's memory inside a batch buffer (64-byte aligned, as TensorFlow wants). Thread-safe:
// immutable.
class ColumnBuffer : public ::tensorflow::TensorBuffer {
 public:
  ColumnBuffer(BatchRef* batch, const void* data, size_t size)
      : TensorBuffer(const_cast<void*>(data)), batch_(batch), size_(size) {
    batch_->Ref();
  }
  ~ColumnBuffer() override { batch_->Unref(); }
  size_t size() const override { return size_; }
  TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(::tensorflow::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(size_));
    proto->set_allocator_name("croupier_batch");
  }
  bool OwnsMemory() const override { return false; }  // never written in place

 private:
  BatchRef* batch_;
  size_t size_;
};

// A tensor of `dtype` and `shape` over `size` bytes at `data` in the batch; a copy when the data
// is not aligned for TensorFlow (it always is in a valid batch) or empty.
inline ::tensorflow::Tensor NumericTensor(BatchRef* batch, ::tensorflow::DataType dtype,
                                          const ::tensorflow::TensorShape& shape,
                                          const void* data, size_t size) {
  if (size == 0 || reinterpret_cast<uintptr_t>(data) % 64 != 0) {
    ::tensorflow::Tensor t(dtype, shape);
    if (size > 0) std::memcpy(const_cast<char*>(t.tensor_data().data()), data, size);
    return t;
  }
  ColumnBuffer* buffer = new ColumnBuffer(batch, data, size);
  ::tensorflow::Tensor t(dtype, shape, buffer);
  buffer->Unref();  // the tensor holds its own reference
  return t;
}

inline ::tensorflow::Tensor StringTensor(const CroupierColumn& c,
                                         const ::tensorflow::TensorShape& shape) {
  ::tensorflow::Tensor t(::tensorflow::DT_STRING, shape);
  auto flat = t.flat<::tensorflow::tstring>();
  const char* values = static_cast<const char*>(c.values);
  for (uint64_t i = 0; i < c.num_values; ++i) {
    flat(i).assign(values + c.offsets[i], c.offsets[i + 1] - c.offsets[i]);
  }
  return t;
}

}  // namespace croupier_tf

#endif  // CROUPIER_SRC_TF_OP_BATCH_TENSORS_H_
