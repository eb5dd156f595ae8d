// croupier synth: writes a synthetic TFRecord dataset of tf.train.Examples, for demos, tests and
// benchmarks. Every record holds
//   id     int64   its global record id (so consumers can check exactly-once by content)
//   label  int64   id % 10
//   image  bytes   --image-bytes pseudo-random bytes, a pure function of (seed, id)
// spread evenly over --files files named part-KKKKK-of-NNNNN.tfrecord.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "croupier/example.h"
#include "croupier/tfrecord.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace croupier::cli {
namespace {

constexpr char kSynthUsage[] = R"(usage: croupier synth --out DIR [--files K] [--records N]
         [--image-bytes B] [--seed S] [--quiet]

Writes N records (default 20000) over K files (default 4), each a tf.train.Example with the
features id:int64, label:int64 and image:bytes (B bytes, default 3072).
)";

// splitmix64: cheap, well-mixed bytes that depend only on (seed, id).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

absl::Status SynthCommand(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {"out", "files", "records", "image-bytes", "seed"},
                                          {"quiet", "help"}));
  if (args.Has("help") || !args.Has("out")) {
    std::fputs(kSynthUsage, args.Has("help") ? stdout : stderr);
    return args.Has("help") ? absl::OkStatus() : absl::InvalidArgumentError("--out is required");
  }
  const std::string out = args.Get("out");
  ASSIGN_OR_RETURN(int64_t files, args.GetInt("files", 4, 1, 100000));
  ASSIGN_OR_RETURN(int64_t records, args.GetInt("records", 20000, 1, int64_t{1} << 40));
  ASSIGN_OR_RETURN(int64_t image_bytes, args.GetInt("image-bytes", 3072, 0, 1 << 30));
  ASSIGN_OR_RETURN(uint64_t seed, args.GetUint("seed", 0));
  RETURN_IF_ERROR(Env::Default()->CreateDirs(out));

  const uint64_t approx_total = static_cast<uint64_t>(records) * (image_bytes + 40);
  std::unique_ptr<Progress> progress;
  if (!args.Has("quiet")) progress = std::make_unique<Progress>("writing", approx_total);
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
  if (!args.Has("quiet")) {
    std::printf("wrote %lld records (%llu bytes) in %lld files to %s\n",
                static_cast<long long>(records), static_cast<unsigned long long>(written),
                static_cast<long long>(files), out.c_str());
  }
  return absl::OkStatus();
}

}  // namespace croupier::cli
