// reader — dense tensors: plain copy, or F32/F16/BF16 conversion, whole or sliced, chunked so
// that large tensors split across threads and pread mode needs only small scratch buffers.
#include <cstring>

#include "codecs/convert.hpp"
#include "reader/internal.hpp"

namespace ctstream::reader {
namespace {
constexpr uint64_t kChunkBytes = 1ull << 20;  // per task, in source bytes
}

uint64_t decode_dense(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                      const SliceGeom& g) {
  const TensorPart& p = t.parts.front();
  const DType src = p.dtype;
  const bool convert = src != out_dtype;
  if (convert && !(is_float_output(src) && is_float_output(out_dtype)))
    fail(ck, t, ErrorKind::unsupported,
         "cannot convert " + std::string(dtype_name(src)) + " to " + std::string(dtype_name(out_dtype)) +
             " (conversion is among F32/F16/BF16; other dtypes are copied as stored)");
  const unsigned src_bits = dtype_bits(src);
  const bool sliced = g.len != g.dim || g.outer != 1 || g.inner != 1;
  if (src_bits % 8 != 0 && sliced)
    fail(ck, t, ErrorKind::unsupported, "slicing a sub-byte " + std::string(dtype_name(src)) + " tensor");
  const uint64_t need = (g.out_elems() * dtype_bits(out_dtype) + 7) / 8;
  if (out.size() < need)
    fail(ck, t, ErrorKind::buffer_too_small,
         "output holds " + std::to_string(out.size()) + " bytes, decode needs " + std::to_string(need));
  if (need == 0) return 0;
  ck.guard(p);
  if (src_bits % 8 != 0) {  // whole sub-byte tensor, copied as stored
    ck.file_of(p).read_at(p.offset, out.first(p.nbytes));
    return p.nbytes;
  }
  const uint64_t in_sz = src_bits / 8, out_sz = dtype_bits(out_dtype) / 8;
  const uint64_t run = g.len * g.inner;  // contiguous elements per outer index
  const uint64_t chunk = std::max<uint64_t>(1, kChunkBytes / in_sz);
  const uint64_t per_run = (run + chunk - 1) / chunk;
  const uint64_t tasks = g.outer * per_run;
  // Plain copies are read straight into the caller's memory (pread: no pages mapped into the
  // process); conversions read 1 MiB chunks into per-thread scratch.
  const bool direct_read = !convert;
  const codecs::ConvertFn fn = convert ? codecs::convert_kernel(src, out_dtype, codecs::active_isa()) : nullptr;
  const unsigned threads = need >= 4 * kChunkBytes ? ck.threads() : 1;
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
    fn(scratch.data(), dst, count);
  });
  return need;
}

}  // namespace ctstream::reader
