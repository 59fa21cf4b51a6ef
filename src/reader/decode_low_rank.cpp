// reader — Format::low_rank: the original module's weight W = B @ A from its two stored factors
// (format/low_rank.hpp), computed on demand. The factors are decoded to f32 with the decoders of
// their own formats (a factor may itself be int8 / fp8 / ...), then multiplied by OpenBLAS's
// SGEMM in blocks of rows: each block is rounded to the caller's dtype straight into the
// caller's buffer, so the extra memory is the factors in f32 plus one block per thread - never
// W in f32. A dim-0 slice (a tensor-parallel row shard) decodes and multiplies only its rows of B.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codecs/kernels.hpp"
#include "reader/internal.hpp"

namespace ctstream::reader {
namespace {

constexpr uint64_t kBlockBytes = 1u << 20;  // f32 product rows per SGEMM call: ~1 MiB

/// Sets the calling thread's OpenMP thread count for the scope: OpenBLAS (its OpenMP build)
/// threads an SGEMM by omp_get_max_threads() outside a parallel region and runs it on one
/// thread inside one, so this keeps a decode within the threads it was given.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : prev_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(prev_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int prev_;
};

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
    fail(ck, t, ErrorKind::unsupported, "a factor dimension exceeds the 2^31 - 1 a BLAS call takes");
  const uint64_t osz = dtype_bits(out_dtype) / 8;
  const uint64_t need = g.out_elems() * osz;
  if (out.size() < need)
    fail(ck, t, ErrorKind::buffer_too_small,
         "output holds " + std::to_string(out.size()) + " bytes, decode needs " + std::to_string(need));
  if (need == 0) return 0;

  const bool row_slice = slice && slice->dim == 0;
  const uint64_t r0 = row_slice ? g.start : 0, rows = row_slice ? g.len : O;
  std::vector<float> a(R * K), b(rows * R);
  decode(ck, A, std::as_writable_bytes(std::span(a)), DType::F32, std::nullopt);
  decode(ck, B, std::as_writable_bytes(std::span(b)), DType::F32,
         row_slice ? std::optional<Slice>(Slice{0, r0, r0 + rows}) : std::nullopt);

  const codecs::ConvertFn convert =
      out_dtype == DType::F32 ? nullptr : codecs::active_kernels().convert(DType::F32, out_dtype);
  // Where element (i, k) of the product block lands: rows of W are contiguous in the output
  // unless a slice of dim >= 1 keeps a window [start, start + len) of every `span` elements.
  const bool whole_rows = !slice || slice->dim == 0;
  const uint64_t span = g.dim * g.inner, sub = whole_rows ? 1 : K / span, keep = g.len * g.inner;
  const uint64_t per = std::clamp<uint64_t>(kBlockBytes / (4 * K), 8, 1024);
  const uint64_t blocks = (rows + per - 1) / per;
  const unsigned threads = need >= 4 * kBlockBytes ? ck.threads() : 1;
  ScopedOmpThreads one(1);  // each block's SGEMM on its own thread; the blocks spread over `threads`
  parallel_for(blocks, threads, [&](size_t blk) {
    const uint64_t i0 = blk * per, n = std::min(rows, i0 + per) - i0;
    thread_local std::vector<float> scratch;
    float* c;
    if (whole_rows && !convert) {
      c = reinterpret_cast<float*>(out.data()) + i0 * K;  // F32 out: the product lands in place
    } else {
      scratch.resize(n * K);
      c = scratch.data();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(K),
                static_cast<int>(R), 1.0f, b.data() + i0 * R, static_cast<int>(R), a.data(), static_cast<int>(K), 0.0f,
                c, static_cast<int>(K));
    if (whole_rows) {
      if (convert) convert(c, out.data() + i0 * K * osz, n * K);
      return;
    }
    for (uint64_t i = 0; i < n; ++i)
      for (uint64_t q = 0; q < sub; ++q) {
        const float* src = c + i * K + q * span + g.start * g.inner;
        std::byte* dst = out.data() + (((i0 + i) * sub + q) * keep) * osz;
        if (convert) convert(src, dst, keep);
        else std::memcpy(dst, src, keep * 4);
      }
  });
  return need;
}

}  // namespace ctstream::reader
