#include "reader/read_schedule.hpp"

#include <algorithm>
#include <tuple>

namespace ctstream::reader {
namespace {

// The look-ahead of a source that streams dense tensors itself stops before a dense tensor this
// large: its copy is the next sequential stream the kernel reads ahead.
constexpr uint64_t kLargeDense = 1ull << 20;

// One kind of source per checkpoint (every file local, or every file remote).
io::AheadPolicy policy_of(const Checkpoint::Impl& ck) {
  return ck.files.empty() ? io::AheadPolicy{} : ck.files.front()->ahead_policy();
}

// Whether the schedule asks for `t`'s bytes at all: not a dense tensor's where the source streams
// those itself.
bool scheduled(const io::AheadPolicy& pol, const TensorInfo& t) {
  return !(pol.streams_dense && t.format == Format::dense);
}

// Appends every part of `t` whole.
void add_parts(const TensorInfo& t, std::vector<Range>& r) {
  for (const TensorPart& p : t.parts) r.push_back({p.file, p.offset, p.nbytes});
}

// Appends the parts of next(0), next(1), ... (n tensors, the order decodes reach them) up to the
// window; a tensor that starts inside the window is taken whole (a remote cache fetches what fits).
template <class Next>
void add_ahead(const io::AheadPolicy& pol, Next&& next, size_t n, std::vector<Range>& r) {
  uint64_t ahead = 0;
  for (size_t k = 0; k < n && ahead < pol.window; ++k) {
    const TensorInfo& t = next(k);
    if (pol.streams_dense && t.format == Format::dense && t.stored_bytes() >= kLargeDense) break;
    add_parts(t, r);
    ahead += t.stored_bytes();
  }
}

// Sorts `r` by file and offset, joins ranges that touch, and asks each file for them (never for
// bytes between two ranges: a remote cache would hold bytes no decode releases):
// a local file on the checkpoint's ReadAhead worker, a remote one's cache directly (its will_need
// never blocks). Ranges of a file index the checkpoint lacks are left to the decode, which refuses
// them.
void request(const Checkpoint::Impl& ck, std::vector<Range>& r) {
  std::sort(r.begin(), r.end(),
            [](const Range& a, const Range& b) { return std::tie(a.file, a.offset) < std::tie(b.file, b.offset); });
  for (size_t k = 0; k < r.size();) {
    const uint32_t file = r[k].file;
    const uint64_t lo = r[k].offset;
    uint64_t hi = lo + r[k].length;
    for (++k; k < r.size() && r[k].file == file && r[k].offset <= hi; ++k) hi = std::max(hi, r[k].offset + r[k].length);
    if (file >= ck.files.size()) continue;
    const io::File& f = *ck.files[file];
    if (f.mode() == io::Mode::remote) f.will_need(lo, hi - lo);
    else ck.read_ahead.advise(f, file, lo, hi);
  }
}

}  // namespace

std::vector<Range> decode_ranges(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice) {
  std::vector<Range> r;
  if (t.format == Format::low_rank) return r;
  const SliceGeom g = slice_geometry(ck, t, slice);
  const uint64_t gap = policy_of(ck).coalesce_gap;
  for (const TensorPart& p : t.parts) {
    const auto add = [&](uint64_t off, uint64_t len) {
      if (len == 0) return;
      if (!r.empty() && r.back().file == p.file && off >= r.back().offset + r.back().length &&
          off - (r.back().offset + r.back().length) < gap)
        r.back().length = off + len - r.back().offset;
      else r.push_back({p.file, off, len});
    };
    const unsigned bits = dtype_bits(p.dtype);
    if (g.sliced() && t.format == Format::dense && bits % 8 == 0 && p.nbytes == t.numel() * (bits / 8)) {
      // The slice's runs: `len * inner` elements at each outer index.
      const uint64_t es = bits / 8;
      for (uint64_t o = 0; o < g.outer; ++o) add(p.offset + (o * g.dim + g.start) * g.inner * es, g.len * g.inner * es);
    } else if (slice && slice->dim == 0 && !t.shape.empty() && t.shape[0] > 0 && !p.shape.empty() &&
               p.shape[0] == t.shape[0] && p.nbytes % p.shape[0] == 0) {
      // A part with one row per row of the tensor (packed weights, scales, bitmasks): its rows.
      const uint64_t row = p.nbytes / p.shape[0];
      add(p.offset + g.start * row, g.len * row);
    } else {
      add(p.offset, p.nbytes);
    }
  }
  return r;
}

namespace {
// schedule_decode's body; `own` gives the decode's ranges, asked only when they are scheduled.
template <class Own>
void schedule(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice, Own&& own) {
  const io::AheadPolicy pol = policy_of(ck);
  const bool whole = !slice_geometry(ck, t, slice).sliced();
  const size_t i = ck.index_of(t);
  const bool mine = i != SIZE_MAX;
  // Decodes walk the file in order when each whole one is the next tensor, or one of a few after
  // it (a Stream's workers decode a batch at once); a slice breaks the walk. Slices never look
  // ahead: a tensor-parallel rank must not pull in its neighbours' bytes.
  bool in_order = false;
  if (!whole) {
    ck.last_decoded.store(SIZE_MAX, std::memory_order_relaxed);
  } else if (pol.guess_order) {
    const size_t prev = ck.last_decoded.exchange(i, std::memory_order_relaxed);
    in_order = mine && ck.opt.order == Order::file && (prev == SIZE_MAX ? i == 0 : i > prev && i - prev <= 4);
  }
  // The decode's own bytes first: a source works through its requests in order (and a remote
  // cache takes what fits), so the tensor needed now must not queue behind those needed later.
  // A tensor the source streams itself (a local dense copy) asks for nothing, nor for the tensors
  // after it: advice over other pages while that stream runs slowed it (bench/RESULTS.md).
  if (!scheduled(pol, t)) return;
  std::vector<Range> r = own();
  request(ck, r);
  if (!in_order) return;
  r.clear();
  add_ahead(
      pol, [&](size_t k) -> const TensorInfo& { return ck.tensors[i + 1 + k]; }, ck.tensors.size() - i - 1, r);
  request(ck, r);
}
}  // namespace

void schedule_decode(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice) {
  schedule(ck, t, slice, [&] { return decode_ranges(ck, t, slice); });
}
void schedule_decode(const Checkpoint::Impl& ck, const TensorInfo& t, const std::optional<Slice>& slice,
                     std::span<const Range> own) {
  schedule(ck, t, slice, [&] { return std::vector<Range>(own.begin(), own.end()); });
}

void schedule_order(const Checkpoint::Impl& ck, std::span<const TensorInfo* const> next, size_t batch,
                    uint64_t budget) {
  io::AheadPolicy pol = policy_of(ck);
  if (pol.holds_bytes) pol.window = std::min(pol.window, budget);
  std::vector<Range> r;
  for (size_t k = 0; k < batch && k < next.size(); ++k)
    if (scheduled(pol, *next[k])) add_parts(*next[k], r);
  request(ck, r);
  if (batch >= next.size()) return;
  r.clear();
  add_ahead(
      pol, [&](size_t k) -> const TensorInfo& { return *next[batch + k]; }, next.size() - batch, r);
  request(ck, r);
}

}  // namespace ctstream::reader
