// codecs — the per-element arithmetic of every decode, written once for two targets: the CPU
// scalar reference kernels (convert.cpp, dequant.cpp, the SIMD kernels' tails, the decoders) and
// the CUDA kernels (src/cuda/) call these same functions, so the bit-exact fixture tests of the
// host build exercise the exact arithmetic a GPU runs. Under nvcc every function is
// `__host__ __device__` (CTSTREAM_HD); elsewhere they are plain inline C++.
//
// Rules that keep host and device bit-identical: only f32 add / subtract / multiply / divide
// (IEEE round-to-nearest-even on both; the CUDA build passes --fmad=false -prec-div=true and the
// C++ build -ffp-contract=off, so no fused multiply-add is formed), integer bit manipulation, and
// exact int -> f32 conversions. No tables in memory (a device function has no host statics).
//
// F32 <-> F16 / BF16: round-to-nearest-even; NaNs stay NaN (quietened, sign and leading payload
// bits kept, as x86 F16C does); Inf stays Inf; subnormals are rounded, not flushed.
// Small float formats to f32, exactly (every value of these formats is an f32):
// F8_E4M3 = float8_e4m3fn (bias 7, no Inf, S.1111.111 = NaN, max 448); F8_E5M2 (bias 15,
// IEEE-like Inf/NaN); FP4 E2M1 nibble s|e1e0|m (values 0 .5 1 1.5 2 3 4 6,
// compressed_tensors/compressors/nvfp4/helpers.py `unpack_fp4_from_uint8`); FP6 E2M3 code
// s|eem m m (max 7.5, compressed_tensors/compressors/mxfp6/helpers.py); E8M0 = 2^(e-127), 255 -> +Inf
// (compressed_tensors/compressors/mx_utils.py `decompress_mx_scale` computes 2**(e-127) in bf16,
// which overflows to +Inf at e = 255).
#pragma once
#include <bit>
#include <cstdint>

#include "ctstream/dtype.hpp"

#if defined(__CUDACC__)
#define CTSTREAM_HD __host__ __device__
#else
#define CTSTREAM_HD
#endif

namespace ctstream::codecs {

CTSTREAM_HD inline uint32_t f32_bits(float f) noexcept {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
CTSTREAM_HD inline float f32_from_bits(uint32_t u) noexcept {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}
CTSTREAM_HD inline double f64_from_bits(uint64_t u) noexcept {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return std::bit_cast<double>(u);
#endif
}

// ---- little-endian loads at any alignment (the stored parts are little-endian) ---------------
CTSTREAM_HD inline uint16_t load_le16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>(p[0] | (static_cast<uint32_t>(p[1]) << 8));
}
CTSTREAM_HD inline uint32_t load_le32(const uint8_t* p) noexcept {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
CTSTREAM_HD inline uint64_t load_le64(const uint8_t* p) noexcept {
  return static_cast<uint64_t>(load_le32(p)) | (static_cast<uint64_t>(load_le32(p + 4)) << 32);
}

// ---- F32 <-> BF16 / F16 ------------------------------------------------------------------------
CTSTREAM_HD inline uint16_t f32_to_bf16(uint32_t x) noexcept {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
CTSTREAM_HD inline uint32_t bf16_to_f32(uint16_t h) noexcept { return static_cast<uint32_t>(h) << 16; }

CTSTREAM_HD inline uint16_t f32_to_f16(uint32_t x) noexcept {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to Inf
  if (a >= 0x38800000u)                                                // normal in f16
    return static_cast<uint16_t>(sign | ((a - 0x38000000u + 0xFFFu + ((a >> 13) & 1u)) >> 13));
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

CTSTREAM_HD inline uint32_t f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u);
  if (e == 0) {
    if (m == 0) return sign;
    e = 1;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    m &= 0x3FFu;
  }
  return sign | ((e + 112u) << 23) | (m << 13);
}

// ---- small float formats -> f32 ------------------------------------------------------------------
CTSTREAM_HD inline float e4m3_to_f32(uint8_t v) noexcept {
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 3) & 0xF, m = v & 0x7;
  if (e == 0xF && m == 0x7) return f32_from_bits(s | 0x7FC00000u);
  if (e == 0) return f32_from_bits(s | f32_bits(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return f32_from_bits(s | ((e + 120) << 23) | (m << 20));
}

CTSTREAM_HD inline float e5m2_to_f32(uint8_t v) noexcept {
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 2) & 0x1F, m = v & 0x3;
  if (e == 0x1F) return f32_from_bits(s | 0x7F800000u | (m << 21) | (m ? 0x400000u : 0u));
  if (e == 0) return f32_from_bits(s | f32_bits(static_cast<float>(m) * 1.52587890625e-05f));  // m * 2^-16
  return f32_from_bits(s | ((e + 112) << 23) | (m << 21));
}

/// FP4 E2M1 nibble (low 4 bits of v) -> f32; code 8 is -0.0. Exponent field e (bias 1), one
/// mantissa bit m: e = 0 is the subnormal m * 0.5, otherwise (1 + m/2) * 2^(e-1).
CTSTREAM_HD inline float e2m1_to_f32(uint8_t v) noexcept {
  const uint32_t s = static_cast<uint32_t>(v & 0x8) << 28;
  const uint32_t e = (v >> 1) & 0x3, m = v & 0x1;
  if (e == 0) return f32_from_bits(s | (m ? 0x3F000000u : 0u));  // 0.5 or 0
  return f32_from_bits(s | ((e + 126) << 23) | (m << 22));
}

/// FP6 E2M3 code (low 6 bits) -> f32: index m < 8 -> m/8, else (1 + (m%8)/8) * 2^(m/8 - 1).
CTSTREAM_HD inline float e2m3_to_f32(uint8_t v) noexcept {
  const uint32_t m = v & 0x1F;
  const float mag = m < 8 ? static_cast<float>(m) / 8.f
                          : (1.f + static_cast<float>(m % 8) / 8.f) * static_cast<float>(1u << (m / 8)) / 2.f;
  return (v & 0x20) ? -mag : mag;
}

/// E8M0 scale -> f32 (2^(e-127); e=255 -> +Inf as the reference computes it).
CTSTREAM_HD inline float e8m0_to_f32(uint8_t e) noexcept {
  if (e == 255) return f32_from_bits(0x7F800000u);
  if (e == 0) return f32_from_bits(0x00400000u);  // 2^-127, an f32 subnormal
  return f32_from_bits(static_cast<uint32_t>(e) << 23);
}

// ---- the dense safetensors float dtypes, as torch's `.to(torch.float32)` reads them ----------

/// float8_e4m3fnuz: bias 8, no Inf, no -0; 0x80 is the only NaN.
CTSTREAM_HD inline float e4m3fnuz_to_f32(uint8_t v) noexcept {
  if (v == 0x80) return f32_from_bits(0x7FC00000u);
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 3) & 0xF, m = v & 0x7;
  if (e == 0) return f32_from_bits(s | f32_bits(static_cast<float>(m) * 0.0009765625f));  // m * 2^-10
  return f32_from_bits(s | ((e + 119) << 23) | (m << 20));
}

/// float8_e5m2fnuz: bias 16, no Inf, no -0; 0x80 is the only NaN.
CTSTREAM_HD inline float e5m2fnuz_to_f32(uint8_t v) noexcept {
  if (v == 0x80) return f32_from_bits(0x7FC00000u);
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 2) & 0x1F, m = v & 0x3;
  if (e == 0) return f32_from_bits(s | f32_bits(static_cast<float>(m) * 7.62939453125e-06f));  // m * 2^-17
  return f32_from_bits(s | ((e + 111) << 23) | (m << 21));
}

/// float8_e8m0fnu as torch reads it: 2^(e-127), 0xFF is NaN (the MX scale decode above gives
/// +Inf there, as compressed-tensors computes 2**(e-127) in bf16).
CTSTREAM_HD inline float e8m0fnu_to_f32(uint8_t e) noexcept {
  if (e == 255) return f32_from_bits(0x7FC00000u);
  return e8m0_to_f32(e);
}

// ---- dense elements ------------------------------------------------------------------------------

/// Element k of a dense tensor of float dtype `src` (F32, F16, BF16, F64, the F8 variants, F4:
/// two per byte, element 2k in the low nibble) as f32, the way torch's `.to(torch.float32)` reads
/// it (F64 rounds to nearest). Other dtypes give 0 (callers refuse them first).
CTSTREAM_HD inline float widen_element(DType src, const uint8_t* base, uint64_t k) noexcept {
  switch (src) {
    case DType::F32: return f32_from_bits(load_le32(base + 4 * k));
    case DType::F16: return f32_from_bits(f16_to_f32(load_le16(base + 2 * k)));
    case DType::BF16: return f32_from_bits(bf16_to_f32(load_le16(base + 2 * k)));
    case DType::F64: return static_cast<float>(f64_from_bits(load_le64(base + 8 * k)));
    case DType::F8_E4M3: return e4m3_to_f32(base[k]);
    case DType::F8_E5M2: return e5m2_to_f32(base[k]);
    case DType::F8_E4M3FNUZ: return e4m3fnuz_to_f32(base[k]);
    case DType::F8_E5M2FNUZ: return e5m2fnuz_to_f32(base[k]);
    case DType::F8_E8M0: return e8m0fnu_to_f32(base[k]);
    case DType::F4: return e2m1_to_f32(static_cast<uint8_t>(k % 2 ? base[k / 2] >> 4 : base[k / 2] & 0xF));
    default: return 0.f;
  }
}

/// f32 bits -> the bits of `out` (F32: unchanged; F16 / BF16: one round-to-nearest-even step),
/// in the low 16 bits for the 2-byte dtypes.
CTSTREAM_HD inline uint32_t narrow_f32(uint32_t v, DType out) noexcept {
  if (out == DType::BF16) return f32_to_bf16(v);
  if (out == DType::F16) return f32_to_f16(v);
  return v;
}

// ---- dequantization --------------------------------------------------------------------------------

/// Rounds f32 bits to S (BF16, F16 or F32) and returns the exact f32 image of the S value.
CTSTREAM_HD inline uint32_t round_to(uint32_t v, DType s) noexcept {
  if (s == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (s == DType::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

/// The last step of every dequantization: f32 `v` rounded to S, then converted to D (one RNE
/// step from the exact S value; S == D gives back the same bits). Returns D's bits (2-byte
/// dtypes in the low 16 bits).
CTSTREAM_HD inline uint32_t dequant_finish(float v, DType natural, DType out) noexcept {
  return narrow_f32(round_to(f32_bits(v), natural), out);
}

/// One dequantized element, the compressed-tensors sequence (codecs/dequant.hpp): x (exact f32
/// image of the stored value) minus zero point zp (when has_zp), times scale, rounded to S and
/// converted to D. The subtraction is a torch op on S tensors, so it is rounded to S, unless
/// `exact_sub` (integer codes and zero points: x - zp is exact in every S, so rounding is a no-op
/// and the kernels skip it).
CTSTREAM_HD inline uint32_t dequant_element(float x, float scale, bool has_zp, float zp, bool exact_sub, DType natural,
                                            DType out) noexcept {
  float d = x;
  if (has_zp) d = exact_sub ? x - zp : f32_from_bits(round_to(f32_bits(x - zp), natural));
  return dequant_finish(d * scale, natural, out);
}

/// Exact f32 image of one stored scalar of a scale / zero-point / quantized-value part (F32, BF16,
/// F16, F8_E4M3, F8_E8M0, U8 = E8M0 when `e8m0` else an integer, I8). Other dtypes give 0: the
/// format table admits no other.
CTSTREAM_HD inline float stored_to_f32(DType d, const uint8_t* p, bool e8m0) noexcept {
  switch (d) {
    case DType::F32: return f32_from_bits(load_le32(p));
    case DType::BF16: return f32_from_bits(bf16_to_f32(load_le16(p)));
    case DType::F16: return f32_from_bits(f16_to_f32(load_le16(p)));
    case DType::F8_E4M3: return e4m3_to_f32(*p);
    case DType::U8: return e8m0 ? e8m0_to_f32(*p) : static_cast<float>(*p);
    case DType::F8_E8M0: return e8m0_to_f32(*p);
    case DType::I8: return static_cast<float>(static_cast<int8_t>(*p));
    default: return 0.f;
  }
}

// ---- packed integer codes --------------------------------------------------------------------------

/// Raw `bits`-wide (1..8) code i of a stream of little-endian int32 words; word k is at
/// `words + k * word_stride` bytes (4 for a row; a column of a matrix packed along rows has a
/// larger stride). dense = the 0.18+ layout (code i at stream bits [i*b, i*b+b), codes straddle
/// words: compressed_tensors/compressors/pack_quantized/helpers.py `unpack_from_int32`);
/// otherwise the <= 0.17 layout (32/b codes per word at bits b*(i % (32/b)), rest unused).
CTSTREAM_HD inline uint32_t int_code(const uint8_t* words, uint64_t word_stride, unsigned bits, bool dense,
                                     uint64_t i) noexcept {
  const uint32_t mask = (1u << bits) - 1;
  if (dense) {
    const uint64_t bit = i * bits;
    const uint64_t w = bit >> 5;
    const unsigned sh = static_cast<unsigned>(bit & 31);
    uint64_t v = load_le32(words + w * word_stride) >> sh;
    if (sh + bits > 32) v |= static_cast<uint64_t>(load_le32(words + (w + 1) * word_stride)) << (32 - sh);
    return static_cast<uint32_t>(v) & mask;
  }
  const uint64_t pf = 32 / bits;
  return (load_le32(words + (i / pf) * word_stride) >> (bits * (i % pf))) & mask;
}
/// Offset-binary value of a code: u - 2^(bits-1), as f32 (exact).
CTSTREAM_HD inline float int_code_value(uint32_t u, unsigned bits) noexcept {
  return static_cast<float>(u) - static_cast<float>(1u << (bits - 1));
}

/// FP6 E2M3 code j of a row of mxfp6 bytes: every 3 bytes hold 4 codes, code j of a group =
/// (b0 | b1<<8 | b2<<16) >> 6j (mxfp6/helpers.py).
CTSTREAM_HD inline uint8_t fp6_code(const uint8_t* row, uint64_t j) noexcept {
  const uint8_t* b = row + 3 * (j / 4);
  const uint32_t word = b[0] | (static_cast<uint32_t>(b[1]) << 8) | (static_cast<uint32_t>(b[2]) << 16);
  return static_cast<uint8_t>((word >> (6 * (j % 4))) & 0x3F);
}

// ---- bitmask sparsity ------------------------------------------------------------------------------

/// Set bits of mask byte `b` below bit `j` (0..7): the rank of element j among its byte's values.
CTSTREAM_HD inline unsigned mask_rank_in_byte(uint8_t b, unsigned j) noexcept {
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__popc(b & ((1u << j) - 1)));
#else
  return static_cast<unsigned>(std::popcount(static_cast<unsigned>(b & ((1u << j) - 1))));
#endif
}

}  // namespace ctstream::codecs
