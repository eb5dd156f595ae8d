// What a consumer knows of the producers: which one holds which task (from the dispatcher's
// Locate), and one data client per producer address.
#ifndef CROUPIER_SRC_CONSUMER_PEERS_H_
#define CROUPIER_SRC_CONSUMER_PEERS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/croupier.pb.h"
#include "src/control/control_plane.h"
#include "src/transport/shm_transport.h"
#include "src/transport/transport.h"

namespace croupier {

// Thread-safe.
class Peers {
 public:
  Peers(ControlPlane* dispatcher, std::string job, DataClientOptions client_options,
        ShmMode shm = ShmMode::kAuto)
      : dispatcher_(dispatcher),
        job_(std::move(job)),
        client_options_(std::move(client_options)),
        shm_(shm) {}
  ~Peers();

  // The address of the producer holding global batch `batch` of `epoch`, from the cache unless
  // `refresh`. UNAVAILABLE when the batch's task is not assigned yet. Asking the dispatcher says
  // this consumer needs the batch: a finished task of it is made again (remake_if_finished).
  absl::StatusOr<std::string> Locate(uint64_t epoch, uint64_t batch, bool refresh);
  // The cached address of the producer holding `batch`, without asking the dispatcher; empty
  // when none is cached.
  std::string Cached(uint64_t epoch, uint64_t batch);
  // first_come: the addresses holding tasks of `epoch`, and whether the epoch is finished.
  absl::StatusOr<std::pair<std::vector<std::string>, bool>> LocateEpoch(uint64_t epoch,
                                                                       uint64_t num_batches);
  // A connected client for `address`, made on first use: through shared memory when the producer
  // offers it on this host (ShmAddressFor) and the mode allows, else TCP.
  absl::StatusOr<DataClient*> Client(const std::string& address);
  // Drops the client of `address` (after it failed), so the next use reconnects.
  void Forget(const std::string& address);
  // Cancels every client: blocked fetches return CANCELLED.
  void CancelAll();

 private:
  struct Range {
    uint64_t end = 0;
    std::string address;
  };
  ControlPlane* const dispatcher_;
  const std::string job_;
  const DataClientOptions client_options_;
  const ShmMode shm_;

  absl::Mutex mu_;
  // epoch -> (first batch of a task -> its end and owner)
  absl::flat_hash_map<uint64_t, std::map<uint64_t, Range>> tasks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<DataClient>> clients_ ABSL_GUARDED_BY(mu_);
  // Clients kept alive after Forget until destruction: a fetch may still be using one.
  std::vector<std::shared_ptr<DataClient>> retired_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace croupier

#endif  // CROUPIER_SRC_CONSUMER_PEERS_H_
