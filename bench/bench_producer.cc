// The producer's batch making: BatchMaker throughput in each shuffle mode, from the files and from
// the record cache, and TaskRunner serving batches in order, each against the same records read
// sequentially with RecordReader and decoded by one BatchBuilder in the same run (the floor any
// plan-ordered reading has to pay).
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "croupier/tfrecord.h"
#include "proto/croupier.pb.h"
#include "src/job/job_settings.h"
#include "src/producer/record_cache.h"
#include "src/producer/task_runner.h"
#include "src/producer/tfrecord_maker.h"

namespace croupier::bench {
namespace {

constexpr char kFeatures[] = "image:bytes,label:int64,emb:float32[8]";
constexpr int kFiles = 2;
constexpr int kRecordsPerFile = 40000;
constexpr uint32_t kBatchSize = 256;

void Check(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    std::abort();
  }
}

std::vector<std::string> WriteDataset(const std::string& dir) {
  std::vector<std::string> paths;
  std::mt19937_64 rng(1);
  for (int f = 0; f < kFiles; ++f) {
    paths.push_back(dir + "/part-" + std::to_string(f) + ".tfrecord");
    auto writer = *RecordWriter::Create(paths.back());
    for (int r = 0; r < kRecordsPerFile; ++r) {
      std::string image(256, '\0');
      for (char& c : image) c = static_cast<char>(rng());
      std::vector<float> emb(8);
      for (float& v : emb) v = static_cast<float>(rng() % 1000) / 7.0f;
      Check(writer->Write(EncodeExample({{"image", Feature::Bytes({image})},
                                         {"label", Feature::Ints({r % 1000})},
                                         {"emb", Feature::Floats(emb)}})));
    }
    Check(writer->Close());
  }
  return paths;
}

v1::JobInfo Job(const std::vector<std::string>& paths, const std::string& shuffle) {
  v1::JobInfo job;
  job.mutable_spec()->set_name("bench");
  job.mutable_spec()->set_features(kFeatures);
  job.mutable_spec()->set_batch_size(kBatchSize);
  job.mutable_spec()->set_num_consumers(1);
  job.mutable_spec()->set_seed(3);
  (void)SetSettingsFromText({.shuffle = shuffle}, *job.mutable_spec());
  for (const auto& p : paths) {
    auto* f = job.add_files();
    f->set_path(p);
    f->set_num_records(kRecordsPerFile);
  }
  job.set_num_records(uint64_t{kFiles} * kRecordsPerFile);
  return job;
}

// The baseline: every record read in file order and decoded into batches of kBatchSize.
uint64_t SequentialDecode(const std::vector<std::string>& paths) {
  auto builder = *BatchBuilder::Create(*ParseFeatureSpecs(kFeatures));
  uint64_t batches = 0;
  for (const auto& path : paths) {
    auto reader = *RecordReader::Open(path);
    while (true) {
      auto record = reader->Next();
      Check(record.status());
      if (!record->has_value()) break;
      Check(builder->AddRecord(**record));
      if (builder->num_records() == kBatchSize) {
        Check(builder->Finish().status());
        ++batches;
      }
    }
  }
  return batches;
}

uint64_t MakeEpoch(const BatchMaker& maker, uint64_t epoch) {
  for (uint64_t g = 0; g < maker.batches_per_epoch(); ++g) Check(maker.Make(epoch, g).status());
  return maker.batches_per_epoch();
}

void Run(const std::string& dir) {
  const std::vector<std::string> paths = WriteDataset(dir);
  IndexCache index(dir + "/index");
  const double records = static_cast<double>(kFiles) * kRecordsPerFile;
  SequentialDecode(paths);  // into the page cache
  const double base = records / BestSeconds(3, [&] { SequentialDecode(paths); });

  for (const char* shuffle : {"none", "blocks", "global"}) {
    auto maker = *TfrecordBatchMaker::Create(Job(paths, shuffle), index);
    uint64_t epoch = 0;
    const double secs = BestSeconds(3, [&] { MakeEpoch(*maker, epoch++); });
    Report("producer_batch_maker", std::string("shuffle ") + shuffle + ", 1 thread", "records/s",
           maker->batches_per_epoch() * kBatchSize / secs, "sequential read + decode", base,
           std::string(shuffle) == "global" ? 0.0 : 0.5);
  }

  {
    RecordCache::Options options;
    options.capacity_bytes = uint64_t{1} << 30;
    auto cache = *RecordCache::Create(options);
    auto maker = *TfrecordBatchMaker::Create(Job(paths, "global"), index, cache.get());
    MakeEpoch(*maker, 0);  // fills the cache
    uint64_t epoch = 1;
    const double secs = BestSeconds(3, [&] { MakeEpoch(*maker, epoch++); });
    Report("producer_batch_maker", "shuffle global, from the memory record cache", "records/s",
           maker->batches_per_epoch() * kBatchSize / secs, "sequential read + decode", base, 1.0);
  }

  {
    std::shared_ptr<const BatchMaker> maker =
        *TfrecordBatchMaker::Create(Job(paths, "blocks"), index);
    const uint64_t n = maker->batches_per_epoch();
    const int threads = std::max(2u, std::thread::hardware_concurrency());
    uint64_t epoch = 0;
    const double secs = BestSeconds(3, [&] {
      TaskRunner runner({.threads = threads, .buffer_bytes = 64 << 20});
      v1::Task task;
      task.set_task_id(epoch + 1);
      task.set_job("bench");
      task.set_epoch(epoch);
      task.set_num_batches(n);
      Check(runner.AddTask(task, maker));
      for (uint64_t g = 0; g < n; ++g) {
        const BatchKey key{"bench", epoch, g};
        auto batch = runner.GetBatch(key, absl::InfiniteFuture());
        Check(batch.status());
        runner.OnServed(key, batch->bytes().size());
      }
      ++epoch;
    });
    Report("producer_task_runner",
           "shuffle blocks, " + std::to_string(threads) + " threads, served in order", "records/s",
           n * kBatchSize / secs, "sequential read + decode", base, 1.0);
  }
}

}  // namespace
}  // namespace croupier::bench

int main() {
  const std::string dir = std::filesystem::temp_directory_path() / "croupier_bench_producer";
  std::filesystem::create_directories(dir);
  croupier::bench::Run(dir);
  std::filesystem::remove_all(dir);
  return 0;
}
