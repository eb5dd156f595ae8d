// Fuzz target: the scan of a kept record cache's shard file (record_cache_file::Scan,
// src/producer/record_cache_file.h), which a producer runs on the files the last producer left in
// --cache-dir with --cache-keep. They are on a local disk, but a producer killed while writing
// leaves a frame cut short, and a disk or another process can damage any byte.
//
// Input: the bytes of a shard file. Properties checked: the scan never fails on a readable file;
// the frames it keeps lie within the file and tile its first good_bytes bytes in order, each
// record's bytes inside its frame; it stops early exactly when it says why; and the frames it
// kept, written again with the writer's own functions, give back exactly those good_bytes bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/common/env.h"
#include "src/producer/record_cache_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace croupier;
  namespace rcf = croupier::record_cache_file;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string& path = fuzz::WriteScratchFile(bytes);
  auto file = Env::Default()->OpenForRead(path);
  FUZZ_CHECK(file.ok(), "the scratch file opens");
  auto scanned = rcf::Scan(**file, size);
  FUZZ_CHECK(scanned.ok(), "a readable file always scans");
  FUZZ_CHECK(scanned->good_bytes <= size, "good_bytes within the file");
  FUZZ_CHECK(scanned->stopped.empty() == (scanned->good_bytes == size),
             "it says why exactly when it stops early");
  // Every frame kept, in file order, written again.
  struct Frame {
    uint64_t offset;
    std::string bytes;
  };
  std::vector<Frame> frames;
  for (const auto& f : scanned->files) {
    frames.push_back({f.frame_offset, rcf::FileFrame(f.local_id, f.identity)});
  }
  for (const auto& r : scanned->records) {
    FUZZ_CHECK(r.frame_offset < r.data_offset && r.data_offset + r.size <= scanned->good_bytes,
               "a record's bytes inside its frame and the good bytes");
    std::string frame = rcf::RecordHeader(r.local_id, r.record, r.size, r.crc);
    FUZZ_CHECK(r.frame_offset + frame.size() == r.data_offset, "the record's bytes follow it");
    frame.append(bytes.data() + r.data_offset, r.size);
    frames.push_back({r.frame_offset, std::move(frame)});
  }
  std::sort(frames.begin(), frames.end(),
            [](const Frame& a, const Frame& b) { return a.offset < b.offset; });
  std::string again;
  for (const Frame& f : frames) {
    FUZZ_CHECK(f.offset == again.size(), "the frames tile the good bytes");
    again += f.bytes;
  }
  FUZZ_CHECK(absl::string_view(again) == bytes.substr(0, scanned->good_bytes),
             "the frames kept, written again, give back the good bytes");
  return 0;
}
