// A tokens job's batches made by TokenBatchMaker on one thread, against reading the same pieces'
// tokens alone, in the same process and run (issue 34: the producer's CPU per token at most 1.2x
// reading the mapped tokens alone). Two uint16 indexed datasets of --documents documents each
// (lognormal lengths, median about 400 tokens), mixed 3:1, L = 2,048, 8 sequences a batch, in a
// temp folder. "make": Make(epoch 0, batch b) for consecutive batches, the five columns laid out
// in a recycled buffer. "read alone": for the same batches, every piece of every sequence read
// (IndexedDataset::Read, the same memory mapping and widening to int32) into one int32 row of L
// + 1 per sequence, and nothing else. Rounds alternate, and each figure is the least CPU time of
// its rounds; the ratio is make / read alone, CPU per token. Serving the batch (the data
// server's copy into a consumer's shared memory) is not in either.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "src/dispatcher/job_builder.h"
#include "src/dispatcher/job_spec.h"
#include "src/io/indexed_dataset.h"
#include "src/producer/token_maker.h"

namespace croupier::bench {
namespace {

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

std::string WriteSource(const std::string& prefix, int documents, unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> length(6.0, 1.0);
  std::uniform_int_distribution<int32_t> token(0, 49999);
  std::vector<std::vector<int32_t>> docs(documents);
  for (auto& d : docs) {
    d.resize(std::clamp<size_t>(static_cast<size_t>(length(rng)), 1, 100000));
    for (auto& t : d) t = token(rng);
  }
  if (absl::Status s = WriteIndexedDataset(prefix, TokenDType::kUInt16, docs); !s.ok()) {
    Die(s.ToString());
  }
  return prefix;
}

void Run(bool quick, v1::Packing packing, const std::vector<std::string>& prefixes) {
  v1::JobSpec spec;
  spec.set_name("bench");
  spec.set_source(v1::SOURCE_KIND_TOKENS);
  spec.set_seed(1);
  spec.set_num_consumers(1);
  v1::TokenSpec& tokens = *spec.mutable_tokens();
  for (const std::string& p : prefixes) tokens.add_sources(p);
  tokens.set_sequence_length(2048);
  tokens.set_global_batch(8);
  tokens.set_steps_per_epoch(1'000'000);
  tokens.set_packing(packing);
  v1::WeightChange* w = tokens.add_weights();
  w->add_weights(3);
  w->add_weights(1);
  auto normal = NormalizeJobSpec(spec);
  if (!normal.ok()) Die(normal.status().ToString());
  IndexCache cache;
  auto info = BuildJobInfo(*normal, cache, *Env::Default(), 0);
  if (!info.ok()) Die(info.status().ToString());
  auto maker = TokenBatchMaker::Create(*info);
  if (!maker.ok()) Die(maker.status().ToString());
  std::vector<std::unique_ptr<IndexedDataset>> datasets;
  for (const std::string& p : prefixes) datasets.push_back(*IndexedDataset::Open(p));

  const uint64_t batches = quick ? 500 : 4000;
  const uint32_t length = 2048;
  double make_best = 1e300, read_best = 1e300;
  uint64_t tokens_made = 0;
  std::vector<int32_t> row(length + 1);
  for (int round = 0; round < 5; ++round) {
    const uint64_t first = round * batches;  // new batches each round: nothing cached
    double start = ThreadCpuSeconds();
    uint64_t made = 0;
    for (uint64_t b = first; b < first + batches; ++b) {
      auto batch = (*maker)->Make(0, b);
      if (!batch.ok()) Die(batch.status().ToString());
      made += batch->num_records();
    }
    make_best = std::min(make_best, ThreadCpuSeconds() - start);
    start = ThreadCpuSeconds();
    uint64_t read = 0;
    const TokenPlan& plan = (*maker)->plan();
    for (const SequencePlan& sequence : plan.Sequences(first * 8, batches * 8)) {
      size_t at = 0;
      for (const Piece& piece : sequence.pieces) {
        absl::Status s = datasets[piece.source]->Read(
            piece.document, piece.offset, absl::MakeSpan(row.data() + at, piece.length));
        if (!s.ok()) Die(s.ToString());
        at += piece.length;
      }
      read += std::min<size_t>(at, length);
    }
    read_best = std::min(read_best, ThreadCpuSeconds() - start);
    tokens_made = read;
    (void)made;
  }
  const std::string name = packing == v1::PACKING_CONCAT ? "concat" : "best_fit";
  const double make_us = 1e6 * make_best / tokens_made, read_us = 1e6 * read_best / tokens_made;
  Report("token_maker", "make a tokens batch (" + name + "), CPU per token", "us/token", make_us,
         "read the same pieces alone", read_us, 1.2, /*higher_is_better=*/false);
  std::fprintf(stderr, "%s: make %.4f us/token, read alone %.4f us/token (%llu tokens a round)\n",
               name.c_str(), make_us, read_us, static_cast<unsigned long long>(tokens_made));
}

}  // namespace
}  // namespace croupier::bench

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  char dir[] = "/tmp/croupier-bench-token-maker-XXXXXX";
  if (mkdtemp(dir) == nullptr) croupier::bench::Die("mkdtemp");
  const int documents = quick ? 4000 : 20000;
  const std::vector<std::string> prefixes = {
      croupier::bench::WriteSource(std::string(dir) + "/a", documents, 1),
      croupier::bench::WriteSource(std::string(dir) + "/b", documents, 2)};
  croupier::bench::Run(quick, croupier::v1::PACKING_CONCAT, prefixes);
  croupier::bench::Run(quick, croupier::v1::PACKING_BEST_FIT, prefixes);
  for (const char* name : {"/a.idx", "/a.bin", "/b.idx", "/b.bin"}) {
    std::remove((std::string(dir) + name).c_str());
  }
  rmdir(dir);
}
