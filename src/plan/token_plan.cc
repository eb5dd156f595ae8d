#include "src/plan/token_plan.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/common/status_macros.h"
#include "src/plan/keys.h"
#include "src/plan/permutation.h"

namespace croupier {
namespace {

// The mixture keeps every source's counts every this many global sequences.
constexpr uint64_t kCheckpointEvery = 4096;
// concat keeps the tokens before every this many positions of a source epoch.
constexpr uint64_t kPrefixEvery = 1024;
// The mixture's states kept where the last walks of it ended (a producer's threads each make
// consecutive batches, so the next walk starts where one ended), most recent first.
constexpr size_t kCursorsKept = 16;
// Packed best_fit windows kept, and source epochs whose concat prefixes are kept.
constexpr size_t kWindowsKept = 16;
constexpr size_t kConcatEpochsKept = 2;
// Weights become integer quotas of this whole, so that the mixture is the same on every machine
// (no floating point in the rule itself).
constexpr uint64_t kQuotaWhole = uint64_t{1} << 32;

// The integer quotas of `weights` (normalized), summing to kQuotaWhole exactly: each weight's
// share rounded down, and the units left given to the largest remainders (ties: lowest index).
std::vector<uint64_t> Quotas(const std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<uint64_t> q(weights.size());
  std::vector<std::pair<double, size_t>> remainders;
  uint64_t given = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    const double exact = weights[k] / sum * static_cast<double>(kQuotaWhole);
    q[k] = static_cast<uint64_t>(std::floor(exact));
    given += q[k];
    remainders.emplace_back(-(exact - std::floor(exact)), k);
  }
  std::sort(remainders.begin(), remainders.end());
  for (size_t r = 0; given < kQuotaWhole; r = (r + 1) % remainders.size()) {
    if (weights[remainders[r].second] == 0) continue;  // a weight of 0 gets nothing, ever
    ++q[remainders[r].second];
    ++given;
  }
  return q;
}

}  // namespace

absl::string_view PackingName(Packing packing) {
  return packing == Packing::kConcat ? "concat" : "best_fit";
}

absl::StatusOr<Packing> ParsePacking(absl::string_view name) {
  if (name == "concat") return Packing::kConcat;
  if (name == "best_fit") return Packing::kBestFit;
  return absl::InvalidArgumentError(
      absl::StrCat("packing '", name, "' is not one of: concat, best_fit"));
}

uint64_t SequencePlan::tokens() const {
  uint64_t n = 0;
  for (const Piece& p : pieces) n += p.length;
  return n;
}

struct TokenPlan::Impl {
  TokenPlanSpec spec;
  std::vector<TokenSource> sources;
  std::vector<uint64_t> total_tokens;  // per source: one source epoch's tokens

  // The schedule as segments of the sequence stream: from first_sequence on, these quotas.
  struct Segment {
    uint64_t first_sequence = 0;
    std::vector<uint64_t> quotas;
  };
  std::vector<Segment> segments;

  // The mixture's state at global sequence c * kCheckpointEvery: every source's count before it,
  // and its count within the segment in force.
  struct Checkpoint {
    std::vector<uint64_t> total;
    std::vector<uint64_t> in_segment;
  };

  // concat: one source epoch's lengths in permutation order and the tokens before every
  // kPrefixEvery positions.
  struct ConcatEpoch {
    std::vector<uint32_t> lengths;
    std::vector<uint64_t> prefix;
  };

  // best_fit: the sequences before each window of a source epoch (windows + 1 entries), and the
  // epoch's padding.
  struct BestFitEpoch {
    std::vector<uint64_t> first_sequence;
    uint64_t padding = 0;
  };

  mutable absl::Mutex mu;
  mutable std::vector<Checkpoint> checkpoints ABSL_GUARDED_BY(mu);
  // The state just before global sequence `first`, where a walk ended (see kCursorsKept).
  struct Cursor {
    uint64_t first = 0;
    Checkpoint state;
  };
  mutable std::list<Cursor> cursors ABSL_GUARDED_BY(mu);
  // Per source: the sequences before each source epoch (best_fit; concat's are all equal).
  mutable std::vector<std::vector<uint64_t>> epoch_starts ABSL_GUARDED_BY(mu);
  mutable std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<const BestFitEpoch>> best_fit
      ABSL_GUARDED_BY(mu);
  mutable std::list<std::pair<std::pair<uint32_t, uint64_t>, std::shared_ptr<const ConcatEpoch>>>
      concat ABSL_GUARDED_BY(mu);
  using WindowKey = std::tuple<uint32_t, uint64_t, uint64_t>;
  mutable std::list<std::pair<WindowKey, std::shared_ptr<const std::vector<std::vector<Piece>>>>>
      windows ABSL_GUARDED_BY(mu);

  uint32_t L() const { return spec.sequence_length; }
  size_t K() const { return sources.size(); }

  plan::Permutation Order(uint32_t k, uint64_t e) const {
    return plan::Permutation(sources[k].lengths.size(),
                             plan::DeriveKey(spec.seed, e, plan::KeyPurpose::kTokenSource, k));
  }

  const Segment& SegmentAt(uint64_t i) const {
    auto it = std::upper_bound(segments.begin(), segments.end(), i,
                               [](uint64_t v, const Segment& s) { return v < s.first_sequence; });
    return *std::prev(it);
  }

  // The deficit rule: the source of global sequence i, given the counts within its segment.
  uint32_t Choose(const Segment& segment, uint64_t i, const std::vector<uint64_t>& in_segment) const {
    const unsigned __int128 m = i - segment.first_sequence + 1;
    uint32_t best = static_cast<uint32_t>(K());
    __int128 best_score = 0;
    for (uint32_t k = 0; k < K(); ++k) {
      if (segment.quotas[k] == 0) continue;  // a weight of 0: never chosen
      const __int128 score = static_cast<__int128>(segment.quotas[k] * m) -
                             (static_cast<__int128>(in_segment[k]) << 32);
      if (best == K() || score > best_score) {  // ties: the lowest k
        best = k;
        best_score = score;
      }
    }
    return best;
  }

  // Advances (total, in_segment) over global sequence i; returns its source.
  uint32_t Step(uint64_t i, std::vector<uint64_t>& total, std::vector<uint64_t>& in_segment) const {
    const Segment& segment = SegmentAt(i);
    if (i == segment.first_sequence) std::fill(in_segment.begin(), in_segment.end(), 0);
    const uint32_t k = Choose(segment, i, in_segment);
    ++total[k];
    ++in_segment[k];
    return k;
  }

  // The mixture's state just before global sequence i: from the nearest checkpoint at or before
  // it, or from a kept cursor between that checkpoint and i.
  Checkpoint StateBefore(uint64_t i) const {
    Checkpoint at;
    uint64_t from = i / kCheckpointEvery * kCheckpointEvery;
    {
      absl::MutexLock lock(&mu);
      const uint64_t c = i / kCheckpointEvery;
      if (checkpoints.empty()) checkpoints.push_back({std::vector<uint64_t>(K(), 0),
                                                      std::vector<uint64_t>(K(), 0)});
      while (checkpoints.size() <= c) {
        Checkpoint next = checkpoints.back();
        const uint64_t first = (checkpoints.size() - 1) * kCheckpointEvery;
        for (uint64_t s = first; s < first + kCheckpointEvery; ++s) {
          Step(s, next.total, next.in_segment);
        }
        checkpoints.push_back(std::move(next));
      }
      const Cursor* nearest = nullptr;
      for (const Cursor& cursor : cursors) {
        if (cursor.first > from && cursor.first <= i &&
            (nearest == nullptr || cursor.first > nearest->first)) {
          nearest = &cursor;
        }
      }
      if (nearest != nullptr) {
        at = nearest->state;
        from = nearest->first;
      } else {
        at = checkpoints[c];
      }
    }
    for (uint64_t s = from; s < i; ++s) Step(s, at.total, at.in_segment);
    return at;
  }

  // Keeps `state`, the mixture's state just before global sequence `first`, as a cursor.
  void Remember(uint64_t first, const Checkpoint& state) const {
    if (first % kCheckpointEvery == 0) return;  // a checkpoint is there
    absl::MutexLock lock(&mu);
    for (auto it = cursors.begin(); it != cursors.end(); ++it) {
      if (it->first == first) {
        cursors.splice(cursors.begin(), cursors, it);
        return;
      }
    }
    cursors.push_front(Cursor{first, state});
    if (cursors.size() > kCursorsKept) cursors.pop_back();
  }

  // The mixture's state just before global sequence i, and the source of i.
  uint32_t Locate(uint64_t i, std::vector<uint64_t>* counts_before) const {
    Checkpoint at = StateBefore(i);
    if (counts_before != nullptr) *counts_before = at.total;
    const Segment& segment = SegmentAt(i);
    if (i == segment.first_sequence) std::fill(at.in_segment.begin(), at.in_segment.end(), 0);
    return Choose(segment, i, at.in_segment);
  }

  // --- concat ---------------------------------------------------------------------------------

  uint64_t ConcatSequences(uint32_t k) const { return (total_tokens[k] + L() - 1) / L(); }

  std::shared_ptr<const ConcatEpoch> Concat(uint32_t k, uint64_t e) const {
    {
      absl::MutexLock lock(&mu);
      for (auto it = concat.begin(); it != concat.end(); ++it) {
        if (it->first == std::make_pair(k, e)) {
          concat.splice(concat.begin(), concat, it);
          return concat.front().second;
        }
      }
    }
    auto made = std::make_shared<ConcatEpoch>();
    const plan::Permutation order = Order(k, e);
    const absl::Span<const uint32_t> lengths = sources[k].lengths;
    const uint64_t n = lengths.size();
    made->lengths.resize(n);
    made->prefix.reserve(n / kPrefixEvery + 1);
    uint64_t before = 0;
    std::vector<uint64_t> docs(std::min<uint64_t>(n, 4096));
    for (uint64_t p = 0; p < n; p += docs.size()) {
      const uint64_t count = std::min<uint64_t>(docs.size(), n - p);
      order.Fill(p, absl::MakeSpan(docs.data(), count));
      for (uint64_t t = 0; t < count; ++t) {
        if ((p + t) % kPrefixEvery == 0) made->prefix.push_back(before);
        made->lengths[p + t] = lengths[docs[t]];
        before += lengths[docs[t]];
      }
    }
    absl::MutexLock lock(&mu);
    concat.emplace_front(std::make_pair(k, e), made);
    while (concat.size() > kConcatEpochsKept) concat.pop_back();
    return made;
  }

  void ConcatPieces(uint32_t k, uint64_t e, uint64_t s, std::vector<Piece>& out) const {
    std::shared_ptr<const ConcatEpoch> epoch = Concat(k, e);
    const uint64_t start = s * L();
    const uint64_t end = std::min(start + L() + 1, total_tokens[k]);
    // The block whose first position starts at or before `start`, then the position in it.
    const auto block = std::upper_bound(epoch->prefix.begin(), epoch->prefix.end(), start) - 1;
    uint64_t p = static_cast<uint64_t>(block - epoch->prefix.begin()) * kPrefixEvery;
    uint64_t at = *block;  // tokens before position p
    while (at + epoch->lengths[p] <= start) at += epoch->lengths[p++];
    const plan::Permutation order = Order(k, e);
    for (uint64_t pos = start; pos < end; ++p) {
      const uint32_t len = epoch->lengths[p];
      if (len == 0) continue;
      const uint64_t offset = pos - at;
      const uint64_t take = std::min<uint64_t>(len - offset, end - pos);
      out.push_back(Piece{k, order(p), static_cast<uint32_t>(offset), static_cast<uint32_t>(take)});
      pos += take;
      at += len;
    }
  }

  // --- best_fit -------------------------------------------------------------------------------

  uint64_t Windows(uint32_t k) const {
    const uint64_t n = sources[k].lengths.size();
    return (n + spec.window - 1) / spec.window;
  }

  // What packing a window works in, kept from one window to the next of an epoch's count.
  struct PackScratch {
    std::vector<uint64_t> documents;  // the window's, in the epoch's order
    std::vector<Piece> pieces;        // in the epoch's order
    std::vector<uint32_t> bin_of;     // each piece's bin, numbered as the bins were opened
    std::vector<uint32_t> by_length;  // a counting sort's starts, by L - length
    std::vector<uint32_t> sorted;     // piece numbers, longest first, ties by number
    std::vector<std::vector<uint32_t>> by_room;  // [r]: min-heaps of the bins with room r left
    std::vector<uint64_t> has_room;              // bit r: by_room[r] is not empty
  };

  // Packs window w (see PackWindow): fills scratch.pieces and scratch.bin_of; returns the number
  // of bins.
  uint32_t PackBins(uint32_t k, uint64_t w, const plan::Permutation& order,
                    PackScratch& scratch) const {
    const absl::Span<const uint32_t> lengths = sources[k].lengths;
    const uint64_t first = w * spec.window;
    const uint64_t last = std::min<uint64_t>(first + spec.window, lengths.size());
    std::vector<uint64_t>& documents = scratch.documents;
    documents.resize(last - first);
    order.Fill(first, absl::MakeSpan(documents));
    std::vector<Piece>& pieces = scratch.pieces;
    pieces.clear();
    for (const uint64_t doc : documents) {
      const uint32_t len = lengths[doc];
      for (uint32_t off = 0; off < len; off += L()) {
        pieces.push_back(Piece{k, doc, off, std::min(L(), len - off)});
      }
    }
    // Longest first, ties by number: a counting sort by length, stable in the pieces' order.
    std::vector<uint32_t>& by_length = scratch.by_length;  // [length]: where its pieces start
    by_length.assign(L() + 2, 0);
    for (const Piece& piece : pieces) ++by_length[L() - piece.length + 1];
    for (uint32_t l = 1; l < by_length.size(); ++l) by_length[l] += by_length[l - 1];
    std::vector<uint32_t>& sorted = scratch.sorted;
    sorted.resize(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      sorted[by_length[L() - pieces[i].length]++] = static_cast<uint32_t>(i);
    }

    std::vector<std::vector<uint32_t>>& by_room = scratch.by_room;
    by_room.resize(L());
    for (auto& bins_with_room : by_room) bins_with_room.clear();
    std::vector<uint64_t>& has_room = scratch.has_room;
    has_room.assign((L() + 63) / 64, 0);
    auto fullest_fitting = [&](uint32_t length) -> uint32_t {  // L(): none
      for (uint32_t word = length / 64; word < has_room.size(); ++word) {
        uint64_t bits = has_room[word];
        if (word == length / 64) bits &= ~uint64_t{0} << (length % 64);
        if (bits != 0) return word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      }
      return L();
    };
    constexpr auto kEarliestFirst = std::greater<uint32_t>();
    scratch.bin_of.resize(pieces.size());
    uint32_t bins = 0;
    for (const uint32_t i : sorted) {
      const uint32_t length = pieces[i].length;
      const uint32_t r = fullest_fitting(length);
      uint32_t bin;
      uint32_t left;
      if (r == L()) {
        bin = bins++;
        left = L();
      } else {
        std::vector<uint32_t>& heap = by_room[r];
        std::pop_heap(heap.begin(), heap.end(), kEarliestFirst);
        bin = heap.back();
        heap.pop_back();
        if (heap.empty()) has_room[r / 64] &= ~(uint64_t{1} << (r % 64));
        left = r;
      }
      scratch.bin_of[i] = bin;
      left -= length;
      if (left > 0) {
        std::vector<uint32_t>& heap = by_room[left];
        heap.push_back(bin);
        std::push_heap(heap.begin(), heap.end(), kEarliestFirst);
        has_room[left / 64] |= uint64_t{1} << (left % 64);
      }
    }
    return bins;
  }

  // Window w of source k's epoch e, packed: its bins, in order, each a sequence's pieces.
  //
  // The rule (which decides the batches: it must never change alone, PlanTokenTest.GoldenValues):
  // the window's documents in the epoch's order, each cut into pieces of at most L; the pieces
  // longest first, ties in that order; each into the fullest bin it fits (the least room left
  // that is at least its length), ties to the earliest bin, or a new bin when none fits; each
  // bin's pieces in the epoch's order, and the bins ordered by their first piece.
  //
  // How (PackBins): the pieces are numbered in the epoch's order as they are cut, so "ties in
  // that order" is "ties by number", and a counting sort by length (stable) orders them. The bins with room r left are kept per r (a min-heap of bin numbers: the earliest
  // first), with a bit per r saying whether any is, so the fullest bin that fits is the first
  // set bit at or above the piece's length. The bins are then laid out in one walk.
  std::vector<std::vector<Piece>> PackWindow(uint32_t k, uint64_t w,
                                             const plan::Permutation& order) const {
    PackScratch scratch;
    const uint32_t bins = PackBins(k, w, order, scratch);
    const std::vector<Piece>& pieces = scratch.pieces;
    const std::vector<uint32_t>& bin_of = scratch.bin_of;
    // The bins in the order of their first pieces, each piece in the epoch's order.
    std::vector<uint32_t> rank(bins, UINT32_MAX);
    std::vector<uint32_t> sizes;
    for (size_t i = 0; i < pieces.size(); ++i) {
      uint32_t& r = rank[bin_of[i]];
      if (r == UINT32_MAX) {
        r = static_cast<uint32_t>(sizes.size());
        sizes.push_back(0);
      }
      ++sizes[r];
    }
    std::vector<std::vector<Piece>> out(bins);
    for (uint32_t b = 0; b < bins; ++b) out[b].reserve(sizes[b]);
    for (size_t i = 0; i < pieces.size(); ++i) out[rank[bin_of[i]]].push_back(pieces[i]);
    return out;
  }

  std::shared_ptr<const std::vector<std::vector<Piece>>> Window(uint32_t k, uint64_t e,
                                                                uint64_t w) const {
    const WindowKey key{k, e, w};
    {
      absl::MutexLock lock(&mu);
      for (auto it = windows.begin(); it != windows.end(); ++it) {
        if (it->first == key) {
          windows.splice(windows.begin(), windows, it);
          return windows.front().second;
        }
      }
    }
    auto made =
        std::make_shared<const std::vector<std::vector<Piece>>>(PackWindow(k, w, Order(k, e)));
    absl::MutexLock lock(&mu);
    windows.emplace_front(key, made);
    while (windows.size() > kWindowsKept) windows.pop_back();
    return made;
  }

  std::shared_ptr<const BestFitEpoch> BestFit(uint32_t k, uint64_t e) const {
    {
      absl::MutexLock lock(&mu);
      auto it = best_fit.find({k, e});
      if (it != best_fit.end()) return it->second;
    }
    auto made = std::make_shared<BestFitEpoch>();
    const plan::Permutation order = Order(k, e);
    const uint64_t windows_n = Windows(k);
    made->first_sequence.reserve(windows_n + 1);
    made->first_sequence.push_back(0);
    // Only the count of each window's bins: the bins themselves are laid out when a sequence of
    // the window is asked for (Window).
    PackScratch scratch;
    for (uint64_t w = 0; w < windows_n; ++w) {
      made->first_sequence.push_back(made->first_sequence.back() + PackBins(k, w, order, scratch));
    }
    made->padding = made->first_sequence.back() * L() - total_tokens[k];
    absl::MutexLock lock(&mu);
    // Kept for every epoch asked for: windows / 8 bytes each (10 KB for 10 million documents).
    return best_fit.emplace(std::make_pair(k, e), made).first->second;
  }

  uint64_t SequencesIn(uint32_t k, uint64_t e) const {
    if (spec.packing == Packing::kConcat) return ConcatSequences(k);
    return BestFit(k, e)->first_sequence.back();
  }

  // Source k's sequence j as (source epoch, sequence within it).
  std::pair<uint64_t, uint64_t> EpochOf(uint32_t k, uint64_t j) const {
    if (spec.packing == Packing::kConcat) {
      const uint64_t c = ConcatSequences(k);
      return {j / c, j % c};
    }
    while (true) {
      uint64_t next_epoch;
      {
        absl::MutexLock lock(&mu);
        const std::vector<uint64_t>& starts = epoch_starts[k];
        if (starts.back() > j) {
          const auto it = std::upper_bound(starts.begin(), starts.end(), j) - 1;
          const uint64_t e = static_cast<uint64_t>(it - starts.begin());
          return {e, j - *it};
        }
        next_epoch = starts.size() - 1;
      }
      const uint64_t count = SequencesIn(k, next_epoch);
      absl::MutexLock lock(&mu);
      std::vector<uint64_t>& starts = epoch_starts[k];
      if (starts.size() - 1 == next_epoch) starts.push_back(starts.back() + count);
    }
  }

  void Pieces(uint32_t k, uint64_t e, uint64_t s, std::vector<Piece>& out) const {
    if (spec.packing == Packing::kConcat) {
      ConcatPieces(k, e, s, out);
      return;
    }
    std::shared_ptr<const BestFitEpoch> epoch = BestFit(k, e);
    const auto it =
        std::upper_bound(epoch->first_sequence.begin(), epoch->first_sequence.end(), s) - 1;
    const uint64_t w = static_cast<uint64_t>(it - epoch->first_sequence.begin());
    const auto bins = Window(k, e, w);
    const std::vector<Piece>& bin = (*bins)[s - *it];
    out.insert(out.end(), bin.begin(), bin.end());
  }
};

absl::Status ValidateTokenPlanSpec(const TokenPlanSpec& spec,
                                   absl::Span<const std::string> source_names) {
  if (spec.sequence_length == 0) {
    return absl::InvalidArgumentError("a token plan needs a sequence length above 0");
  }
  if (spec.packing == Packing::kBestFit && spec.window == 0) {
    return absl::InvalidArgumentError("best_fit packing needs a window of at least 1 document");
  }
  if (spec.global_batch == 0) {
    return absl::InvalidArgumentError("a token plan needs a global batch of at least 1 sequence");
  }
  if (source_names.empty()) {
    return absl::InvalidArgumentError("a token plan needs at least one source");
  }
  if (spec.schedule.empty()) {
    return absl::InvalidArgumentError("a token plan needs weights (a schedule of one entry or more)");
  }
  for (size_t c = 0; c < spec.schedule.size(); ++c) {
    const WeightChange& change = spec.schedule[c];
    const std::string where = absl::StrCat("weight change ", c, " (step ", change.first_step, ")");
    if (c == 0 && change.first_step != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the first weights must start at step 0"));
    }
    if (c > 0 && change.first_step <= spec.schedule[c - 1].first_step) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": steps must increase (the change before is at step ",
                       spec.schedule[c - 1].first_step, ")"));
    }
    if (change.weights.size() != source_names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", change.weights.size(), " weights for ", source_names.size(), " sources"));
    }
    double sum = 0;
    for (size_t k = 0; k < change.weights.size(); ++k) {
      const double w = change.weights[k];
      if (!std::isfinite(w) || w < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the weight of source '", source_names[k], "' is ", w,
                         "; weights are finite and at least 0"));
      }
      sum += w;
    }
    if (sum <= 0) return absl::InvalidArgumentError(absl::StrCat(where, ": every weight is 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenPlan>> TokenPlan::Create(TokenPlanSpec spec,
                                                             std::vector<TokenSource> sources) {
  std::vector<std::string> names;
  for (const TokenSource& source : sources) names.push_back(source.name);
  RETURN_IF_ERROR(ValidateTokenPlanSpec(spec, names));
  auto impl = std::make_unique<Impl>();
  for (const TokenSource& source : sources) {
    if (source.lengths.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("source '", source.name, "' has no document"));
    }
    uint64_t total = 0;
    for (uint32_t len : source.lengths) total += len;
    if (total == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("source '", source.name, "' has documents of 0 tokens only"));
    }
    impl->total_tokens.push_back(total);
  }
  for (const WeightChange& change : spec.schedule) {
    impl->segments.push_back(
        Impl::Segment{change.first_step * spec.global_batch, Quotas(change.weights)});
  }
  impl->spec = std::move(spec);
  impl->sources = std::move(sources);
  {
    absl::MutexLock lock(&impl->mu);
    impl->epoch_starts.assign(impl->sources.size(), std::vector<uint64_t>{0});
  }
  return std::unique_ptr<TokenPlan>(new TokenPlan(std::move(impl)));
}

TokenPlan::TokenPlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenPlan::~TokenPlan() = default;

const TokenPlanSpec& TokenPlan::spec() const { return impl_->spec; }
size_t TokenPlan::num_sources() const { return impl_->sources.size(); }

uint32_t TokenPlan::SourceOf(uint64_t i) const { return impl_->Locate(i, nullptr); }

std::vector<uint64_t> TokenPlan::CountsBefore(uint64_t i) const {
  std::vector<uint64_t> counts;
  impl_->Locate(i, &counts);
  return counts;
}

SequencePlan TokenPlan::Sequence(uint64_t i) const {
  std::vector<uint64_t> before;
  SequencePlan out;
  out.source = impl_->Locate(i, &before);
  const auto [e, s] = impl_->EpochOf(out.source, before[out.source]);
  out.source_epoch = e;
  out.source_sequence = s;
  impl_->Pieces(out.source, e, s, out.pieces);
  return out;
}

std::vector<SequencePlan> TokenPlan::Sequences(uint64_t first, uint64_t count) const {
  std::vector<SequencePlan> out(count);
  if (count == 0) return out;
  Impl::Checkpoint state = impl_->StateBefore(first);
  for (uint64_t t = 0; t < count; ++t) {
    SequencePlan& plan = out[t];
    plan.source = impl_->Step(first + t, state.total, state.in_segment);
    const auto [e, s] = impl_->EpochOf(plan.source, state.total[plan.source] - 1);
    plan.source_epoch = e;
    plan.source_sequence = s;
    impl_->Pieces(plan.source, e, s, plan.pieces);
  }
  impl_->Remember(first + count, state);
  return out;
}

uint64_t TokenPlan::SequencesInEpoch(uint32_t k, uint64_t e) const {
  return impl_->SequencesIn(k, e);
}

uint64_t TokenPlan::DocumentAt(uint32_t k, uint64_t e, uint64_t p) const {
  return impl_->Order(k, e)(p);
}

double TokenPlan::PaddingFraction(uint32_t k, uint64_t e) const {
  const uint64_t sequences = impl_->SequencesIn(k, e);
  const uint64_t capacity = sequences * impl_->L();
  if (impl_->spec.packing == Packing::kBestFit) {
    return static_cast<double>(impl_->BestFit(k, e)->padding) / static_cast<double>(capacity);
  }
  // concat: only the last sequence of the epoch is short (its L inputs count; the label token
  // that begins the next sequence is not padding).
  return static_cast<double>(capacity - impl_->total_tokens[k]) / static_cast<double>(capacity);
}

}  // namespace croupier
