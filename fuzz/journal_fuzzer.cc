// Fuzz target: the dispatcher's journal reader (ReadJournal in src/dispatcher/journal.h) and,
// behind it, DispatcherState::Apply on every update it yields: after a crash, the dispatcher
// replays whatever its work directory holds.
//
// Input: the bytes of a journal file. Properties checked: errors are DATA_LOSS or
// FAILED_PRECONDITION (another version); a replay's valid_bytes lies within the file, a torn
// tail has a reason, and the entries it applied are exactly the ones before valid_bytes.
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "fuzz/fuzz_util.h"
#include "src/common/env.h"
#include "src/dispatcher/dispatcher_state.h"
#include "src/dispatcher/journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace croupier;
  absl::string_view file(reinterpret_cast<const char*>(data), size);
  const std::string& path = fuzz::WriteScratchFile(file);
  DispatcherState state;
  uint64_t applied = 0;
  uint64_t last_offset = 0;
  auto replay =
      ReadJournal(*Env::Default(), path, [&](const journal::Update& update, uint64_t offset) {
        FUZZ_CHECK(offset >= kJournalHeaderBytes && offset < size, "entry offsets lie in the file");
        FUZZ_CHECK(applied == 0 || offset > last_offset, "in order");
        last_offset = offset;
        ++applied;
        return state.Apply(update);
      });
  if (!replay.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(replay.status()) || absl::IsFailedPrecondition(replay.status()),
               "journal errors are DATA_LOSS or FAILED_PRECONDITION");
    return 0;
  }
  FUZZ_CHECK(replay->file_bytes == size, "file_bytes");
  FUZZ_CHECK(replay->valid_bytes <= size, "valid_bytes within the file");
  FUZZ_CHECK(replay->entries == applied, "entries counted");
  FUZZ_CHECK((replay->valid_bytes == size) == replay->torn.empty(), "a torn tail has a reason");
  FUZZ_CHECK(applied == 0 || last_offset < replay->valid_bytes, "applied entries are valid bytes");
  return 0;
}
