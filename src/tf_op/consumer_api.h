/* A C interface to croupier's consumer, for the TensorFlow dataset op (src/tf_op/dataset_op.cc).
 *
 * The op is compiled with TensorFlow's headers, which bring their own absl and protobuf; croupier
 * is built with the system's. The two never meet in one translation unit: this header is plain C,
 * its implementation (consumer_api.cc) is compiled into croupier's Python module
 * croupier._croupier with the project's flags, and the op reaches it through one table of function
 * pointers that croupier/tf.py hands over after loading both. So one process has one copy of the
 * consumer library and of its generated protobuf code, whichever of the two is used.
 *
 * Every function that can fail returns a status code (absl's canonical codes, which are
 * TensorFlow's error codes too: 0 is OK) and writes the message, NUL-terminated and cut to fit,
 * into `error` (of `error_size` bytes). */
#ifndef CROUPIER_SRC_TF_OP_CONSUMER_API_H_
#define CROUPIER_SRC_TF_OP_CONSUMER_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: CroupierColumn.dtype may be any CROUPIER_DTYPE_* (version 1 had bytes, float32, int64). */
#define CROUPIER_CONSUMER_API_VERSION 2

/* The dtype codes of a column: croupier::DType (include/croupier/dtype.h), the batch layout's. */
#define CROUPIER_DTYPE_BYTES 0
#define CROUPIER_DTYPE_FLOAT32 1
#define CROUPIER_DTYPE_INT64 2
#define CROUPIER_DTYPE_BOOL 3 /* one byte, 0 or 1 */
#define CROUPIER_DTYPE_INT8 4
#define CROUPIER_DTYPE_INT16 5
#define CROUPIER_DTYPE_INT32 6
#define CROUPIER_DTYPE_UINT8 7
#define CROUPIER_DTYPE_UINT16 8
#define CROUPIER_DTYPE_UINT32 9
#define CROUPIER_DTYPE_UINT64 10
#define CROUPIER_DTYPE_FLOAT16 11
#define CROUPIER_DTYPE_BFLOAT16 12 /* the upper 16 bits of a float32 */
#define CROUPIER_DTYPE_FLOAT64 13

typedef struct CroupierConsumer CroupierConsumer; /* one rank of a job, connected */
typedef struct CroupierBatch CroupierBatch;       /* one received batch; released by the caller */

typedef struct {
  const char* dispatcher; /* host:port */
  const char* job;
  uint32_t rank;
  uint32_t world;
  const char* auth_token; /* "" or NULL: $CROUPIER_AUTH_TOKEN, else none */
  uint32_t prefetch_batches;
  uint64_t prefetch_bytes;
  double timeout_seconds;
  int resume; /* nonzero: register at the rank's last acknowledged position */
} CroupierConnectOptions;

typedef struct {
  uint64_t num_consumers;
  uint64_t batch_size;
  uint64_t num_records;
  uint64_t num_epochs;      /* 0: unbounded */
  uint64_t steps_per_epoch; /* dealt mode */
  int dealt;                /* 1: dealt, 0: first_come */
} CroupierJobInfo;

/* One column of a batch. Every pointer points into the batch and lives as long as it. */
typedef struct {
  const char* name; /* not NUL-terminated */
  size_t name_size;
  int dtype;           /* a CROUPIER_DTYPE_* code */
  int variable_length; /* nonzero: values + row_splits */
  uint32_t rank;       /* dims of the per-record shape (fixed-shape columns) */
  const int64_t* dims;
  uint64_t num_values; /* numbers, or byte strings */
  const void* values;  /* numbers [num_records, *dims] or flat, 64-byte aligned; bytes: the strings
                          concatenated */
  uint64_t values_size;
  const uint64_t* offsets;    /* bytes: num_values + 1 entries, else NULL */
  const uint64_t* row_splits; /* variable length: num_records + 1 entries, else NULL */
} CroupierColumn;

typedef struct {
  uint32_t version; /* CROUPIER_CONSUMER_API_VERSION */
  uint32_t size;    /* sizeof(CroupierConsumerApi) */

  int (*connect)(const CroupierConnectOptions* options, CroupierConsumer** out, char* error,
                 size_t error_size);
  /* The job's feature spec text and summary; valid until close. */
  const char* (*features)(const CroupierConsumer* consumer);
  void (*job_info)(const CroupierConsumer* consumer, CroupierJobInfo* out);
  void (*registered_position)(const CroupierConsumer* consumer, uint64_t* epoch, uint64_t* step);
  int (*start_epoch)(CroupierConsumer* consumer, uint64_t epoch, uint64_t step, char* error,
                     size_t error_size);
  /* *out is the next batch, or NULL at the end of the epoch. */
  int (*next)(CroupierConsumer* consumer, CroupierBatch** out, char* error, size_t error_size);
  void (*position)(const CroupierConsumer* consumer, uint64_t* epoch, uint64_t* step);
  /* Wakes a blocked next (which then fails with CANCELLED) and frees the rank; thread-safe. */
  void (*close)(CroupierConsumer* consumer);
  /* Closes (if not yet) and frees the consumer. */
  void (*destroy)(CroupierConsumer* consumer);

  uint64_t (*batch_num_records)(const CroupierBatch* batch);
  uint32_t (*batch_num_columns)(const CroupierBatch* batch);
  void (*batch_column)(const CroupierBatch* batch, uint32_t index, CroupierColumn* out);
  uint64_t (*batch_content_hash)(const CroupierBatch* batch);
  void (*batch_release)(CroupierBatch* batch);
} CroupierConsumerApi;

/* The table; exported by croupier._croupier. */
const CroupierConsumerApi* croupier_consumer_api(void);

#ifdef __cplusplus
}
#endif

#endif /* CROUPIER_SRC_TF_OP_CONSUMER_API_H_ */
