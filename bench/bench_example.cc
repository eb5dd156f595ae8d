// Decoding tf.train.Example records into batches (BatchBuilder) against the baseline of
// libprotobuf's generated-code ParseFromString on the same records, measured in the same run.
// No goal: the figure tells whether the hand-written decoder earns its keep.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "croupier/batch.h"
#include "croupier/example.h"
#include "testdata_example.pb.h"

namespace croupier {
namespace {

constexpr int kBatchSize = 256;
constexpr int kRecords = 4 * kBatchSize;

// Records like an image dataset's: a ~3 KB encoded image, a label, a 16-float embedding, plus
// a feature the job does not ask for.
std::vector<std::string> ImageRecords() {
  std::mt19937_64 rng(1);
  std::vector<std::string> records;
  for (int i = 0; i < kRecords; ++i) {
    std::string image(2800 + rng() % 400, '\0');
    for (char& c : image) c = static_cast<char>(rng());
    std::vector<float> emb(16);
    for (float& f : emb) f = static_cast<float>(rng() % 1000) / 7.0f;
    records.push_back(EncodeExample({{"image", Feature::Bytes({image})},
                                     {"label", Feature::Ints({static_cast<int64_t>(rng() % 1000)})},
                                     {"emb", Feature::Floats(emb)},
                                     {"source", Feature::Bytes({"camera-7"})}}));
  }
  return records;
}

// Records like a tabular dataset's: ten int64 scalars and a float.
std::vector<std::string> TabularRecords() {
  std::mt19937_64 rng(2);
  std::vector<std::string> records;
  for (int i = 0; i < kRecords; ++i) {
    Example example;
    for (int c = 0; c < 10; ++c) {
      example.push_back({"col" + std::to_string(c), Feature::Ints({int64_t(rng() % 100000)})});
    }
    example.push_back({"fare", Feature::Floats({static_cast<float>(rng() % 500) / 3.0f})});
    records.push_back(EncodeExample(example));
  }
  return records;
}

void Run(const std::string& name, const std::string& specs, const std::vector<std::string>& records,
         int passes) {
  size_t bytes = 0;
  for (const std::string& r : records) bytes += r.size();
  const double total_records = static_cast<double>(records.size()) * passes;
  const double total_mb = static_cast<double>(bytes) * passes / 1e6;

  auto builder = *BatchBuilder::Create(*ParseFeatureSpecs(specs));
  uint64_t sink = 0;
  double ours = bench::BestSeconds(5, [&] {
    for (int p = 0; p < passes; ++p) {
      for (const std::string& r : records) {
        if (!builder->AddRecord(r).ok()) std::abort();
        if (builder->num_records() == kBatchSize) sink += builder->Finish()->bytes().size();
      }
    }
  });
  ::croupier::testing::Example message;
  double baseline = bench::BestSeconds(5, [&] {
    for (int p = 0; p < passes; ++p) {
      for (const std::string& r : records) {
        if (!message.ParseFromString(r)) std::abort();
        sink += message.features().feature_size();
      }
    }
  });
  bench::Report("example", name + "_batch256", "records/s", total_records / ours,
                "protobuf_ParseFromString", total_records / baseline);
  bench::Report("example", name + "_batch256", "MB/s", total_mb / ours, "protobuf_ParseFromString",
                total_mb / baseline);
  if (sink == 0) std::printf("unreachable\n");
}

}  // namespace
}  // namespace croupier

int main() {
  croupier::Run("image3k", "image:bytes,label:int64,emb:float32[16]", croupier::ImageRecords(), 20);
  croupier::Run("tabular11",
                "col0:int64,col1:int64,col2:int64,col3:int64,col4:int64,col5:int64,col6:int64,"
                "col7:int64,col8:int64,col9:int64,fare:float32",
                croupier::TabularRecords(), 100);
  return 0;
}
