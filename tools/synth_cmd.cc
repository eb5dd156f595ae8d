// croupier synth: writes a synthetic TFRecord dataset of tf.train.Examples, for demos, tests and
// benchmarks. Every record holds
//   id     int64   its global record id (so consumers can check exactly-once by content)
//   label  int64   id % 10
//   image  bytes   --image-bytes pseudo-random bytes, a pure function of (seed, id)
// spread evenly over --files files named part-KKKKK-of-NNNNN.tfrecord.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "croupier/example.h"
#include "croupier/tfrecord.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace croupier::cli {
namespace {

constexpr char kSynthDescription[] =
    R"(Writes a synthetic TFRecord dataset. It writes --records tf.train.Examples over --files files named
part-KKKKK-of-NNNNN.tfrecord, each with the features id:int64, label:int64 (id % 10) and
image:bytes (--image-bytes pseudo-random bytes, a function of the seed and the id).)";

struct SynthFlags {
  std::string out;
  int64_t files = 4;
  int64_t records = 20000;
  int64_t image_bytes = 3072;
  uint64_t seed = 0;
  bool quiet = false;
};

// splitmix64: cheap, well-mixed bytes that depend only on (seed, id).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

absl::Status Run(const SynthFlags& flags) {
  const std::string& out = flags.out;
  const int64_t files = flags.files, records = flags.records, image_bytes = flags.image_bytes;
  const uint64_t seed = flags.seed;
  RETURN_IF_ERROR(Env::Default()->CreateDirs(out));

  const uint64_t approx_total = static_cast<uint64_t>(records) * (image_bytes + 40);
  std::unique_ptr<Progress> progress;
  if (!flags.quiet) progress = std::make_unique<Progress>("writing", approx_total);
  Example example = {{"id", Feature::Ints({0})},
                     {"image", Feature::Bytes({std::string()})},
                     {"label", Feature::Ints({0})}};
  std::string& image = example[1].second.bytes[0];
  image.resize(image_bytes);
  int64_t next_id = 0;
  uint64_t written = 0;
  for (int64_t f = 0; f < files; ++f) {
    const std::string path = absl::StrFormat("%s/part-%05d-of-%05d.tfrecord", out, f, files);
    ASSIGN_OR_RETURN(auto writer, RecordWriter::Create(path));
    const int64_t end = records * (f + 1) / files;
    for (; next_id < end; ++next_id) {
      example[0].second.ints[0] = next_id;
      example[2].second.ints[0] = next_id % 10;
      uint64_t state = Mix(seed ^ Mix(static_cast<uint64_t>(next_id)));
      for (int64_t i = 0; i < image_bytes; i += 8) {
        state = Mix(state);
        std::memcpy(image.data() + i, &state, std::min<int64_t>(8, image_bytes - i));
      }
      std::string record = EncodeExample(example);
      RETURN_IF_ERROR(writer->Write(record));
      written += record.size() + kRecordOverheadBytes;
      if (progress && (next_id & 1023) == 0) progress->Update(std::min(written, approx_total));
    }
    RETURN_IF_ERROR(writer->Close());
  }
  if (progress) progress->Update(approx_total);
  progress.reset();
  if (!flags.quiet) {
    std::printf("wrote %lld records (%llu bytes) in %lld files to %s\n",
                static_cast<long long>(records), static_cast<unsigned long long>(written),
                static_cast<long long>(files), out.c_str());
  }
  return absl::OkStatus();
}

void Declare(CLI::App* app, SynthFlags* f) {
  AddFlag(app, "--out", &f->out, "DIR", "the folder to write (made if missing)")->required();
  AddFlag(app, "--files", &f->files, "K", "the number of files")->check(CLI::Range(1, 100000));
  AddFlag(app, "--records", &f->records, "N", "the number of records")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  AddFlag(app, "--image-bytes", &f->image_bytes, "B", "bytes of each record's image")
      ->check(CLI::Range(0, 1 << 30));
  AddFlag(app, "--seed", &f->seed, "S", "the seed of the image bytes");
  AddSwitch(app, "--quiet", &f->quiet, "no progress bar, no summary");
}

}  // namespace

Subcommand AddSynthCommand(CLI::App& parent) {
  return AddCommand<SynthFlags>(parent, "synth", kSynthDescription, Declare, Run);
}

}  // namespace croupier::cli
