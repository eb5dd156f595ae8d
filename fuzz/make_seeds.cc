// Writes the seed corpora of the fuzz targets to fuzz/corpus/<target>/: small valid inputs (and a
// few broken ones) made with croupier's own writers, so that the seeds follow the formats as the
// code writes them. Run by hand after a format change:
//   build-asan/bin/croupier_fuzz_seeds fuzz/corpus   (built by make fuzz-build)
// The output is deterministic; the files are committed.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "croupier/batch.h"
#include "croupier/example.h"
#include "croupier/plan.h"
#include "croupier/record_index.h"
#include "src/io/indexed_dataset.h"
#include "croupier/tfrecord.h"
#include "proto/journal.pb.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/kept_counts.h"
#include "src/io/tfrecord_format.h"
#include "src/producer/record_cache_file.h"
#include "src/transport/compression.h"
#include "src/transport/frame.h"

namespace croupier::fuzz {
namespace {

std::string root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(root + "/" + target);
  std::string path = root + "/" + target + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

std::string ReadFile(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  char buf[4096];
  size_t n;
  while (f && (n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  if (f) std::fclose(f);
  return out;
}

// The records of the example seeds: one per spec set of example_fuzzer.cc, in its order.
std::vector<std::vector<Example>> ExampleSets() {
  return {
      {{{"a", Feature::Bytes({"xy"})}, {"b", Feature::Floats({1.5f})}, {"c", Feature::Ints({7})}},
       {{"a", Feature::Bytes({""})}, {"b", Feature::Floats({-0.0f})}, {"c", Feature::Ints({-1})}}},
      {{{"a", Feature::Bytes({"p", "q"})},
        {"b", Feature::Floats({})},
        {"c", Feature::Ints({1, 2})}},
       {{"a", Feature::None()}, {"b", Feature::Floats({2, 3})}, {"c", Feature::Ints({})}}},
      {{{"a", Feature::Floats({1, 2})},
        {"b", Feature::Ints({1, 2, 3, 4})},
        {"c", Feature::Bytes({"u", "v", "w"})},
        {"z", Feature::Bytes({"skipped"})}}},
      {{{"a", Feature::Ints({5})}, {"b", Feature::Bytes({"b"})}, {"c", Feature::Floats({4})}}},
  };
}

std::string TFRecordFile(const std::vector<std::string>& records) {
  std::string path = root + "/.tmp.tfrecord";
  auto writer = *RecordWriter::Create(path);
  for (const std::string& r : records) (void)writer->Write(r);
  (void)writer->Close();
  std::string bytes = ReadFile(path);
  std::filesystem::remove(path);
  return bytes;
}

void TFRecordSeeds() {
  const auto sets = ExampleSets();
  Write("tfrecord_reader", "empty", "");
  Write("tfrecord_reader", "one", TFRecordFile({EncodeExample(sets[0][0])}));
  Write("tfrecord_reader", "three", TFRecordFile({"", "abc", EncodeExample(sets[2][0])}));
  std::string big = TFRecordFile({std::string(5000, 'x'), "tail"});  // larger than the buffer
  Write("tfrecord_reader", "bigger_than_buffer", big);
  std::string file = TFRecordFile({"abc", "defg"});
  Write("tfrecord_reader", "truncated", file.substr(0, file.size() - 3));
  std::string flipped = file;
  flipped[14] ^= 1;
  Write("tfrecord_reader", "corrupt_data", flipped);
  std::string huge(kRecordHeaderBytes, '\0');  // a valid checksum over a length of 2^40
  tfrecord::EncodeHeader(huge.data(), uint64_t{1} << 40);
  Write("tfrecord_reader", "huge_length", huge + "four");
}

void ExampleSeeds() {
  const auto sets = ExampleSets();
  for (size_t s = 0; s < sets.size(); ++s) {
    for (bool packed : {true, false}) {
      std::string input(1, static_cast<char>(s));
      for (size_t r = 0; r < sets[s].size(); ++r) {
        if (r > 0) input += "#REC#";
        input += EncodeExample(sets[s][r], packed);
      }
      Write("example", "set" + std::to_string(s) + (packed ? "_packed" : "_unpacked"), input);
    }
  }
  Write("example", "empty_record", std::string(1, '\0'));
}

void IndexSeeds() {
  std::string path = root + "/.tmp.tfrecord";
  const std::vector<std::vector<std::string>> files = {{}, {"a"}, {"abc", "", "defgh"}};
  for (size_t i = 0; i < files.size(); ++i) {
    {
      auto writer = *RecordWriter::Create(path);
      for (const std::string& r : files[i]) (void)writer->Write(r);
      (void)writer->Close();
    }
    auto index = *BuildRecordIndex(*Env::Default(), path);
    index.path = "data/f" + std::to_string(i) + ".tfrecord";  // not the temporary path
    index.mtime_ns = 1700000000000000000;
    Write("record_index", "records" + std::to_string(files[i].size()), SerializeRecordIndex(index));
  }
  std::filesystem::remove(path);
}

// A kept record cache's shard files (src/producer/record_cache_file.h): empty, one file and its
// records, two files interleaved, one cut short in its last record, and one ending in a frame the
// writer does not write.
void RecordCacheSeeds() {
  namespace rcf = croupier::record_cache_file;
  auto record = [](uint32_t local, uint64_t index, const std::string& data) {
    return rcf::RecordHeader(local, index, static_cast<uint32_t>(data.size()),
                             crc32c::Value(data)) +
           data;
  };
  Write("record_cache", "empty", "");
  const std::string one = rcf::FileFrame(0, "data/a.tfrecord\n1234\n1700000000000000000") +
                          record(0, 0, "first") + record(0, 7, "") + record(0, 9, "ninth record");
  Write("record_cache", "one_file", one);
  Write("record_cache", "two_files",
        rcf::FileFrame(0, "data/a.tfrecord\n1234\n1") + record(0, 3, "a3") +
            rcf::FileFrame(1, "s3://bucket/b.tfrecord\n99\n2") + record(1, 3, "b3") +
            record(0, 4, "a4"));
  Write("record_cache", "cut_short", one.substr(0, one.size() - 3));
  // A file frame that passes its header check but carries a data checksum, which the writer never
  // writes: the scan ends there (a fuzzer found the scan keeping it).
  std::string odd = rcf::FileFrame(1, "data/b.tfrecord\n5\n1");
  tfrecord::EncodeU32(odd.data() + 13, 0xff);
  tfrecord::EncodeU32(odd.data(), crc32c::Value(odd.data() + 4, odd.size() - 4));
  Write("record_cache", "file_frame_with_data_crc", one + odd);
}

void TokenIndexSeeds() {
  TokenIndex index;
  for (TokenDType dtype : {TokenDType::kUInt16, TokenDType::kInt32}) {
    index.dtype = dtype;
    index.lengths = {3, 0, 5};
    index.pointers = {0, 3 * TokenDTypeSize(dtype), 3 * TokenDTypeSize(dtype)};
    Write("token_index", std::string(TokenDTypeName(dtype)), EncodeTokenIndex(index));
  }
  index.lengths.clear();
  index.pointers.clear();
  Write("token_index", "empty", EncodeTokenIndex(index));
}

void KeptCountsSeeds() {
  v1::KeptCounts counts;
  counts.set_pattern("s3://bucket/train/*.tfrecord");
  Write("kept_counts", "empty", SerializeKeptCounts(counts));
  for (int i = 0; i < 3; ++i) {
    v1::FileInfo* f = counts.add_files();
    f->set_path("s3://bucket/train/part-" + std::to_string(i) + ".tfrecord");
    f->set_num_records(100 * i);
    f->set_size_bytes(4096 * i);
    f->set_mtime_ns(int64_t{1764547200} * 1000000000);
    f->set_etag("\"0123456789abcdef" + std::to_string(i) + "\"");
  }
  Write("kept_counts", "three", SerializeKeptCounts(counts));
}

void BatchSeeds() {
  const auto sets = ExampleSets();
  const char* specs[] = {"a:bytes,b:float32,c:int64", "a:bytes[*],b:float32[*],c:int64[*]",
                         "a:float32[2],b:int64[2,2],c:bytes[3]", "a:int64[*],b:bytes,c:float32[*]"};
  for (size_t s = 0; s < sets.size(); ++s) {
    auto builder = *BatchBuilder::Create(*ParseFeatureSpecs(specs[s]));
    for (const Example& e : sets[s]) (void)builder->AddRecord(EncodeExample(e));
    Write("batch_view", "set" + std::to_string(s), std::string(builder->Finish()->bytes()));
  }
  auto empty = *BatchBuilder::Create(*ParseFeatureSpecs("x:int64"));
  Write("batch_view", "no_records", std::string(empty->Finish()->bytes()));
  // Every numeric dtype, fixed [2] and variable length, over 2 records (format version 2).
  const std::string raw(16 * 3, '\1');  // bools are 0 or 1; other dtypes take any bytes
  const int64_t dims[] = {2};
  const uint64_t splits[] = {0, 3, 3};
  std::vector<std::string> names;
  for (uint8_t code = 1; code <= kLastDTypeCode; ++code) {
    names.push_back(std::string("f") + std::string(DTypeName(static_cast<DType>(code))));
    names.push_back(std::string("v") + std::string(DTypeName(static_cast<DType>(code))));
  }
  std::vector<ColumnData> columns;
  for (size_t i = 0; i < names.size(); ++i) {
    const DType dtype = static_cast<DType>(1 + i / 2);
    const bool variable = i % 2 == 1;
    const uint64_t n = variable ? 3 : 4;
    columns.push_back(ColumnData{names[i],
                                 dtype,
                                 variable,
                                 variable ? absl::Span<const int64_t>() : dims,
                                 n,
                                 absl::string_view(raw).substr(0, n * DTypeSize(dtype)),
                                 {},
                                 variable ? splits : absl::Span<const uint64_t>()});
  }
  Write("batch_view", "every_dtype", std::string(Batch::FromColumns(2, columns)->bytes()));
}

std::string BatchBytes() {
  auto builder = *BatchBuilder::Create(*ParseFeatureSpecs("a:bytes[*],c:int64"));
  (void)builder->AddRecord(
      EncodeExample({{"a", Feature::Bytes({"hi"})}, {"c", Feature::Ints({3})}}));
  return std::string(builder->Finish()->bytes());
}

void FrameSeeds() {
  frame::Request get{frame::FrameType::kGetBatch, "train", 1, 7, 5000};
  frame::Request any{frame::FrameType::kGetAny, "j", 0, 0, frame::kNoTimeout};
  const std::string nonce(kNonceBytes, 'n');
  Write("frame", "server",
        std::string(1, '\0') + frame::EncodeHello(frame::kDataProtocolVersion, nonce) +
            frame::EncodeAuth(std::string(kProofBytes, 'p')) + frame::EncodeRequest(get) +
            frame::EncodeRequest(any));
  Write("frame", "server_no_token",
        std::string(1, '\0') + frame::EncodeHello(frame::kDataProtocolVersion, nonce) +
            frame::EncodeAuth(""));
  const std::string batch = BatchBytes();
  const auto prefix = frame::EncodeBatchPrefix(7, batch.size());
  Write("frame", "client",
        std::string(1, '\1') + frame::EncodeChallenge(nonce, std::string(kProofBytes, 'p')) +
            frame::EncodeHelloOk(frame::kDataProtocolVersion) +
            std::string(prefix.data(), prefix.size()) +
            batch + frame::EncodeError(absl::NotFoundError("no job 'x'")));
  for (Codec codec : {Codec::kZstd, Codec::kLz4}) {
    const std::string compressed = Compress(codec, batch).value();
    const auto compressed_prefix = frame::EncodeCompressedBatchPrefix(
        7, static_cast<uint32_t>(codec), batch.size(), compressed.size());
    Write("frame", "client_" + CodecName(codec),
          std::string(1, '\1') + frame::EncodeHelloOk(1) +
              std::string(compressed_prefix.data(), compressed_prefix.size()) + compressed);
  }
  Write("frame", "client_refused",
        std::string(1, '\1') + frame::EncodeError(absl::UnauthenticatedError("bad token")));
}

void JournalSeeds() {
  std::vector<journal::Update> updates(5);
  auto* job = updates[0].mutable_job_created();
  job->set_plan_version(kPlanVersion);
  v1::JobInfo* info = job->mutable_job();
  v1::JobSpec* spec = info->mutable_spec();
  spec->set_name("j");
  spec->add_files("/data/*.tfrecord");
  spec->set_features("c:int64");
  spec->set_batch_size(2);
  spec->set_num_consumers(2);
  spec->set_mode(v1::DEAL_MODE_DEALT);
  spec->set_shuffle(v1::SHUFFLE_GLOBAL);
  spec->set_remainder(v1::REMAINDER_DROP);
  info->set_num_records(8);
  info->set_batches_per_epoch(4);
  info->set_steps_per_epoch(2);
  info->set_batches_per_task(2);
  updates[1].mutable_producer_registered()->set_producer_id(1);
  updates[1].mutable_producer_registered()->set_data_address("127.0.0.1:5000");
  v1::Task* task = updates[2].mutable_task_assigned()->mutable_task();
  task->set_task_id(1);
  task->set_job("j");
  task->set_num_batches(2);
  updates[2].mutable_task_assigned()->set_producer_id(1);
  updates[3].mutable_consumer_registered()->set_consumer_id(1);
  updates[3].mutable_consumer_registered()->set_job("j");
  updates[4].mutable_consumer_acknowledged()->set_consumer_id(1);
  updates[4].mutable_consumer_acknowledged()->set_step(1);
  std::string file = JournalHeader();
  Write("journal", "header_only", file);
  for (const journal::Update& u : updates) file += JournalEntry(u.SerializeAsString());
  Write("journal", "five_updates", file);
  Write("journal", "torn_tail", file.substr(0, file.size() - 5));
}

}  // namespace
}  // namespace croupier::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  croupier::fuzz::root = argv[1];
  croupier::fuzz::TFRecordSeeds();
  croupier::fuzz::ExampleSeeds();
  croupier::fuzz::IndexSeeds();
  croupier::fuzz::BatchSeeds();
  croupier::fuzz::FrameSeeds();
  croupier::fuzz::JournalSeeds();
  croupier::fuzz::TokenIndexSeeds();
  croupier::fuzz::RecordCacheSeeds();
  croupier::fuzz::KeptCountsSeeds();
  return 0;
}
