#include "src/consumer/peers.h"

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"

namespace croupier {

Peers::~Peers() { CancelAll(); }

std::string Peers::Cached(uint64_t epoch, uint64_t batch) {
  absl::MutexLock lock(&mu_);
  auto found = tasks_.find(epoch);
  if (found == tasks_.end()) return "";
  auto it = found->second.upper_bound(batch);
  if (it == found->second.begin()) return "";
  --it;
  return batch < it->second.end ? it->second.address : "";
}

absl::StatusOr<std::string> Peers::Locate(uint64_t epoch, uint64_t batch, bool refresh) {
  if (!refresh) {
    std::string cached = Cached(epoch, batch);
    if (!cached.empty()) return cached;
  }
  v1::LocateRequest request;
  request.set_job(job_);
  request.set_epoch(epoch);
  request.set_first_batch(batch);
  request.set_num_batches(1);
  // This consumer needs the batch: if its task is finished, no producer has it any more, and it
  // must be made again (a batch served before this consumer went back, or to another client).
  request.set_remake_if_finished(true);
  ASSIGN_OR_RETURN(v1::LocateResponse response, dispatcher_->Locate(request));
  std::string address;
  std::string why;
  absl::MutexLock lock(&mu_);
  auto& ranges = tasks_[epoch];
  for (const auto& t : response.tasks()) {
    const uint64_t first = t.task().first_batch(), end = first + t.task().num_batches();
    ranges[first] = Range{end, t.producer_address()};
    if (first <= batch && batch < end) {
      address = t.producer_address();
      why = t.waiting_for();
    }
  }
  if (address.empty()) {
    return absl::UnavailableError(absl::StrCat("batch ", batch, " of job '", job_, "' epoch ",
                                               epoch, " is not assigned to a producer yet",
                                               why.empty() ? "" : absl::StrCat(": ", why)));
  }
  return address;
}

absl::StatusOr<std::pair<std::vector<std::string>, bool>> Peers::LocateEpoch(
    uint64_t epoch, uint64_t num_batches) {
  v1::LocateRequest request;
  request.set_job(job_);
  request.set_epoch(epoch);
  request.set_first_batch(0);
  request.set_num_batches(num_batches);
  ASSIGN_OR_RETURN(v1::LocateResponse response, dispatcher_->Locate(request));
  std::vector<std::string> addresses;
  for (const auto& t : response.tasks()) {
    const std::string& a = t.producer_address();
    if (!a.empty() && std::find(addresses.begin(), addresses.end(), a) == addresses.end()) {
      addresses.push_back(a);
    }
  }
  return std::make_pair(std::move(addresses), response.epoch_finished());
}

absl::StatusOr<DataClient*> Peers::Client(const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("the consumer is closed");
    auto it = clients_.find(address);
    if (it != clients_.end()) return it->second.get();
  }
  // Connect outside the lock: it may take up to the connect timeout.
  absl::StatusOr<std::unique_ptr<DataClient>> connected =
      absl::UnavailableError("shared memory is off");
  if (shm_ != ShmMode::kOff) {
    // A producer on another host (or network namespace) has no such name here: refused at once.
    connected = Transport::Shm()->Connect(ShmAddressFor(address), client_options_);
    if (!connected.ok() && shm_ == ShmMode::kOn) {
      return absl::Status(connected.status().code(),
                          absl::StrCat("shared memory is required (CROUPIER_SHM=on) for producer ",
                                       address, ": ", connected.status().message()));
    }
    // Something listens on the producer's shared-memory name and cannot prove the token: another
    // process took the name (the producer then serves over TCP only), or a producer of another
    // cluster. Say so, and use TCP, where the producer proves itself in its turn.
    if (absl::IsUnauthenticated(connected.status())) {
      Log(LogLevel::kWarning, "consumer",
          absl::StrCat("not using shared memory for producer ", address, ": ",
                       connected.status().message(), "; using TCP"));
    }
  }
  if (!connected.ok()) connected = Transport::Tcp()->Connect(address, client_options_);
  ASSIGN_OR_RETURN(std::unique_ptr<DataClient> client, std::move(connected));
  absl::MutexLock lock(&mu_);
  if (cancelled_) {
    client->Cancel();
    return absl::CancelledError("the consumer is closed");
  }
  auto [it, inserted] = clients_.emplace(address, std::move(client));
  return it->second.get();
}

void Peers::Forget(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(address);
  if (it == clients_.end()) return;
  it->second->Retire();  // its connections would otherwise hold the producer's slots
  retired_.push_back(std::move(it->second));
  clients_.erase(it);
  for (auto& [epoch, ranges] : tasks_) {
    for (auto& [first, range] : ranges) {
      if (range.address == address) range.address.clear();
    }
  }
}

void Peers::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (auto& [address, client] : clients_) client->Cancel();
  for (auto& client : retired_) client->Cancel();
}

}  // namespace croupier
