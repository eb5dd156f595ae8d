// numpy's SeedSequence (numpy/random/bit_generator.pyx), for entropy given as unsigned integers:
// the words its generate_state gives. A map job's tf_transform gives each record the seed of its
// stateless TensorFlow ops as SeedSequence([seed, epoch, index, 2]).generate_state(2, uint64)
// (python/croupier/map/tf_pipeline.py); computing it here costs a fraction of a microsecond a
// record, against 6 in numpy's SeedSequence and 3.5 in numpy array code run per batch under the
// GIL.
#ifndef CROUPIER_SRC_PLAN_SEED_SEQUENCE_H_
#define CROUPIER_SRC_PLAN_SEED_SEQUENCE_H_

#include <cstdint>

#include "absl/types/span.h"

namespace croupier::plan {

// SeedSequence(entropy).generate_state(out.size(), numpy.uint32) for entropy = a list of
// non-negative integers, each given as a uint64 (numpy splits each into its 32-bit words, low
// first, 0 being one word). Pure; thread-safe.
void SeedSequenceWords(absl::Span<const uint64_t> entropy, absl::Span<uint32_t> out);

// For every k: out[2k], out[2k + 1] = SeedSequence([seed, epoch, ids[k], kind])
// .generate_state(2, uint64), the two words as int64 (the bits of the uint64s), as TensorFlow's
// stateless ops take a seed. out holds two words a record; a smaller out is filled as far as it
// goes.
void RecordSeeds(uint64_t seed, uint64_t epoch, absl::Span<const uint64_t> ids, uint64_t kind,
                 absl::Span<int64_t> out);

}  // namespace croupier::plan

#endif  // CROUPIER_SRC_PLAN_SEED_SEQUENCE_H_
