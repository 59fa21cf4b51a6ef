// reader — Format::low_rank: the original module's weight W = B @ A from its two stored factors
// (format/low_rank.hpp), computed on demand. The factors are decoded to f32 with the decoders of
// their own formats (a factor may itself be int8 / fp8 / ...), then multiplied (codecs::matmul_f32)
// in blocks of rows, each rounded to the caller's dtype straight into the caller's buffer: the
// extra memory is the factors in f32 plus one block per thread, never W in f32. Blocks lie on a
// fixed grid of rows (multiples of a size that depends on the shape only), so every row comes out
// of the same computation whatever the slice or the thread count: a row decodes to the same bits
// in a tensor-parallel shard as in the whole tensor. A dim-0 slice multiplies only the blocks
// holding its rows.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codecs/kernels.hpp"
#include "codecs/matmul.hpp"
#include "reader/internal.hpp"

namespace ctstream::reader {
namespace {
constexpr uint64_t kBlockBytes = 1u << 20;  // f32 product rows per block: ~1 MiB
}  // namespace

uint64_t decode_low_rank(const Checkpoint::Impl& ck, const TensorInfo& t, std::span<std::byte> out, DType out_dtype,
                         const SliceGeom& g, const std::optional<Slice>& slice) {
  if (t.factors.size() != 2 || t.shape.empty())
    fail(ck, t, ErrorKind::invalid_argument, "low-rank tensor without its two factors (not from this checkpoint?)");
  const TensorInfo& A = t.factors[0];  // [r, K]
  const TensorInfo& B = t.factors[1];  // [O, r]
  const uint64_t O = t.shape[0];
  const uint64_t R = A.shape.empty() ? 0 : A.shape[0];
  const uint64_t K = O ? t.numel() / O : 0;
  if (B.shape.empty() || B.shape[0] != O || R == 0 || A.numel() != R * K || B.numel() != O * R)
    fail(ck, t, ErrorKind::invalid_argument, "factor shapes do not multiply to the tensor's shape");
  if (std::max({O, R, K}) > static_cast<uint64_t>(INT32_MAX))
    fail(ck, t, ErrorKind::unsupported, "a factor dimension exceeds 2^31 - 1");
  const uint64_t osz = dtype_bits(out_dtype) / 8;  // F32 / F16 / BF16 (checked by the caller)
  const uint64_t need = require_output(ck, t, out, out_dtype, g);
  if (need == 0) return 0;

  const bool row_slice = slice && slice->dim == 0;
  const uint64_t r0 = row_slice ? g.start : 0, r1 = row_slice ? g.start + g.len : O;  // rows wanted
  const uint64_t per = std::clamp<uint64_t>(kBlockBytes / (4 * K), 8, 1024);          // the grid
  const uint64_t b0 = r0 / per * per, b1 = std::min(O, (r1 + per - 1) / per * per);   // blocks' rows
  std::vector<float> a(R * K), b((b1 - b0) * R);
  decode(ck, A, std::as_writable_bytes(std::span(a)), DType::F32, std::nullopt);
  decode(ck, B, std::as_writable_bytes(std::span(b)), DType::F32,
         b1 - b0 < O ? std::optional<Slice>(Slice{0, b0, b1}) : std::nullopt);

  const codecs::ConvertFn convert =
      out_dtype == DType::F32 ? nullptr : codecs::active_kernels().convert(DType::F32, out_dtype);
  // Where element (i, k) of W lands: rows are contiguous in the output unless a slice of dim >= 1
  // keeps a window [start, start + len) of every `span` elements of a row.
  const bool whole_rows = !slice || slice->dim == 0;
  const uint64_t span = g.dim * g.inner, sub = whole_rows ? 1 : K / span, keep = g.len * g.inner;
  const uint64_t blocks = (b1 - b0 + per - 1) / per;
  const unsigned threads = need >= 4 * kBlockBytes ? ck.threads() : 1;
  parallel_for(blocks, threads, [&](size_t blk) {
    const uint64_t i0 = b0 + blk * per, i1 = std::min(O, i0 + per);  // this block's rows of W
    const uint64_t w0 = std::max(i0, r0), w1 = std::min(i1, r1);     // the ones wanted
    thread_local std::vector<float> scratch;
    float* c;
    // F32 rows, all wanted, into a buffer floats may be stored to (a caller's buffer need not be)
    const bool in_place =
        whole_rows && !convert && w0 == i0 && w1 == i1 && reinterpret_cast<uintptr_t>(out.data()) % alignof(float) == 0;
    if (in_place) {
      c = reinterpret_cast<float*>(out.data()) + (i0 - r0) * K;
    } else {
      scratch.resize((i1 - i0) * K);
      c = scratch.data();
    }
    codecs::matmul_f32(b.data() + (i0 - b0) * R, a.data(), i1 - i0, R, K, c);
    if (in_place) return;
    for (uint64_t i = w0; i < w1; ++i) {
      const float* row = c + (i - i0) * K;
      if (whole_rows) {
        std::byte* dst = out.data() + (i - r0) * K * osz;
        if (convert) convert(row, dst, K, false);
        else std::memcpy(dst, row, K * 4);
        continue;
      }
      for (uint64_t q = 0; q < sub; ++q) {
        const float* src = row + q * span + g.start * g.inner;
        std::byte* dst = out.data() + ((i * sub + q) * keep) * osz;
        if (convert) convert(src, dst, keep, false);
        else std::memcpy(dst, src, keep * 4);
      }
    }
  });
  return need;
}

}  // namespace ctstream::reader
