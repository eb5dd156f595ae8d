// Shared-memory batch slots (batch_slots.h).
#include "src/producer/batch_slots.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/transport/memfd_bytes.h"

namespace croupier {
namespace {

constexpr size_t kMinSlotBytes = 1 << 20;

size_t WholePages(size_t n) {
  const size_t page = static_cast<size_t>(::getpagesize());
  return std::max(page, (n + page - 1) / page * page);
}

}  // namespace

// One memfd and the producer's read-only mapping of it.
struct BatchSlots::Slot {
  uint64_t id = 0;
  int fd = -1;
  const uint8_t* data = nullptr;
  size_t mapped = 0;

  ~Slot() {
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), mapped);
    if (fd >= 0) ::close(fd);
  }
  // Maps the first `size` bytes read-only, in place of the mapping it had.
  absl::Status Map(size_t size) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot map a batch slot of ", size, " bytes: mmap: ", std::strerror(errno)));
    }
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), mapped);
    data = static_cast<const uint8_t*>(p);
    mapped = size;
    return absl::OkStatus();
  }
};

struct BatchSlots::State {
  explicit State(size_t max_idle) : max_idle(max_idle) {}

  const size_t max_idle;
  mutable absl::Mutex mu;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Slot>> slots ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> idle ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<uint64_t> leased ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> freed ABSL_GUARDED_BY(mu);  // since the last TakeFreed
  uint64_t created ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;

  // A slot no Batch or lease holds any more: idle again, or freed (always when `retired`: a
  // client may still map it).
  void GiveBack(uint64_t id, bool retired = false) {
    std::unique_ptr<Slot> unmapped;  // outside the lock
    absl::MutexLock lock(&mu);
    auto it = slots.find(id);
    if (it == slots.end()) return;
    if (retired || closed || idle.size() >= max_idle) {
      unmapped = std::move(it->second);
      slots.erase(it);
      freed.push_back(id);
    } else {
      idle.push_back(id);
    }
  }
};

BatchSlots::BatchSlots(size_t max_idle) : state_(std::make_shared<State>(max_idle)) {}

BatchSlots::~BatchSlots() { Close(); }

absl::StatusOr<BatchSlots::Lease> BatchSlots::Acquire(size_t min_capacity) {
  State& s = *state_;
  {
    absl::MutexLock lock(&s.mu);
    if (s.closed) return absl::FailedPreconditionError("the batch slots are closed");
    if (!s.idle.empty()) {
      // The smallest idle slot that fits, else the largest (the worker grows it).
      size_t best = 0;
      for (size_t k = 1; k < s.idle.size(); ++k) {
        const size_t have = s.slots[s.idle[k]]->mapped, chosen = s.slots[s.idle[best]]->mapped;
        const bool fits = have >= min_capacity, chosen_fits = chosen >= min_capacity;
        if ((fits && (!chosen_fits || have < chosen)) || (!fits && !chosen_fits && have > chosen)) {
          best = k;
        }
      }
      const uint64_t id = s.idle[best];
      s.idle.erase(s.idle.begin() + static_cast<std::ptrdiff_t>(best));
      s.leased.insert(id);
      const Slot& slot = *s.slots[id];
      return Lease{.id = id, .fd = slot.fd, .capacity = slot.mapped, .fresh = false};
    }
  }
  const size_t capacity = WholePages(std::max(min_capacity, kMinSlotBytes));
  auto slot = std::make_unique<Slot>();
  slot->fd = ::memfd_create("croupier-batch-slot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  auto failed = [&](absl::string_view doing) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot make a batch slot of ", capacity,
                                                     " bytes: ", doing, ": ",
                                                     std::strerror(errno)));
  };
  if (slot->fd < 0) return failed("memfd_create");
  if (::ftruncate(slot->fd, static_cast<off_t>(capacity)) != 0) return failed("ftruncate");
  // Sealed against shrinking: a mapping of it can never lose its pages (SIGBUS); it may grow.
  if (::fcntl(slot->fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return failed("seal");
  if (absl::Status mapped = slot->Map(capacity); !mapped.ok()) return mapped;
  absl::MutexLock lock(&s.mu);
  if (s.closed) return absl::FailedPreconditionError("the batch slots are closed");
  ++s.created;
  const uint64_t id = NextShmSegmentId();
  slot->id = id;
  Lease lease{.id = id, .fd = slot->fd, .capacity = capacity, .fresh = true};
  s.slots.emplace(id, std::move(slot));
  s.leased.insert(id);
  return lease;
}

absl::StatusOr<Batch> BatchSlots::Adopt(uint64_t id, size_t size) {
  State& s = *state_;
  Slot* slot;
  {
    absl::MutexLock lock(&s.mu);
    if (!s.leased.erase(id)) {
      return absl::InvalidArgumentError(absl::StrCat("batch slot ", id, " is not leased"));
    }
    slot = s.slots[id].get();  // stays alive: only GiveBack frees it, and nothing else holds it
  }
  struct stat st;
  if (::fstat(slot->fd, &st) != 0 || static_cast<size_t>(st.st_size) < size) {
    s.GiveBack(id);
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch of ", size, " bytes does not fit its slot of ", st.st_size, " bytes"));
  }
  if (static_cast<size_t>(st.st_size) > slot->mapped) {  // the worker grew it
    if (absl::Status mapped = slot->Map(static_cast<size_t>(st.st_size)); !mapped.ok()) {
      s.GiveBack(id);
      return mapped;
    }
  }
  // The deleter tells a same-host data server that it may pass the memfd on as it is.
  MemfdBytes backing{.segment_id = id,
                     .fd = slot->fd,
                     .give_back = [state = state_, id](bool retired) {
                       state->GiveBack(id, retired);
                     }};
  std::shared_ptr<const uint8_t> bytes(slot->data, std::move(backing));
  absl::StatusOr<Batch> batch = Batch::FromBuffer(std::move(bytes), size);
  if (!batch.ok()) {  // the slot went back idle with `bytes`
    return absl::DataLossError(
        absl::StrCat("a worker's batch is inconsistent: ", batch.status().message()));
  }
  return batch;
}

void BatchSlots::Release(uint64_t id) {
  {
    absl::MutexLock lock(&state_->mu);
    if (!state_->leased.erase(id)) return;
  }
  state_->GiveBack(id);
}

void BatchSlots::Close() {
  std::vector<std::unique_ptr<Slot>> unmapped;  // outside the lock
  absl::MutexLock lock(&state_->mu);
  state_->closed = true;
  for (uint64_t id : state_->idle) {
    auto it = state_->slots.find(id);
    unmapped.push_back(std::move(it->second));
    state_->slots.erase(it);
    state_->freed.push_back(id);
  }
  state_->idle.clear();
}

std::vector<uint64_t> BatchSlots::TakeFreed() {
  absl::MutexLock lock(&state_->mu);
  return std::exchange(state_->freed, {});
}

BatchSlots::Stats BatchSlots::stats() const {
  absl::MutexLock lock(&state_->mu);
  Stats out;
  out.slots = state_->slots.size();
  out.idle = state_->idle.size();
  for (const auto& [id, slot] : state_->slots) out.bytes += slot->mapped;
  out.created = state_->created;
  return out;
}

}  // namespace croupier
