// A running producer: a TaskHolder that holds its tasks, a data server that serves them, and the
// heartbeat loop that reports to the dispatcher and takes new work. `croupier producer` is this
// class and a signal handler.
//
// What it makes batches from is its owner's explicit choice, a ProducerSupply, and the node builds
// the matching TaskHolder (src/producer/task_holder.h):
//   TfrecordSupply  every job read from files by any producer: a TaskRunner with TFRecord makers
//                   reading through the node's index and record caches, and token makers
//                   (TokenBatchMaker) for tokens jobs (`croupier producer`);
//   RecordsSupply   one map job, whose batches a records function makes (a Python source's
//                   workers, croupier.produce): a TaskRunner with a FunctionBatchMaker;
//   StreamSupply    one source of one python job (croupier.serve): a SequentialSource fed batch
//                   by batch, in the order the tasks ask for, by the supply's feed function
//                   (Serve() calls it) or by the owner itself (sequential());
//   TokensSupply    one tokens job with text sources, whose documents a tokenizer function
//                   makes (croupier.tokens.produce): a TaskRunner with a TokenBatchMaker given it.
#ifndef CROUPIER_SRC_NODE_PRODUCER_NODE_H_
#define CROUPIER_SRC_NODE_PRODUCER_NODE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "croupier/record_index.h"
#include "src/control/control_plane.h"
#include "src/io/record_fetch.h"
#include "src/node/metrics_server.h"
#include "src/producer/function_maker.h"
#include "src/producer/record_cache.h"
#include "src/producer/sequential_source.h"
#include "src/producer/task_runner.h"
#include "src/producer/text_tokens.h"
#include "src/transport/transport.h"

namespace croupier {

// The supplies a producer takes (see the top of this file).
struct TfrecordSupply {};
struct RecordsSupply {
  std::string job;       // the map job this producer serves, and no other
  RecordsFunction make;  // makes each batch from the plan's record ids; called on many threads
};
// A stream's next batch: batch `batch` (the job's numbering) of `epoch`, or the error every rank
// that asks for it gets. OUT_OF_RANGE says the source ran out before it (Serve()).
using BatchFeed = std::function<absl::StatusOr<Batch>(uint64_t epoch, uint64_t batch)>;
struct StreamSupply {
  std::string job;            // the python job this producer serves, and no other
  uint32_t source_index = 0;  // which of the job's sources (JobSpec.source_count)
  // Called by Serve() on its own thread, one batch at a time; unset: the owner feeds
  // sequential() itself.
  BatchFeed feed;
};
struct TokensSupply {
  std::string job;             // the tokens job this producer serves, and no other
  DocumentTokenizer tokenize;  // tokenizes its text sources' documents; called on many threads
};
using ProducerSupply = std::variant<TfrecordSupply, RecordsSupply, StreamSupply, TokensSupply>;

struct ProducerNodeOptions {
  // What the batches are made from. A stream's buffer is runner.buffer_bytes and it holds up to
  // runner.max_tasks tasks.
  ProducerSupply supply = TfrecordSupply{};
  std::string dispatcher;  // host:port
  // Where the control plane comes from: unset, a gRPC client of `dispatcher` (with auth_token,
  // tls and connect_timeout); set, whatever it makes (an in-process dispatcher's client, for the
  // in-process test cluster; `dispatcher` is then only a name for messages).
  std::function<std::unique_ptr<ControlPlane>()> control_plane;
  std::string bind_address = "127.0.0.1";
  int port = 0;  // the data server's port; 0: any free port
  // The host consumers reach this producer at; empty: the bind address (or the host name when
  // binding to every interface).
  std::string advertise_host;
  std::string auth_token;
  // TLS for the data port and the dispatcher connection (src/net/tls_config.h); none given:
  // $CROUPIER_TLS_CERT/_KEY/_CA, else plaintext.
  TlsConfig tls;
  // The data server's connection limits (DataServerOptions).
  size_t max_connections = 256;
  size_t max_connections_per_peer = 128;
  // The worker threads, buffer and task slots. runner.makers is the node's: set from `supply`.
  TaskRunner::Options runner;
  // The record cache (tf.data's cache(); it keeps serialized records, which are decoded again):
  // 0 bytes disables it; an empty dir keeps it in memory.
  uint64_t cache_bytes = 0;
  std::string cache_dir;
  bool cache_keep = false;      // RecordCache::Options::keep
  std::string index_cache_dir;  // empty: IndexCache::DefaultDir()
  // The bytes of records fetched ahead of use from an object store and not yet made into
  // batches, for all jobs together (TfrecordBatchMaker); unset: $CROUPIER_S3_PREFETCH_BYTES,
  // else TfrecordBatchMaker::kFetchAheadBytes (64 MiB).
  std::optional<uint64_t> prefetch_bytes;
  // For tests: a random delay of up to this much before each batch is served.
  absl::Duration test_max_delay = absl::ZeroDuration();
  // How long the producer keeps retrying an unreachable dispatcher at start before giving up.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Prometheus metrics of this producer (GET /metrics: metrics::FormatProducerPrometheus) on
  // bind_address:metrics_port; 0: any free port; -1: none.
  int metrics_port = -1;
  // Also serve consumers on this host through shared memory (shm_transport.h), on the abstract
  // socket ShmAddressFor(data_address()). Unset: yes, unless TLS is configured (the shared-memory
  // path is not encrypted and checks only the token), so that TLS covers every batch by default.
  std::optional<bool> shm;
};

// Whether a job has ended, from the dispatcher's answer to GetJob about it: NOT_FOUND (deleted:
// nobody can read it any more), or a bounded job (num_epochs > 0) of which every rank
// (num_consumers of them) has acknowledged step steps_per_epoch of its last epoch. Not the job's
// state "done" alone: that is also every task served, while a restarted rank may still need a
// batch made again. Other errors: not ended (the dispatcher may be restarting).
bool JobHasEnded(const absl::StatusOr<v1::GetJobResponse>& answer);

// What the owner of a producer that serves one job says while it serves (ServeOptions::owner).
enum class OwnerSays {
  kServe,  // go on
  kDrain,  // stop and leave gracefully (Drain): a first signal, a stop event
  kLeave,  // leave at once (the owner's process is exiting)
};

// How Serve() runs. Every function is called on Serve's thread.
struct ServeOptions {
  // Asked every `poll`; unset: serve until the job ends. An owner whose supply can make no batch
  // any more (a worker pool that can no longer replace its workers) says kLeave, and says why
  // itself.
  std::function<OwnerSays()> owner;
  // Serving ends with UNAVAILABLE, naming the dispatcher, once it has not answered this long.
  absl::Duration dispatcher_timeout = absl::Seconds(120);
  // The bound of the drain that kDrain starts (Drain).
  absl::Duration drain_timeout = absl::Seconds(5);
  // Asked every 10 ms while it drains: true ends the drain at once (a second signal).
  std::function<bool()> leave_now;
  // A stream whose feed said OUT_OF_RANGE (its source ran out early) serves that error to the
  // ranks that ask for the missing batches for this long, then Serve() returns it.
  absl::Duration early_end_grace = absl::Seconds(10);
  absl::Duration poll = absl::Milliseconds(100);
};

// What Serve() ended with.
struct Served {
  bool job_ended = false;  // every rank read the job's last epoch, or it was deleted
  bool drained = false;    // the owner said kDrain: `kept` and `served` are the drain's
  size_t kept = 0;
  size_t served = 0;
  uint64_t batches_served = 0;  // by this producer, over its life
};

// Thread-safe.
class ProducerNode {
 public:
  // Starts the data server and registers with the dispatcher. INVALID_ARGUMENT for a records or
  // stream supply without a job, or a records supply without a function. DEADLINE_EXCEEDED naming
  // the dispatcher's address if it cannot be reached within connect_timeout; UNAUTHENTICATED or
  // FAILED_PRECONDITION as the dispatcher answers.
  static absl::StatusOr<std::unique_ptr<ProducerNode>> Start(ProducerNodeOptions options);
  ~ProducerNode();  // Shutdown()

  const std::string& data_address() const { return data_address_; }
  uint64_t producer_id() const;
  // How long since the dispatcher last answered a heartbeat (registration counts): a process
  // embedding the producer (croupier.serve, croupier.produce) gives up once that is too long.
  absl::Duration SinceDispatcherContact() const;
  // The metrics server's port, or 0 without one.
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  // Whether the job this producer serves (a records or stream supply's) has ended: every rank has
  // acknowledged the end of its last epoch (a bounded job), or the job was deleted. The heartbeat
  // thread learns it by asking the dispatcher about this job alone (GetJob) after a heartbeat, once
  // an interval; the producer keeps serving (a restarted rank may still need a batch made again)
  // until its owner stops it. Always false for a producer of every job (TfrecordSupply) and for an
  // unbounded job (num_epochs 0).
  bool job_ended() const { return job_ended_.HasBeenNotified(); }
  // Waits until job_ended() or `timeout`; returns job_ended(). What an embedding process waits on
  // instead of polling the dispatcher itself.
  bool WaitForJobEnd(absl::Duration timeout) const {
    return job_ended_.WaitForNotificationWithTimeout(timeout);
  }
  // The holder a stream supply's owner feeds; nullptr for the other supplies.
  SequentialSource* sequential() const { return sequential_; }
  // Stops the heartbeats, the workers and the server promptly, without a word to the dispatcher
  // (as a crash would: it reassigns the tasks once the producer timeout passes). Idempotent.
  void Shutdown();
  // Leaves the cluster: stops the heartbeats, tells the dispatcher (a heartbeat with `leaving`,
  // within `timeout`), which reassigns this producer's unfinished tasks to the others at once, then
  // Shutdown(). A dispatcher that cannot be reached within `timeout` only delays the reassignment
  // to the producer timeout. What SIGTERM does to `croupier producer`. Idempotent.
  void Leave(absl::Duration timeout = absl::Seconds(1));
  // Leaves gracefully: takes no more work and tells the dispatcher at once (a heartbeat with
  // `draining` and the tasks whose every batch is made, ProducerHeartbeatRequest). The dispatcher
  // keeps those tasks with this producer and hands its other tasks to the other producers now;
  // this producer serves what it kept to the ranks that ask for it, reporting each task finished
  // as before (a heartbeat every 100 ms), until it holds no task, `bound` passes, or
  // `leave_now` (if given) is notified (a second signal). Then Leave(): what it still holds goes
  // to the others. If a heartbeat fails meanwhile (the dispatcher is gone or unreachable), it
  // stops at once without calling the dispatcher again (Shutdown): its tasks are reassigned at
  // its expiry. With a stream supply, or a bound of zero, it is Leave() alone. Keep `bound` below
  // the grace its supervisor gives between SIGTERM and SIGKILL. Returns how many tasks it kept
  // and how many of those it finished serving. What SIGTERM does to `croupier producer`
  // (--drain-timeout-ms). Call it once, instead of Leave().
  struct Drained {
    size_t kept = 0;
    size_t served = 0;
  };
  Drained Drain(absl::Duration bound, const std::function<bool()>& leave_now = nullptr);

  // The life of a producer of one job (a records, tokens or stream supply's) once it has
  // started, what croupier.produce(), croupier.serve() and croupier.tokens.produce() run in
  // (producer_serve.cc). It feeds a stream supply's slots from its feed function, and serves
  // until:
  //   - the job ends (job_ended()): OK, job_ended;
  //   - the owner says kDrain (Drain, then it has left: OK, drained) or kLeave (OK);
  //   - the dispatcher is silent for dispatcher_timeout: UNAVAILABLE naming it;
  //   - another thread leaves or shuts the node down: OK, neither ended nor drained.
  // It has left the job when it returns, whatever it returns: gracefully (Leave), or without a
  // word when the dispatcher is silent (Shutdown). A stream's feed errors go to the ranks that
  // ask for those batches; one whose source ran out early (OUT_OF_RANGE) is also returned,
  // early_end_grace later or at the job's end. FAILED_PRECONDITION for a producer of every job
  // (TfrecordSupply), which has no job of its own to end. Call it once, from one thread.
  absl::StatusOr<Served> Serve(const ServeOptions& options);

 private:
  class DelayingSource;
  ProducerNode() = default;
  // One heartbeat. With `wait_for_work`, asks the dispatcher to hold the answer until it has work
  // for this producer, up to one interval (ProducerHeartbeatRequest.wait_for_work_ms).
  absl::Status Heartbeat(bool wait_for_work = false);
  void HeartbeatLoop();
  // The maker of a job read from files by any producer: a tokens job's TokenBatchMaker, or a
  // TFRecord job's maker through the node's caches.
  absl::StatusOr<std::shared_ptr<const BatchMaker>> FilesMaker(const v1::JobInfo& job);
  v1::ProducerStats Stats() const;
  void AddTask(const v1::Task& task);
  // A control plane to the dispatcher whose calls give up after `timeout`.
  std::unique_ptr<ControlPlane> MakeControlPlane(absl::Duration timeout) const;
  // Asks the dispatcher whether source_job_ has ended (JobHasEnded); notifies job_ended_ if so.
  void CheckJobEnded();
  // Stops the heartbeat thread (cancelling a heartbeat the dispatcher holds). Idempotent.
  void StopHeartbeats();

  ProducerNodeOptions options_;
  // The job a records or stream supply serves (empty: every TFRecord job), and its source index.
  std::string source_job_;
  uint32_t source_index_ = 0;
  std::unique_ptr<ControlPlane> dispatcher_;
  std::unique_ptr<IndexCache> index_cache_;
  std::unique_ptr<RecordCache> record_cache_;
  // The bound on what every job's maker fetches ahead (prefetch_bytes).
  std::shared_ptr<FetchBudget> fetch_budget_;
  std::unique_ptr<TaskHolder> holder_;
  SequentialSource* sequential_ = nullptr;  // holder_, when it is one
  std::unique_ptr<BatchSource> source_;     // holder_ behind test delays
  std::unique_ptr<DataServer> server_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<DataServer> shm_server_;  // null when shared memory is off or unavailable
  std::string data_address_;

  mutable absl::Mutex mu_;
  uint64_t producer_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_contact_ ABSL_GUARDED_BY(mu_) = absl::Now();
  // Only the heartbeat thread touches these.
  std::vector<uint64_t> unreported_finished_;
  absl::flat_hash_map<std::string, v1::JobInfo> jobs_;  // the jobs of the tasks given
  absl::Duration interval_ = absl::Seconds(1);
  bool work_available_ = true;
  // The dispatcher holds heartbeats that ask to wait for work (false for an older one).
  bool dispatcher_waits_ = true;
  bool last_heartbeat_ok_ = true;
  // Set by Drain: every heartbeat says the producer drains, asks for no work and names the tasks
  // it has made; beat_now_ asks the heartbeat thread for a heartbeat at once.
  std::atomic<bool> draining_{false};
  std::atomic<bool> beat_now_{false};
  // The heartbeat thread's first heartbeat that said the producer drains got an answer; a
  // heartbeat failed while draining (the dispatcher is gone: nobody can be sent here any more).
  absl::Notification drain_told_;
  std::atomic<bool> drain_failed_{false};

  absl::Notification stop_;
  absl::Notification job_ended_;
  absl::Time last_end_check_ = absl::InfinitePast();  // heartbeat thread only
  std::thread heartbeat_;
  std::once_flag shutdown_once_;
  std::once_flag leave_once_;
  std::once_flag stop_heartbeats_once_;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_NODE_PRODUCER_NODE_H_
