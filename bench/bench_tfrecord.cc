// TFRecord sequential read speed, with both CRCs checked, against a plain buffered read of the
// same bytes in the same run. Goal: at least 0.7x the plain read. Also reports CRC-32C speed and
// random access through the record index.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "croupier/record_index.h"
#include "croupier/tfrecord.h"
#include "src/common/crc32c.h"

namespace croupier::bench {
namespace {

std::string WriteFile(const std::string& path, size_t record_bytes, size_t total_bytes) {
  auto writer = *RecordWriter::Create(path);
  std::mt19937_64 rng(1);
  std::string record(record_bytes, '\0');
  for (char& c : record) c = static_cast<char>(rng());
  for (size_t written = 0; written < total_bytes; written += record_bytes + 16) {
    record[0] = static_cast<char>(written);  // records differ
    if (!writer->Write(record).ok()) std::abort();
  }
  if (!writer->Close().ok()) std::abort();
  return path;
}

// The baseline: the same file read start to end in 4 MiB pread() calls, as RecordReader does,
// touching one byte per page so the work is not optimized away.
uint64_t PlainRead(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(4 << 20);
  uint64_t sum = 0, offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i += 4096) sum += static_cast<unsigned char>(buf[i]);
    offset += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return sum + offset;
}

uint64_t RecordRead(const std::string& path) {
  auto reader = *RecordReader::Open(path);
  uint64_t bytes = 0;
  while (true) {
    auto r = reader->Next();
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      std::abort();
    }
    if (!r->has_value()) break;
    bytes += (*r)->size();
  }
  return bytes;
}

void SequentialRead(const std::string& dir, const std::string& name, size_t record_bytes) {
  constexpr size_t kTotal = 512 << 20;
  std::string path = WriteFile(dir + "/" + name + ".tfrecord", record_bytes, kTotal);
  double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  PlainRead(path);  // into the page cache
  volatile uint64_t sink = 0;
  double plain = BestSeconds(5, [&] { sink = sink + PlainRead(path); });
  double ours = BestSeconds(5, [&] { sink = sink + RecordRead(path); });
  Report("tfrecord_read", name, "MB/s", mb / ours, "plain buffered read", mb / plain, 0.7);
  std::filesystem::remove(path);
}

void Crc() {
  std::string buf(64 << 20, '\0');
  std::mt19937_64 rng(2);
  for (char& c : buf) c = static_cast<char>(rng());
  volatile uint32_t sink = 0;
  double mb = buf.size() / 1e6;
  std::string dst(buf.size(), '\0');  // allocated and faulted in once, outside the timing
  double copy = BestSeconds(5, [&] {
    std::memcpy(dst.data(), buf.data(), buf.size());
    sink = sink + dst[12345];
  });
  double hw = crc32c::HasHardware()
                  ? BestSeconds(5, [&] { sink = sink + crc32c::ExtendHardware(0, buf.data(), buf.size()); })
                  : 0;
  double sw = BestSeconds(3, [&] { sink = sink + crc32c::ExtendPortable(0, buf.data(), buf.size()); });
  if (hw > 0) Report("crc32c", "sse4.2, 3 streams", "MB/s", mb / hw, "memory copy", mb / copy);
  Report("crc32c", "portable slice-by-8", "MB/s", mb / sw, "memory copy", mb / copy);
}

void RandomAccess(const std::string& dir) {
  std::string path = WriteFile(dir + "/random.tfrecord", 1024, 128 << 20);
  IndexCache cache(dir + "/cache");
  auto file = *IndexedRecordFile::Open(*cache.Get(path));
  const uint64_t n = file->num_records();
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  std::string buffer;
  volatile uint64_t sink = 0;
  double random = BestSeconds(3, [&] {
    for (uint64_t i : order) sink = sink + file->Read(i, buffer)->size();
  });
  double sequential = BestSeconds(3, [&] { sink = sink + RecordRead(path); });
  Report("tfrecord_random_access", "1 KiB records, indexed", "records/s", n / random,
         "sequential RecordReader", n / sequential);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace croupier::bench

int main() {
  std::string dir = std::filesystem::temp_directory_path() / "croupier_bench_tfrecord";
  std::filesystem::create_directories(dir);
  croupier::bench::SequentialRead(dir, "100 KiB records", 100 << 10);
  croupier::bench::SequentialRead(dir, "1 KiB records", 1 << 10);
  croupier::bench::Crc();
  croupier::bench::RandomAccess(dir);
  std::filesystem::remove_all(dir);
  return 0;
}
