// reader — dense tensors: plain copy, or F32/F16/BF16 conversion, whole or sliced, chunked so
// that large tensors split across threads and pread mode needs only small scratch buffers.
#include <cstring>

#include "codecs/dequant.hpp"
#include "codecs/kernels.hpp"
#include "reader/internal.hpp"

namespace ctstream::reader {
namespace {
constexpr uint64_t kChunkBytes = 1ull << 20;  // per task, in source bytes
}  // namespace

namespace {

// F64 / F8 variants / F4 -> F32 / F16 / BF16, in chunks of elements (any element offset: an F4
// chunk reads the bytes its nibbles live in).
uint64_t decode_widened(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                        const SliceGeom& g) {
  const TensorPart& p = t.parts.front();
  const unsigned bits = dtype_bits(p.dtype), out_sz = dtype_bits(out_dtype) / 8;
  const uint64_t run = g.len * g.inner;
  const uint64_t chunk = 64u << 10;  // elements per task
  const uint64_t per_run = (run + chunk - 1) / chunk;
  const codecs::ConvertFn fn =
      out_dtype == DType::F32 ? nullptr : codecs::active_kernels().convert(DType::F32, out_dtype);
  const bool stream = g.out_elems() * out_sz >= codecs::kStreamStoresFrom;  // as run_rows decides
  parallel_for(g.outer * per_run, g.out_elems() >= 4 * chunk ? ck.threads() : 1, [&](size_t task) {
    const uint64_t o = task / per_run, c = task % per_run;
    const uint64_t first = c * chunk, count = std::min(chunk, run - first);
    const uint64_t e0 = (o * g.dim + g.start) * g.inner + first;  // first source element
    const uint64_t b0 = e0 * bits / 8, b1 = ((e0 + count) * bits + 7) / 8;
    thread_local std::vector<std::byte> raw;
    thread_local std::vector<float> f;
    raw.resize(b1 - b0);
    ck.file_of(p).read_at(p.offset + b0, raw);
    f.resize(count);
    // Element e0 sits at element e0 - b0 * 8 / bits of the bytes read (0 or 1 for F4).
    codecs::widen_to_f32(p.dtype, raw.data(), e0 - b0 * 8 / bits, count, f.data());
    std::byte* dst = out.data() + (o * run + first) * out_sz;
    if (fn) {
      fn(f.data(), dst, count, stream);
      if (stream) codecs::store_fence();  // this task's streamed stores, before the join hands them on
    } else {
      std::memcpy(dst, f.data(), count * 4);
    }
  });
  return g.out_elems() * out_sz;
}

}  // namespace

uint64_t decode_dense(const Checkpoint::Impl& ck, const DecodePlan& plan, std::span<std::byte> out, DType out_dtype,
                      const SliceGeom& g) {
  const TensorInfo& t = *plan.t;
  if (!plan.main) fail(ck, t, ErrorKind::invalid_argument, "tensor has no stored part");
  const TensorPart& p = *plan.main;
  const DType src = p.dtype;
  const bool convert = src != out_dtype;
  // F64, the F8 variants and F4 are widened to f32 first (codecs::widen_to_f32), then rounded;
  // plan.refusal() refused every other conversion.
  const bool widen = convert && is_float(src) && !is_float_output(src);
  const unsigned src_bits = dtype_bits(src);
  const uint64_t need = require_output(ck, t, out, out_dtype, g);
  if (need == 0) return 0;
  ck.guard(p);
  if (widen) return decode_widened(ck, t, out, out_dtype, g);
  if (src_bits % 8 != 0) {  // whole sub-byte tensor, copied as stored
    ck.file_of(p).read_at(p.offset, out.first(p.nbytes));
    return p.nbytes;
  }
  const uint64_t in_sz = src_bits / 8, out_sz = dtype_bits(out_dtype) / 8;
  const uint64_t run = g.len * g.inner;  // contiguous elements per outer index
  // Plain copies are read straight into the caller's memory (pread: no pages mapped into the
  // process); conversions read 1 MiB chunks into per-thread scratch.
  const bool direct_read = !convert;
  const uint64_t range_begin = p.offset + g.start * g.inner * in_sz,  // the bytes this copy reads
      range_end = p.offset + ((g.outer - 1) * g.dim + g.start) * g.inner * in_sz + run * in_sz;
  // A plain copy of bytes not in the page cache is read by one thread: the kernel's readahead then
  // follows one sequential stream ahead of it, where two threads' interleaved 1 MiB reads of the
  // same file measured slower cold (small models, 2 threads: bench/RESULTS.md, "Cold loads: dense
  // copies"); resident bytes split across threads. Cold or warm from the range's first and last MiB
  // (a lookup of every page of a large embedding costs ~40 us per 64 MiB; a tensor's pages come and
  // go together, read or evicted).
  const io::File& f = ck.file_of(p);
  const bool large = need >= 4 * kChunkBytes;  // worth splitting across threads
  const bool cold =
      direct_read && large && !(f.cached(range_begin, kChunkBytes) && f.cached(range_end - kChunkBytes, kChunkBytes));
  const uint64_t chunk = std::max<uint64_t>(1, kChunkBytes / in_sz);
  const uint64_t per_run = (run + chunk - 1) / chunk;
  const uint64_t tasks = g.outer * per_run;
  const codecs::ConvertFn fn = convert ? codecs::active_kernels().convert(src, out_dtype) : nullptr;
  // Conversions into a large output stream past the caches (non-temporal stores), as run_rows'
  // rows do: bf16 -> f32 1.15-1.18 of memset's bandwidth against 0.95-0.98 (bench/RESULTS.md).
  const bool stream = need >= codecs::kStreamStoresFrom;
  const unsigned threads = large && !cold ? ck.threads() : 1;
  parallel_for(tasks, threads, [&](size_t task) {
    const uint64_t o = task / per_run, c = task % per_run;
    const uint64_t first = c * chunk, count = std::min(chunk, run - first);
    const uint64_t src_elem = (o * g.dim + g.start) * g.inner + first;
    std::byte* dst = out.data() + (o * run + first) * out_sz;
    if (direct_read) {
      ck.file_of(p).read_at(p.offset + src_elem * in_sz, {dst, count * in_sz});
      return;
    }
    thread_local std::vector<std::byte> scratch;
    scratch.resize(count * in_sz);
    ck.file_of(p).read_at(p.offset + src_elem * in_sz, scratch);
    fn(scratch.data(), dst, count, stream);
    if (stream) codecs::store_fence();  // this task's streamed stores, before the join hands them on
  });
  return need;
}

}  // namespace ctstream::reader
