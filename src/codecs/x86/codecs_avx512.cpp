// AVX-512 (F/BW/VL/DQ/VBMI/VBMI2) bitmask-expand, fused 4-bit, 8-bit and packed int1-8 dequant kernels. Bit-exact with
// the scalar references in codecs/bitmask.cpp and codecs/dequant.cpp (tests/unit/test_codecs_simd.cpp). Never reads a
// value, mask or packed byte the scalar kernel would not read (plain loads only where the row's data covers them,
// masked loads otherwise), never writes past `cols` elements.
//
// Includes: dequant.hpp is needed for the DequantSpec / DType definitions only (an aggregate and
// an enum); nothing from the C++ library it pulls in is used here, so no inline library code is
// emitted with AVX-512 instructions (nm of this object shows no weak symbols).
#include <immintrin.h>

#include "codecs/dequant.hpp"
#include "codecs/isa_kernels.hpp"
#include "codecs/simd_dispatch.hpp"
#include "codecs/x86/byte_memo.hpp"
#include "codecs/x86/pow2_scales.hpp"
#include "codecs/x86/stores.hpp"

namespace ctstream::codecs::avx512 {
namespace {

using x86::kMemoFrom;  // the table memo of codecs/x86/byte_memo.hpp
using x86::put256;     // the streaming stores of codecs/x86/stores.hpp
using x86::put512;

// Words 0-31 (w0) and 32-63 (w1) of a 64-word run at o, of which the first n (<= 64) are kept.
template <bool NT>
[[gnu::always_inline]] inline void store_words64(uint16_t* o, __m512i w0, __m512i w1, unsigned n) {
  if (n == 64) {
    put512<NT>(o, w0);
    put512<NT>(o + 32, w1);
  } else {
    _mm512_mask_storeu_epi16(o, n >= 32 ? ~0u : _bzhi_u32(~0u, n), w0);
    if (n > 32) _mm512_mask_storeu_epi16(o + 32, _bzhi_u32(~0u, n - 32), w1);
  }
}

// ---------------------------------------------------------------- bitmask expand
//
// vpexpand{b,w,d} with a register source (the memory form measured no faster on this Zen CPU).
// Values are read with plain 64-byte loads while a whole vector of the row's values remains
// (masked loads that miss the cache measured at half the speed), then with masked loads of
// exactly the values consumed.

inline uint64_t low_bits64(unsigned n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

// Mask bits [j, j + n) (n <= 64, j % 8 == 0) as an integer, reading only ceil(n / 8) mask bytes.
inline uint64_t mask_bits(const uint8_t* mask, size_t j, unsigned n) {
  const unsigned nbytes = (n + 7) / 8;
  const __m128i m = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nbytes) - 1), mask + j / 8);
  return static_cast<uint64_t>(_mm_cvtsi128_si64(m)) & low_bits64(n);
}

// Number of set mask bits in [0, cols) (the values the row holds).
size_t row_popcount(const uint8_t* mask, size_t cols) {
  size_t n = 0, i = 0;
  for (; i + 64 <= cols; i += 64) {
    uint64_t w;
    __builtin_memcpy(&w, mask + i / 8, 8);
    n += static_cast<size_t>(_mm_popcnt_u64(w));
  }
  if (i < cols) n += static_cast<size_t>(_mm_popcnt_u64(mask_bits(mask, i, static_cast<unsigned>(cols - i))));
  return n;
}

inline unsigned popcount(uint64_t m) { return static_cast<unsigned>(_mm_popcnt_u64(m)); }

// Elements of E bytes, L = 64 / E per vector: the L mask bits m expand the vector x.
template <unsigned E>
inline __m512i expand_vec(uint64_t m, __m512i x) {
  if constexpr (E == 1) return _mm512_maskz_expand_epi8(m, x);
  else if constexpr (E == 2) return _mm512_maskz_expand_epi16(static_cast<__mmask32>(m), x);
  else return _mm512_maskz_expand_epi32(static_cast<__mmask16>(m), x);
}
// The first c (<= L) elements at p, the rest zero, touching no byte beyond them.
template <unsigned E>
inline __m512i load_first(const uint8_t* p, unsigned c) {
  if constexpr (E == 1) return _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, c), p);
  else if constexpr (E == 2) return _mm512_maskz_loadu_epi16(_bzhi_u32(~0u, c), p);
  else return _mm512_maskz_loadu_epi32(static_cast<__mmask16>(_bzhi_u32(~0u, c)), p);
}
// The first n (<= L) elements of x to o.
template <unsigned E>
inline void store_first(uint8_t* o, unsigned n, __m512i x) {
  if constexpr (E == 1) _mm512_mask_storeu_epi8(o, low_bits64(n), x);
  else if constexpr (E == 2) _mm512_mask_storeu_epi16(o, _bzhi_u32(~0u, n), x);
  else _mm512_mask_storeu_epi32(o, static_cast<__mmask16>(_bzhi_u32(~0u, n)), x);
}

template <unsigned E, bool NT>
size_t expand_row(const uint8_t* mask, const uint8_t* v, size_t cols, uint8_t* o) {
  constexpr unsigned L = 64 / E;
  const size_t total = row_popcount(mask, cols);
  size_t j = 0, k = 0;
  // A streamed output off a line (16 bytes past one: glibc's malloc) starts with the columns up to
  // the next line, through a masked plain store, where they are whole mask bytes: every later
  // vector then streams a whole line. In 16-byte pieces the expand measured 0.72-0.75 of the
  // roofline there, below plain stores (1.03-1.10; bench/RESULTS.md).
  if constexpr (NT) {
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(o) & 63)) & 63;  // bytes to the next line
    if (head != 0 && head % E == 0 && head / E % 8 == 0 && head / E <= cols) {
      const unsigned n = static_cast<unsigned>(head / E);
      const uint64_t m = mask_bits(mask, 0, n);
      const unsigned c = popcount(m);
      store_first<E>(o, n, expand_vec<E>(m, load_first<E>(v, c)));
      j = n;
      k = c;
    }
  }
  for (; j + 64 <= cols; j += 64) {  // 8 mask bytes = 64 / L vectors
    uint64_t m;
    __builtin_memcpy(&m, mask + j / 8, 8);
    if (k + popcount(m & low_bits64(64 - L)) + L > total) break;  // the last vector's plain load
    for (unsigned q = 0; q < 64 / L; ++q) {
      const uint64_t mq = (m >> (L * q)) & low_bits64(L);
      __m512i x = _mm512_loadu_si512(v + k * E);
      asm("" : "+v"(x));  // keeps the load a plain vmovdqu: GCC would fold it into vpexpand's slow memory form
      put512<NT>(o + (j + L * q) * E, expand_vec<E>(mq, x));
      k += popcount(mq);
    }
  }
  for (; j < cols; j += L) {
    const unsigned n = cols - j < L ? static_cast<unsigned>(cols - j) : L;
    const uint64_t m = mask_bits(mask, j, n);
    const unsigned c = popcount(m);
    const __m512i x = expand_vec<E>(m, load_first<E>(v + k * E, c));
    if (n == L) put512<NT>(o + j * E, x);
    else store_first<E>(o + j * E, n, x);
    k += c;
  }
  return k;
}

// ---------------------------------------------------------------- fused nibble dequant
//
// Chunks of 32 columns = 16 packed bytes. Chunks inside one group use a per-group table of the
// 16 possible outputs (below, dequant_run); chunks that straddle a group boundary and the tail
// compute each column (chunk()): lane i of vector A holds the low nibble of byte p(i) (column
// 2p(i)), lane i of B its high nibble (column 2p(i)+1). For 16-bit outputs p is the identity
// and the two results interleave with one 16-bit blend; for f32 output p is chosen so that
// unpacklo/unpackhi_ps give columns 0..15 and 16..31 directly.

using simd::kBF16;
using simd::kF16;
using simd::kF32;
using simd::Kind;
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Each lane's RNE bf16 in its high 16 bits (low 16 bits: junk); NaN -> quietened, as half.hpp.
// NaN = false: the caller knows no lane is NaN, and the patch is skipped.
template <bool NaN = true>
inline __m512i bf16_round_hi(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __mmask16 odd = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x10000));
  __m512i r = _mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF));
  r = _mm512_mask_add_epi32(r, odd, r, _mm512_set1_epi32(1));
  if constexpr (!NaN) return r;
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
}
// The high words of a's 16 dwords, then b's: 32 words.
inline __m512i high_words(__m512i a, __m512i b) {
  const __m512i odd =
      _mm512_setr_epi32(0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015, 0x001B0019, 0x001F001D,
                        0x00230021, 0x00270025, 0x002B0029, 0x002F002D, 0x00330031, 0x00370035, 0x003B0039, 0x003F003D);
  return _mm512_permutex2var_epi16(a, odd, b);
}
// Tables derived from a few rounded products (the E2M1 and odd-product tables below): entry i's
// word is ((t[idx_i] + add_i) & keep_i) ^ sign_i, for t a vector of the products' bf16 words: a
// power of two added to a product's exponent, the sign of a negative code flipped, and keep =
// 0x8000 for a zero code (the sign of the product it reads, which has the scale's sign).
template <unsigned Entries>
struct DerivedWords {
  alignas(64) uint16_t idx[Entries], add[Entries], keep[Entries], sign[Entries];
};
// Entries 32q .. 32q + 31, their indices moved by `shift` words.
template <unsigned Entries>
[[gnu::always_inline]] inline __m512i derived_words(__m512i t, const DerivedWords<Entries>& d, unsigned q = 0,
                                                    __m512i shift = _mm512_setzero_si512()) {
  const auto at = [q](const uint16_t* a) { return _mm512_load_si512(a + 32 * q); };
  const __m512i w = _mm512_add_epi16(_mm512_permutexvar_epi16(_mm512_add_epi16(at(d.idx), shift), t), at(d.add));
  return _mm512_ternarylogic_epi32(w, at(d.keep), at(d.sign), 0x6A);  // (w & keep) ^ sign
}
template <bool NaN = true>  // NaN = false: as bf16_round_hi's
inline __m512 bf16_image(__m512 v) {
  return _mm512_castsi512_ps(_mm512_and_si512(bf16_round_hi<NaN>(v), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline __m512 f16_image(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, kRne)); }
// 16 bf16 words -> their values as f32 (exact).
[[gnu::always_inline]] inline __m512 bf16_words_f32(__m256i w) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16));
}
// 32 bf16 words as f16 words (RNE, overflow to infinities, NaNs quiet with their sign).
[[gnu::always_inline]] inline __m512i bf16_words_f16(__m512i w) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(bf16_words_f32(_mm512_castsi512_si256(w)), kRne)),
                            _mm512_cvtps_ph(bf16_words_f32(_mm512_extracti64x4_epi64(w, 1)), kRne), 1);
}

// The f32 image of v rounded to the natural dtype N.
template <Kind N>
inline __m512 natural_image(__m512 v) {
  if constexpr (N == kBF16) return bf16_image(v);
  else if constexpr (N == kF16) return f16_image(v);
  else return v;
}
// bf16 output: S -> D from the S image (for N = BF16 / F32 one rounding of v gives the same bits).
template <Kind N>
inline __m512i out_bf16_hi(__m512 v) {
  if constexpr (N == kF16) return bf16_round_hi(f16_image(v));
  else return bf16_round_hi(v);
}
template <Kind N>
inline __m256i out_f16(__m512 v) {
  if constexpr (N == kBF16) return _mm512_cvtps_ph(bf16_image(v), kRne);
  else return _mm512_cvtps_ph(v, kRne);  // F16 -> F16 rounding twice is rounding once
}

struct Lanes {
  __m512 a, b;
};

// Byte order fed to vpmovzxbd (see above) and the column offset of each A lane (B = A + 1).
template <Kind O>
inline __m128i byte_order() {
  if constexpr (O == kF32) return _mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
  else return _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
template <Kind O>
inline __m512i col_a() {
  if constexpr (O == kF32) return _mm512_setr_epi32(0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30);
  else return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}

template <Kind N, Kind O, bool ZP, bool NT>
[[gnu::always_inline]] inline void chunk(__m128i bytes, __m512 lutv, Lanes s, Lanes z, void* out, size_t j,
                                         uint32_t valid) {
  if constexpr (O == kF32) bytes = _mm_shuffle_epi8(bytes, byte_order<O>());
  const __m512i ia = _mm512_cvtepu8_epi32(bytes);
  const __m512i ib = _mm512_srli_epi32(ia, 4);
  __m512 a = _mm512_permutexvar_ps(ia, lutv), b = _mm512_permutexvar_ps(ib, lutv);  // uses idx bits 3:0
  if constexpr (ZP) {
    a = _mm512_sub_ps(a, z.a);
    b = _mm512_sub_ps(b, z.b);
  }
  a = _mm512_mul_ps(a, s.a);
  b = _mm512_mul_ps(b, s.b);
  if constexpr (O == kBF16) {
    const __m512i w = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(out_bf16_hi<N>(a), 16), out_bf16_hi<N>(b));
    uint16_t* o = static_cast<uint16_t*>(out) + j;
    if (valid == ~0u) put512<NT>(o, w);
    else _mm512_mask_storeu_epi16(o, valid, w);
  } else if constexpr (O == kF16) {
    const __m512i ab = _mm512_inserti64x4(_mm512_castsi256_si512(out_f16<N>(a)), out_f16<N>(b), 1);
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i w = _mm512_permutexvar_epi16(idx, ab);
    uint16_t* o = static_cast<uint16_t*>(out) + j;
    if (valid == ~0u) put512<NT>(o, w);
    else _mm512_mask_storeu_epi16(o, valid, w);
  } else {
    a = natural_image<N>(a);
    b = natural_image<N>(b);
    float* o = static_cast<float*>(out) + j;
    const __m512 lo = _mm512_unpacklo_ps(a, b), hi = _mm512_unpackhi_ps(a, b);
    if (valid == ~0u) {
      put512<NT>(o, lo);
      put512<NT>(o + 16, hi);
    } else {
      _mm512_mask_storeu_ps(o, static_cast<__mmask16>(valid), lo);
      _mm512_mask_storeu_ps(o + 16, static_cast<__mmask16>(valid >> 16), hi);
    }
  }
}

// Per-lane scale (or zero point) vectors for the chunk at column j whose first column is in
// group g (ending at column nb), n valid columns; reads only entries of groups those columns use.
template <Kind O>
[[gnu::always_inline]] inline Lanes lane_values(const float* t, size_t j, size_t g, size_t nb, size_t gs, unsigned n) {
  const __m512i ca = col_a<O>(), cb = _mm512_add_epi32(ca, _mm512_set1_epi32(1));
  if (gs == 1) {  // one entry per column: gather t[j + col] for valid columns
    const __m512i lim = _mm512_set1_epi32(static_cast<int>(n));
    return {_mm512_mask_i32gather_ps(_mm512_setzero_ps(), _mm512_cmplt_epi32_mask(ca, lim), ca, t + j, 4),
            _mm512_mask_i32gather_ps(_mm512_setzero_ps(), _mm512_cmplt_epi32_mask(cb, lim), cb, t + j, 4)};
  }
  Lanes r{_mm512_set1_ps(t[g]), _mm512_set1_ps(t[g])};
  for (size_t b = nb; b < j + n; b += gs) {  // group ++g starts at column b, inside this chunk
    ++g;
    const __m512 v = _mm512_set1_ps(t[g]);
    const __m512i off = _mm512_set1_epi32(static_cast<int>(b - j));
    r.a = _mm512_mask_mov_ps(r.a, _mm512_cmpge_epi32_mask(ca, off), v);
    r.b = _mm512_mask_mov_ps(r.b, _mm512_cmpge_epi32_mask(cb, off), v);
  }
  return r;
}

// Table path. Inside one group the output is a function of the 4-bit code alone, so the 16
// possible outputs are computed once per group with exactly the per-element operations
// (f32 lut - zp, * scale, the S and D roundings) and each column is a table lookup.

// f32 (lut[c] - zp[g]) * scale[g] for the 16 codes c.
template <bool ZP>
inline __m512 group_values(__m512 lutv, const float* scale, const float* zp, size_t g) {
  __m512 t = lutv;
  if constexpr (ZP) t = _mm512_sub_ps(t, _mm512_set1_ps(zp[g]));
  return _mm512_mul_ps(t, _mm512_set1_ps(scale[g]));
}
// The 16 output words, repeated in both halves of a 32-word vpermw table (vpermw reads index
// bits 4:0, see chunk_table16).
template <Kind N, Kind O>
inline __m512i table16(__m512 t) {
  if constexpr (O == kBF16) {
    const __m512i odd = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,  //
                                         31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutexvar_epi16(odd, out_bf16_hi<N>(t));
  } else {
    return _mm512_broadcast_i64x4(out_f16<N>(t));
  }
}
// 32 columns of 16-bit output. Byte b of the row becomes the dword b * 0x1001 (vpmaddwd): its
// low word's bits 4:0 are b & 0x1F (low nibble; bit 4 selects the duplicate half of the table),
// its high word is b >> 4 (high nibble) -- columns 2m and 2m+1 in order.
template <bool NT>
[[gnu::always_inline]] inline void chunk_table16(const uint8_t* p, __m512i tab, uint16_t* o) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i idx = _mm512_madd_epi16(x, _mm512_set1_epi32(0x1001));
  put512<NT>(o, _mm512_permutexvar_epi16(idx, tab));
}
// 32 columns of f32 output: the 16-float table through vpermps, lanes ordered as in chunk().
template <bool NT>
[[gnu::always_inline]] inline void chunk_table32(const uint8_t* p, __m512 tab, float* o) {
  const __m128i bytes = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), byte_order<kF32>());
  const __m512i ia = _mm512_cvtepu8_epi32(bytes);
  const __m512 a = _mm512_permutexvar_ps(ia, tab), b = _mm512_permutexvar_ps(_mm512_srli_epi32(ia, 4), tab);
  put512<NT>(o, _mm512_unpacklo_ps(a, b));
  put512<NT>(o + 16, _mm512_unpackhi_ps(a, b));
}

// Chunks whose columns 0-15 are in one group and 16-31 in the next (group sizes that are
// multiples of 16, e.g. nvfp4's 16): words 0-15 of a 32-word table from the first group, 16-31
// from the second; bit 4 of each index is set for columns 16-31.
template <Kind N, Kind O>
inline __m512i pair_table16(__m512 t0, __m512 t1) {
  if constexpr (O == kBF16) {
    return high_words(out_bf16_hi<N>(t0), out_bf16_hi<N>(t1));
  } else {
    return _mm512_inserti64x4(_mm512_castsi256_si512(out_f16<N>(t0)), out_f16<N>(t1), 1);
  }
}
template <bool NT>
[[gnu::always_inline]] inline void chunk_pair16(const uint8_t* p, __m512i tab, uint16_t* o) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i idx = _mm512_madd_epi16(x, _mm512_set1_epi32(0x1001));  // as in chunk_table16
  const __m512i second = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x00100010, 0x00100010, 0x00100010, 0x00100010,
                                           0x00100010, 0x00100010, 0x00100010, 0x00100010);
  // (idx & 0x000F000F) | second
  const __m512i sel = _mm512_ternarylogic_epi32(idx, _mm512_set1_epi32(0x000F000F), second, 0xEA);
  put512<NT>(o, _mm512_permutexvar_epi16(sel, tab));
}
template <bool NT>
[[gnu::always_inline]] inline void chunk_pair32(const uint8_t* p, __m512 tab0, __m512 tab1, float* o) {
  const __m128i bytes = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), byte_order<kF32>());
  const __m512i ia = _mm512_cvtepu8_epi32(bytes);
  const __m512i second = _mm512_and_si512(col_a<kF32>(), _mm512_set1_epi32(16));  // lanes of columns 16-31
  const __m512i sa = _mm512_ternarylogic_epi32(ia, _mm512_set1_epi32(0x0F), second, 0xEA);
  const __m512i sb = _mm512_or_si512(_mm512_srli_epi32(ia, 4), second);
  const __m512 a = _mm512_permutex2var_ps(tab0, sa, tab1), b = _mm512_permutex2var_ps(tab0, sb, tab1);
  put512<NT>(o, _mm512_unpacklo_ps(a, b));
  put512<NT>(o + 16, _mm512_unpackhi_ps(a, b));
}

template <Kind N, Kind O, bool ZP, bool NT>
void dequant_run(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp, size_t gs,
                 void* out) {
  const __m512 lutv = _mm512_loadu_ps(lut);
  size_t j = 0, g = 0, nb = gs;  // nb: first column after group g
  while (j + 32 <= cols) {
    if (j + 32 <= nb) {  // whole chunks inside group g: look the 16 possible outputs up
      const size_t lim = nb < cols ? nb : cols;
      const __m512 t = group_values<ZP>(lutv, scale, zp, g);
      if constexpr (O == kF32) {
        const __m512 tab = natural_image<N>(t);
        for (; j + 32 <= lim; j += 32) chunk_table32<NT>(packed + j / 2, tab, static_cast<float*>(out) + j);
      } else {
        const __m512i tab = table16<N, O>(t);
        for (; j + 32 <= lim; j += 32) chunk_table16<NT>(packed + j / 2, tab, static_cast<uint16_t*>(out) + j);
      }
    } else if (gs % 16 == 0) {  // group g ends at j + 16 (nb is a multiple of 16): two tables
      const __m512 t0 = group_values<ZP>(lutv, scale, zp, g), t1 = group_values<ZP>(lutv, scale, zp, g + 1);
      if constexpr (O == kF32)
        chunk_pair32<NT>(packed + j / 2, natural_image<N>(t0), natural_image<N>(t1), static_cast<float*>(out) + j);
      else chunk_pair16<NT>(packed + j / 2, pair_table16<N, O>(t0, t1), static_cast<uint16_t*>(out) + j);
      j += 32;
    } else {
      const Lanes s = lane_values<O>(scale, j, g, nb, gs, 32);
      Lanes z = s;
      if constexpr (ZP) z = lane_values<O>(zp, j, g, nb, gs, 32);
      chunk<N, O, ZP, NT>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + j / 2)), lutv, s, z, out, j, ~0u);
      j += 32;
    }
    while (nb <= j) {
      ++g;
      nb += gs;
    }
  }
  if (j < cols) {
    const unsigned n = static_cast<unsigned>(cols - j);  // 1..31
    const __m128i bytes = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << ((n + 1) / 2)) - 1), packed + j / 2);
    const Lanes s = lane_values<O>(scale, j, g, nb, gs, n);
    Lanes z = s;
    if constexpr (ZP) z = lane_values<O>(zp, j, g, nb, gs, n);
    chunk<N, O, ZP, NT>(bytes, lutv, s, z, out, j, (1u << n) - 1);
  }
}

// E2M1 codes (fp4: nvfp4's 16-column and mxfp4's 32-column groups) -> bf16 of a bf16 or f32
// product (or the f16 of a bf16 one: each table's bf16 words rounded to f16 once, the outputs then
// looked up), no zero points: a group's table from two roundings instead of sixteen, as in the AVX2
// file (whose comment above its is_e2m1_lut gives the proof): while a scale's exponent field is in
// 8..240, code c's word is T0 = bf16(scale) or T1 = bf16(1.5 scale) plus k << 7 for its power of
// two, the sign of codes 8-15 flipped, and codes 0 and 8 the scale's signed zero and its negation.
// T0 and T1 of 16 groups are rounded at once into one 32-word vector (T0 of group h at word h, T1
// at word 16 + h); a group's table is derived_words of it by constant indices plus that group's
// number (keep = 0x8000 for the zero codes: T0's sign is the scale's). f16: a run whose scales'
// exponent fields all lie in 114..139 has every entry an f16 normal (the AVX2 file's e2m1_groups),
// so T0 and T1 are rounded to f16 words once per run and the powers of two add k << 10.
inline bool is_e2m1_lut(const float* lut) {  // exactly e2m1_to_f32's values, -0.0 at code 8
  const __m512i want =
      _mm512_setr_epi32(0, 0x3F000000, 0x3F800000, 0x3FC00000, 0x40000000, 0x40400000, 0x40800000, 0x40C00000,
                        static_cast<int>(0x80000000u), static_cast<int>(0xBF000000u), static_cast<int>(0xBF800000u),
                        static_cast<int>(0xBFC00000u), static_cast<int>(0xC0000000u), static_cast<int>(0xC0400000u),
                        static_cast<int>(0xC0800000u), static_cast<int>(0xC0C00000u));
  return _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(lut), want) == 0xFFFF;
}
// A table's 32 words: code w & 15's (both halves the same group's; pair: words 16-31, which
// columns 16-31 look up, the next group's), reading group 0's T0 / T1 (the caller moves the
// indices to group h).
constexpr DerivedWords<32> make_e2m1_words(bool pair, bool f16 = false) {
  DerivedWords<32> d{};
  for (unsigned w = 0; w < 32; ++w) {
    const unsigned c = w & 7;  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
    const bool t1 = c == 3 || c == 5 || c == 7;
    d.idx[w] = static_cast<uint16_t>((t1 ? 16 : 0) + (pair && w >= 16 ? 1 : 0));
    const int k = c == 1 ? -1 : c == 4 || c == 5 ? 1 : c == 6 || c == 7 ? 2 : 0;
    d.add[w] = static_cast<uint16_t>(k * (f16 ? 1024 : 128));
    d.keep[w] = c == 0 ? 0x8000 : 0xFFFF;
    d.sign[w] = (w & 8) ? 0x8000 : 0;
  }
  return d;
}
inline constexpr DerivedWords<32> kE2m1Words = make_e2m1_words(false), kE2m1PairWords = make_e2m1_words(true),
                                  kE2m1WordsF16 = make_e2m1_words(false, true),
                                  kE2m1PairWordsF16 = make_e2m1_words(true, true);
// Whole groups from column 0, up to 16 a run, while every scale of the run is in range; returns
// the columns written (a whole number of groups; 16-column groups in pairs).
template <Kind O, bool NT>
size_t e2m1_groups(const uint8_t* packed, size_t cols, const float* scale, size_t gs, uint16_t* out) {
  const bool pair = gs == 16;
  const DerivedWords<32>& d = pair ? kE2m1PairWords : kE2m1Words;
  const DerivedWords<32>& d16 = pair ? kE2m1PairWordsF16 : kE2m1WordsF16;
  bool shift = false;                              // this run's t: f16 words
  const auto table = [&](__m512i t, unsigned h) {  // group h's (pair: h and h + 1)
    const __m512i at = _mm512_set1_epi16(static_cast<short>(h));
    if constexpr (O == kF16) return shift ? derived_words(t, d16, 0, at) : bf16_words_f16(derived_words(t, d, 0, at));
    else return derived_words(t, d, 0, at);
  };
  size_t j = 0;
  for (size_t g = 0;;) {
    size_t n = (cols - j) / gs;  // whole groups left
    if (pair) n &= ~size_t(1);
    if (n == 0) break;
    if (n > 16) n = 16;
    const __mmask16 m = static_cast<__mmask16>(_bzhi_u32(0xFFFF, static_cast<unsigned>(n)));
    // A short run's load masked (no read past the row's scales); whole runs plain (masked loads
    // that miss the cache measured at half the speed, as in the bitmask kernels above)
    const __m512 s = n == 16 ? _mm512_loadu_ps(scale + g) : _mm512_maskz_loadu_ps(m, scale + g);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(s), 23), _mm512_set1_epi32(0xFF));
    const __mmask16 bad = _mm512_mask_cmplt_epi32_mask(m, e, _mm512_set1_epi32(8)) |
                          _mm512_mask_cmpgt_epi32_mask(m, e, _mm512_set1_epi32(240));
    if (bad) break;
    const __m512 s15 = _mm512_mul_ps(s, _mm512_set1_ps(1.5f));
    __m512i t;
    if constexpr (O == kF16)
      shift = !(_mm512_mask_cmplt_epi32_mask(m, e, _mm512_set1_epi32(114)) |
                _mm512_mask_cmpgt_epi32_mask(m, e, _mm512_set1_epi32(139)));
    if (shift) {
      const auto f16_words = [](__m512 v) { return _mm512_cvtps_ph(bf16_image<false>(v), kRne); };  // exact here
      t = _mm512_inserti64x4(_mm512_castsi256_si512(f16_words(s)), f16_words(s15), 1);
    } else {
      t = high_words(bf16_round_hi<false>(s), bf16_round_hi<false>(s15));
    }
    if (pair)
      for (unsigned h = 0; h < n; h += 2, j += 32) chunk_pair16<NT>(packed + j / 2, table(t, h), out + j);
    else
      for (unsigned h = 0; h < n; ++h, j += 32) chunk_table16<NT>(packed + j / 2, table(t, h), out + j);
    g += n;
  }
  return j;
}

// ---------------------------------------------------------------- fused 8-bit dequant
//
// 16 columns per chunk, one group's scale (and zero point) broadcast. int8: sign-extend and
// convert. E4M3: bits (b & 0x80) << 8 | (b & 0x7F) << 7 read as f16 are the value times 2^-8
// for every code, subnormals included (f16 has 3 more exponent bits and a bias 8 higher), so
// vcvtph2ps and an exact multiply by 256 give it; S.1111.111 is NaN (float8_e4m3fn), patched.

template <bool E4M3>
inline __m512 byte_values(__m128i bytes) {
  if constexpr (!E4M3) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
  } else {
    const __m256i w = _mm256_cvtepu8_epi16(bytes);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    const __m256i h =
        _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8), _mm256_slli_epi16(mag, 7));
    const __m512 x = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.f));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F));
    // NaN keeps the code's sign, quiet, no payload: e4m3_to_f32 (codecs/minifloat.hpp).
    const __m512 q = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u))),
                        _mm512_set1_epi32(0x7FC00000)));
    return _mm512_mask_mov_ps(x, nan, q);
  }
}

template <Kind N, Kind O, bool ZP, bool E4M3, bool NT = false>
[[gnu::always_inline]] inline void byte_chunk(__m128i bytes, __m512 s, __m512 z, void* out, size_t j, __mmask16 valid) {
  __m512 p = byte_values<E4M3>(bytes);
  if constexpr (ZP) p = _mm512_sub_ps(p, z);
  p = _mm512_mul_ps(p, s);
  if constexpr (O == kBF16) {
    const __m256i w = _mm512_cvtepi32_epi16(_mm512_srli_epi32(out_bf16_hi<N>(p), 16));
    if (NT && valid == 0xFFFF) put256<NT>(static_cast<uint16_t*>(out) + j, w);
    else _mm256_mask_storeu_epi16(static_cast<uint16_t*>(out) + j, valid, w);
  } else if constexpr (O == kF16) {
    if (NT && valid == 0xFFFF) put256<NT>(static_cast<uint16_t*>(out) + j, out_f16<N>(p));
    else _mm256_mask_storeu_epi16(static_cast<uint16_t*>(out) + j, valid, out_f16<N>(p));
  } else {
    if (NT && valid == 0xFFFF) put512<NT>(static_cast<float*>(out) + j, natural_image<N>(p));
    else _mm512_mask_storeu_ps(static_cast<float*>(out) + j, valid, natural_image<N>(p));
  }
}

// Long groups with 16-bit output (channel / tensor strategies): the group's 256 possible
// outputs, computed by byte_chunk itself, become two 256-byte tables (low and high bytes of
// each word), and 64 codes at a time are looked up with vpermi2b (VBMI): four lookups, two
// blends on the codes' top bit, one interleave. Same bits as the arithmetic path by
// construction.
struct ByteTable {
  __m512i lo[4], hi[4];
};
// Always inlined, as it was before packed_run called it too: an out-of-line copy makes GCC 12 report
// the intrinsics' own _mm*_undefined_*() initializations as uninitialized (GCC PR 105593).
template <Kind N, Kind O, bool ZP, bool E4M3>
[[gnu::always_inline]] inline ByteTable byte_table(__m512 s, __m512 z) {
  alignas(64) uint16_t words[256];
  for (unsigned q = 0; q < 16; ++q) {
    const __m128i codes = _mm_add_epi8(_mm_set1_epi8(static_cast<char>(16 * q)),
                                       _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    byte_chunk<N, O, ZP, E4M3>(codes, s, z, words, 16 * q, 0xFFFF);
  }
  ByteTable t;
  for (unsigned k = 0; k < 4; ++k) {  // 64 words -> 64 low bytes and 64 high bytes
    const __m512i a = _mm512_load_si512(words + 64 * k), b = _mm512_load_si512(words + 64 * k + 32);
    t.lo[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(a)), _mm512_cvtepi16_epi8(b), 1);
    t.hi[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(a, 8))),
                                 _mm512_cvtepi16_epi8(_mm512_srli_epi16(b, 8)), 1);
  }
  return t;
}
// The 64 output words of 64 code bytes: columns 0-31 in w0, 32-63 in w1.
[[gnu::always_inline]] inline void byte_words(const ByteTable& t, __m512i c, __m512i& w0, __m512i& w1) {
  const __mmask64 top = _mm512_movepi8_mask(c);
  const __m512i lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t.lo[0], c, t.lo[1]),
                                            _mm512_permutex2var_epi8(t.lo[2], c, t.lo[3]));
  const __m512i hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t.hi[0], c, t.hi[1]),
                                            _mm512_permutex2var_epi8(t.hi[2], c, t.hi[3]));
  // unpacklo / unpackhi interleave within 128-bit lanes: words of codes 0-7, 16-23, 32-39, 48-55
  // and 8-15, 24-31, 40-47, 56-63; two qword permutes put them in column order.
  const __m512i a = _mm512_unpacklo_epi8(lo, hi), b = _mm512_unpackhi_epi8(lo, hi);
  w0 = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), b);
  w1 = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), b);
}
// Up to 64 columns from 64 code bytes (`n` of them valid) at out + j.
template <bool NT>
[[gnu::always_inline]] inline void byte_lookup(const ByteTable& t, __m512i c, uint16_t* o, unsigned n) {
  __m512i w0, w1;
  byte_words(t, c, w0, w1);
  store_words64<NT>(o, w0, w1, n);
}
constexpr size_t kByteTableFrom = 512;  // group length from which building a table pays off

// Columns [j, j1) of a row through table t (Flip: as byte_run), the codes prefetched x86::kCodesAhead
// ahead (codecs/x86/byte_memo.hpp).
template <bool NT, uint8_t Flip = 0>
inline void table_run(const ByteTable& t, const uint8_t* codes, size_t j, size_t j1, uint16_t* o) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(Flip));
  for (; j + 64 <= j1; j += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead), _MM_HINT_T0);
    byte_lookup<NT>(t, _mm512_xor_si512(_mm512_loadu_si512(codes + j), flip), o + j, 64);
  }
  if (j < j1) {
    const unsigned n = static_cast<unsigned>(j1 - j);
    byte_lookup<NT>(t, _mm512_xor_si512(_mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, n), codes + j), flip), o + j, n);
  }
}

// Block rows' tables kept between calls: byte_memo.hpp. Tag: every parameter a ByteTable depends on.
template <Kind N, Kind O, bool ZP, bool E4M3>
inline const ByteTable& memo_table(void* memo, size_t g, float scale, float zp, __m512 s, __m512 z) {
  constexpr uint32_t tag = 1u + static_cast<uint32_t>(N) + 3u * static_cast<uint32_t>(O) + 9u * ZP + 18u * E4M3;
  static_assert(tag < x86::kAvx2E4m3Tag);
  return x86::memo_table<ByteTable>(memo, g, tag, scale, ZP ? zp : 0.f,
                                    [&] { return byte_table<N, O, ZP, E4M3>(s, z); });
}

// E4M3 rows whose group scales are all positive powers of two in range (codecs/x86/pow2_scales.hpp;
// mxfp8: E8M0 scales, groups of 32), out of a bf16 or f32 product. One table (scale 1, built
// by byte_chunk: the reference's bits) serves every group: each 32 columns of a step add their
// group's k << 7 to the words of their codes other than the zeros and NaNs. Those words are the
// bf16 of the product x 2^k, which is exact (4 significant bits, the range kept normal), so also
// its f32: f32 outputs are the words widened, f16 ones the f16 RNE of them (vcvtps2ph) -- what the
// reference's bf16 or f32 product rounds to, once. Through byte_chunk these rows converted each
// code on its own: AVX-512 mxfp8 -> f16 ran at 0.38 of memset, f32 at 0.81.
inline bool pow2_scales(const float* scale, size_t n) {
  const __m512i field = _mm512_set1_epi32(0xFF << 23);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = _bzhi_u32(0xFFFF, static_cast<unsigned>(n - i < 16 ? n - i : 16));
    const __m512i b = _mm512_maskz_loadu_epi32(m, scale + i);
    const __m512i e = _mm512_and_si512(b, field);
    const __mmask16 bad =
        _mm512_mask_test_epi32_mask(m, b, _mm512_set1_epi32(static_cast<int>(x86::kPow2Clear))) |
        _mm512_mask_cmplt_epu32_mask(m, e, _mm512_set1_epi32(static_cast<int>(x86::kPow2FieldMin << 23))) |
        _mm512_mask_cmpgt_epu32_mask(m, e, _mm512_set1_epi32(static_cast<int>(x86::kPow2FieldMax << 23)));
    if (bad) return false;
  }
  return true;
}
inline const ByteTable& unit_e4m3_table() {  // built once per process, on first use
  static const ByteTable t = byte_table<kBF16, kBF16, false, true>(_mm512_set1_ps(1.f), _mm512_setzero_ps());
  return t;
}
// The 64 columns of words w0 (columns 0-31) and w1 (32-63) at out + j as O, n of them valid.
template <Kind O, bool NT>
[[gnu::always_inline]] inline void store_bf16_words64(void* out, size_t j, __m512i w0, __m512i w1, unsigned n) {
  if constexpr (O == kBF16) {
    store_words64<NT>(static_cast<uint16_t*>(out) + j, w0, w1, n);
  } else if constexpr (O == kF16) {
    store_words64<NT>(static_cast<uint16_t*>(out) + j, bf16_words_f16(w0), bf16_words_f16(w1), n);
  } else {
    float* f = static_cast<float*>(out) + j;
    const __m256i q[4] = {_mm512_castsi512_si256(w0), _mm512_extracti64x4_epi64(w0, 1), _mm512_castsi512_si256(w1),
                          _mm512_extracti64x4_epi64(w1, 1)};
    for (unsigned k = 0; k < 4; ++k) {
      if (n >= 16 * k + 16) put512<NT>(f + 16 * k, bf16_words_f32(q[k]));
      else if (n > 16 * k) _mm512_mask_storeu_ps(f + 16 * k, _bzhi_u32(0xFFFF, n - 16 * k), bf16_words_f32(q[k]));
    }
  }
}
// f16 outputs of those rows take no table: an E4M3 code's bits placed in an f16 word (sign to bit
// 15, exponent and mantissa to bits 13-7) are x 2^-8 as an f16, E4M3's subnormals f16 subnormals of
// the same scale, so vcvtph2ps gives x 2^-8 exactly and a multiply by 2^(k + 8) gives x 2^k exactly
// (the kPow2Field* bounds keep it an f32 normal); vcvtps2ph rounds that once, as the table path
// rounds its bf16 words. The NaN codes (0x7F, 0xFF) get the f16 words the table path gives them.
// Per 64 columns this is 3 shuffles and 8 conversions, where the table path's lookup, interleave
// and widening take 12 shuffles on top of 4 conversions (Intel cores run 512-bit shuffles on one
// port: HACKING.md).
struct E4m3F16Nan {
  __m512i pos, neg;  // the f16 words of codes 0x7F and 0xFF, in every word
};
inline const E4m3F16Nan& e4m3_f16_nan() {
  static const E4m3F16Nan n = [] {
    __m512i w0, w1;
    byte_words(unit_e4m3_table(), _mm512_set1_epi8(0x7F), w0, w1);
    const __m512i pos = bf16_words_f16(w0);
    byte_words(unit_e4m3_table(), _mm512_set1_epi8(static_cast<char>(0xFF)), w0, w1);
    return E4m3F16Nan{pos, bf16_words_f16(w0)};
  }();
  return n;
}
// 32 codes (sign-extended to words: the sign in bits 15-7) -> their f16 words times s (2^(k + 8) in
// every lane).
[[gnu::always_inline]] inline __m512i e4m3_f16_words(__m512i w, __m512 s) {
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(w, 7), _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  const auto half = [s](__m256i q) { return _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(q), s), kRne); };
  return _mm512_inserti64x4(_mm512_castsi256_si512(half(_mm512_castsi512_si256(h))),
                            half(_mm512_extracti64x4_epi64(h, 1)), 1);
}
template <bool NT>
void pow2_run_f16(const uint8_t* codes, size_t cols, const float* scale, size_t gs, uint16_t* o) {
  const E4m3F16Nan& nan = e4m3_f16_nan();
  size_t g = 0, g_end = gs;  // as pow2_run
  for (size_t j = 0; j < cols; j += 64) {
    while (j >= g_end) ++g, g_end += gs;
    const unsigned n = cols - j < 64 ? static_cast<unsigned>(cols - j) : 64;
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead), _MM_HINT_T0);
    const __m512i c = _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, n), codes + j);
    const __m512 s0 = _mm512_set1_ps(scale[g] * 256.f);
    __m512i w0 = e4m3_f16_words(_mm512_cvtepi8_epi16(_mm512_castsi512_si256(c)), s0), w1 = w0;
    if (n > 32)
      w1 = e4m3_f16_words(_mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(c, 1)),
                          j + 32 >= g_end ? _mm512_set1_ps(scale[g + 1] * 256.f) : s0);
    const __mmask64 pos = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8(0x7F)),
                    neg = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8(static_cast<char>(0xFF)));
    if (pos | neg) [[unlikely]] {
      w0 = _mm512_mask_mov_epi16(_mm512_mask_mov_epi16(w0, static_cast<__mmask32>(pos), nan.pos),
                                 static_cast<__mmask32>(neg), nan.neg);
      w1 = _mm512_mask_mov_epi16(_mm512_mask_mov_epi16(w1, static_cast<__mmask32>(pos >> 32), nan.pos),
                                 static_cast<__mmask32>(neg >> 32), nan.neg);
    }
    store_words64<NT>(o + j, w0, w1, n);
  }
}
template <Kind O, bool NT>
void pow2_run(const uint8_t* codes, size_t cols, const float* scale, size_t gs, void* o) {
  if constexpr (O == kF16) return pow2_run_f16<NT>(codes, cols, scale, gs, static_cast<uint16_t*>(o));
  const ByteTable& t = unit_e4m3_table();
  const auto shift = [&](size_t group) {  // k << 7 of that group
    uint32_t b;
    __builtin_memcpy(&b, scale + group, 4);
    return _mm512_set1_epi16(static_cast<short>((static_cast<int>(b >> 23) - 127) * 128));
  };
  // The group of column j, and where it ends, kept as j steps (no division per step); gs >= 32, so
  // column j + 32 is in that group or the next.
  size_t g = 0, g_end = gs;
  for (size_t j = 0; j < cols; j += 64) {
    while (j >= g_end) ++g, g_end += gs;
    const unsigned n = cols - j < 64 ? static_cast<unsigned>(cols - j) : 64;
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead), _MM_HINT_T0);
    const __m512i c = _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, n), codes + j);
    __m512i w0, w1;
    byte_words(t, c, w0, w1);
    // Codes other than +-0 and the NaNs (their 7 low bits neither all clear nor all set).
    const __mmask64 scaled =
        _mm512_test_epi8_mask(c, _mm512_set1_epi8(0x7F)) &
        ~_mm512_cmpeq_epi8_mask(_mm512_or_si512(c, _mm512_set1_epi8(static_cast<char>(0x80))), _mm512_set1_epi8(-1));
    w0 = _mm512_mask_add_epi16(w0, static_cast<__mmask32>(scaled), w0, shift(g));
    if (n > 32)
      w1 = _mm512_mask_add_epi16(w1, static_cast<__mmask32>(scaled >> 32), w1, shift(j + 32 >= g_end ? g + 1 : g));
    store_bf16_words64<O, NT>(o, j, w0, w1, n);
  }
}

// Flip = 0x80: the codes are offset binary (u, value u - 128: pack-quantized 8-bit codes), which are
// int8 codes with the top bit flipped; one XOR per load makes them the int8 codes of every path below.
template <Kind N, Kind O, bool ZP, bool E4M3, bool NT, uint8_t Flip = 0>
void byte_run(const uint8_t* codes, size_t cols, const float* scale, const float* zp, size_t gs, void* memo,
              void* out) {
  if constexpr (E4M3 && !ZP && N != kF16) {
    // Groups of 32 to 511 columns (longer ones take a table of their own below), each 32 columns of
    // a step inside one group.
    if (gs % 32 == 0 && gs < kByteTableFrom && pow2_scales(scale, (cols + gs - 1) / gs))
      return pow2_run<O, NT>(codes, cols, scale, gs, out);
  }
  __m512 z = _mm512_setzero_ps();
  for (size_t j0 = 0, g = 0; j0 < cols; j0 += gs, ++g) {
    const size_t j1 = cols - j0 > gs ? j0 + gs : cols;
    const __m512 s = _mm512_set1_ps(scale[g]);
    if constexpr (ZP) z = _mm512_set1_ps(zp[g]);
    size_t j = j0;
    if constexpr (O != kF32) {
      if (j1 - j0 >= kByteTableFrom) {  // a table of its own (kept in registers)
        table_run<NT, Flip>(byte_table<N, O, ZP, E4M3>(s, z), codes, j0, j1, static_cast<uint16_t*>(out));
        continue;
      }
      if (memo && j1 - j0 >= kMemoFrom) {  // a table shared with the rows that repeat this scale
        table_run<NT, Flip>(memo_table<N, O, ZP, E4M3>(memo, g, scale[g], ZP ? zp[g] : 0.f, s, z), codes, j0, j1,
                            static_cast<uint16_t*>(out));
        continue;
      }
    }
    for (; j + 16 <= j1; j += 16)
      byte_chunk<N, O, ZP, E4M3, NT>(
          _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j)), _mm_set1_epi8(char(Flip))), s, z,
          out, j, 0xFFFF);
    if (j < j1) {
      const __mmask16 m = static_cast<__mmask16>((1u << (j1 - j)) - 1);
      byte_chunk<N, O, ZP, E4M3, NT>(_mm_xor_si128(_mm_maskz_loadu_epi8(m, codes + j), _mm_set1_epi8(char(Flip))), s, z,
                                     out, j, m);
    }
  }
}

// ---------------------------------------------------------------- fused packed-int dequant
//
// Dense pack-quantized codes (code i at stream bits [i*b, i*b+b) of little-endian int32 words:
// compressed_tensors/compressors/pack_quantized/helpers.py `unpack_from_int32`), 64 per step, unpacked
// in registers as unpack_int8 does: vpermb gathers the 8 * b bytes of codes 8k..8k+7 into qword
// q, vpmultishiftqb takes each code's 8 bits at bit i*b into byte i, an AND keeps b of them (u =
// 0..2^b-1; table lookups skip it, see table_codes). The values u - 2^(b-1) are then the int8 weights of byte_run: a
// 64-column step inside one group looks up the group's 2^b outputs, computed by byte_chunk itself (the same bits by
// construction); other steps run byte_chunk on each 16 columns, one call per group they touch.

// 8-bit codes are whole bytes in offset binary: byte_run with the top bit flipped (dequant_packed); packed_run takes
// 1 to 7 bits.
//
// Tables indexed by u: the low and the high bytes of the 2^b output words, looked up with one
// vpermb (b <= 6: 64 entries) or vpermi2b (b = 7: 128), for each of the two. Codes are gathered into qwords in the
// order 0, 4, 1, 5, 2, 6, 3, 7 (of the eight 8-code runs), so that unpacklo/unpackhi_epi8 of the two looked-up byte
// vectors give columns 0-31 and 32-63 in order.
//
// The table is built in registers (a first version stored byte_chunk's words and reloaded them;
// at group size 128 that build cost more than the group's lookups): entry e's value e - 2^(b-1) as f32 (exact), minus
// the zero point, times the scale, then pair_table16 -- the f32 operations of byte_chunk and the roundings of
// out_bf16_hi / out_f16, so the words are the 8-bit kernel's bits -- packs 32 entries into 32
// words; vpermb / vpermi2b on the even and the odd bytes split them into the two tables.
//
// Lanes 0..15 as f32 codes, modulo 2^b for b <= 4: a table built from them repeats its 2^b
// entries over every lane, so lookups may use the unpacked bytes' bits above b unmasked (vpermb
// reads index bits 5:0, vpermi2b 6:0, vpermps 3:0, vpermt2ps 4:0; larger tables have 2^b lanes of
// their own, 32 entries repeat in the upper half of a 64-byte table).
inline __m512 table_codes(unsigned bits) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_cvtepi32_ps(bits <= 4 ? _mm512_and_si512(lane, _mm512_set1_epi32((1 << bits) - 1)) : lane);
}
struct PackedTable {
  __m512i lo[2], hi[2];
};
template <Kind N, Kind O, bool ZP>
[[gnu::always_inline]] inline __m512i table_words(unsigned bits, unsigned k, __m512 s,
                                                  __m512 z) {  // words of entries 32k..32k+31
  __m512 p0 = _mm512_add_ps(table_codes(bits),
                            _mm512_set1_ps(static_cast<float>(static_cast<int>(32 * k) - (1 << (bits - 1)))));
  __m512 p1 = _mm512_add_ps(p0, _mm512_set1_ps(16.f));  // exact: small integers
  if constexpr (ZP) {
    p0 = _mm512_sub_ps(p0, z);
    p1 = _mm512_sub_ps(p1, z);
  }
  p0 = _mm512_mul_ps(p0, s);
  p1 = bits <= 4 ? p0 : _mm512_mul_ps(p1, s);  // 16 entries: words 16-31 repeat 0-15 (table_codes)
  return pair_table16<N, O>(p0, p1);
}
// 6- and 7-bit codes to bf16 of a bf16 or f32 product, no zero points: the values v = u - 2^(b-1)
// are w 2^k with w odd (|v| <= 2^(b-1)). While every product is normal and finite, f32(v s) is
// f32(w s) times 2^k exactly and RNE to bf16 commutes with that power of two, so entry u's word is
// bf16(w s)'s plus k << 7, with v's sign (RNE is symmetric), and v = 0 the scale's signed zero:
// derived_words of the 2^(b-2) odd products' words (one or two roundings of 16) instead of 2^b
// roundings. An exponent field of 1..246 keeps |s| <= every nonzero product < 2^127.
// Shift: where the exponent field starts, 7 (bf16 words) or 10 (f16 words, below).
template <unsigned B, unsigned Shift = 7>
constexpr DerivedWords<(1u << B)> make_odd_words() {
  DerivedWords<(1u << B)> t{};
  for (int u = 0; u < (1 << B); ++u) {
    const int v = u - (1 << (B - 1));
    unsigned w = static_cast<unsigned>(v < 0 ? -v : v), k = 0;
    while (w != 0 && w % 2 == 0) w /= 2, ++k;
    t.idx[u] = static_cast<uint16_t>(w == 0 ? 0 : (w - 1) / 2);  // w's product is word (w - 1) / 2
    t.add[u] = static_cast<uint16_t>(k << Shift);
    t.keep[u] = w == 0 ? 0x8000 : 0xFFFF;
    t.sign[u] = v < 0 ? 0x8000 : 0;
  }
  return t;
}
inline constexpr DerivedWords<64> kOddWords6 = make_odd_words<6>();
inline constexpr DerivedWords<128> kOddWords7 = make_odd_words<7>(), kOddWords7F16 = make_odd_words<7, 10>();
inline bool odd_table_scale(int scale_bits) {
  const unsigned e = (static_cast<unsigned>(scale_bits) >> 23) & 0xFF;
  return e >= 1 && e <= 246;
}
// 7-bit codes to f16 of a bf16 product, the same way in f16 words: where every entry's bf16 is an
// f16 normal, the f16 of 2^k bf16(w s) is f16(bf16(w s))'s word plus k << 10 (a power of two moves
// the exponent field alone), so the 32 odd products' words are rounded to f16 once and derived from
// there. |s| >= 2^-14 (field >= 113) keeps every nonzero entry (>= bf16(s)) normal, |s| < 2^9
// (field <= 135) keeps the largest, bf16(64 s) < 2^15, below f16's overflow. The general table
// (128 products, each rounded twice) held these rows to 0.66 of memset; converting each derived
// bf16 table to f16 instead (four conversions) measured no faster, and for 6-bit codes slower.
inline bool odd_f16_scale(int scale_bits) {
  const unsigned e = (static_cast<unsigned>(scale_bits) >> 23) & 0xFF;
  return e >= 113 && e <= 135;
}
// F16 (7-bit codes, odd_f16_scale): the odd products' words rounded to f16, derived in f16 words.
template <unsigned B, bool F16 = false>
[[gnu::always_inline]] inline PackedTable odd_packed_table(__m512 s, __m512i even, __m512i odd) {
  static_assert(!F16 || B == 7);
  const DerivedWords<(1u << B)>& c = *[] {
    if constexpr (B == 6) return &kOddWords6;
    else if constexpr (F16) return &kOddWords7F16;
    else return &kOddWords7;
  }();
  const __m512 w = _mm512_setr_ps(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i r0 = bf16_round_hi<false>(_mm512_mul_ps(w, s));
  const __m512i r1 = B == 7 ? bf16_round_hi<false>(_mm512_mul_ps(_mm512_add_ps(w, _mm512_set1_ps(32.f)), s)) : r0;
  __m512i t = high_words(r0, r1);  // word i: bf16(f32((2i + 1) s))
  if constexpr (F16) t = bf16_words_f16(t);
  PackedTable pt;
  for (unsigned k = 0; 2 * k < (1u << B) / 32; ++k) {
    const __m512i w0 = derived_words(t, c, 2 * k), w1 = derived_words(t, c, 2 * k + 1);
    pt.lo[k] = _mm512_permutex2var_epi8(w0, even, w1);
    pt.hi[k] = _mm512_permutex2var_epi8(w0, odd, w1);
  }
  return pt;
}
template <Kind N, Kind O, bool ZP>
[[gnu::always_inline]] inline PackedTable packed_table(unsigned bits, __m512 s, __m512 z) {
  alignas(64) static constexpr uint8_t kEven[64] = {
      0,  2,  4,  6,  8,  10, 12,  14,  16,  18,  20,  22,  24,  26,  28,  30,  32,  34,  36,  38, 40, 42,
      44, 46, 48, 50, 52, 54, 56,  58,  60,  62,  64,  66,  68,  70,  72,  74,  76,  78,  80,  82, 84, 86,
      88, 90, 92, 94, 96, 98, 100, 102, 104, 106, 108, 110, 112, 114, 116, 118, 120, 122, 124, 126};
  const __m512i even = _mm512_load_si512(kEven), odd = _mm512_add_epi8(even, _mm512_set1_epi8(1));
  PackedTable t;
  if (O == kBF16 && bits <= 5) {  // bytes 2 and 3 of the dwords of out_bf16_hi, without packing words first
    __m512 p0 = _mm512_add_ps(table_codes(bits), _mm512_set1_ps(-static_cast<float>(1 << (bits - 1))));
    __m512 p1 = _mm512_add_ps(p0, _mm512_set1_ps(16.f));
    if constexpr (ZP) {
      p0 = _mm512_sub_ps(p0, z);
      p1 = _mm512_sub_ps(p1, z);
    }
    const __m512i d0 = out_bf16_hi<N>(_mm512_mul_ps(p0, s));
    const __m512i b2 = _mm512_add_epi8(_mm512_add_epi8(even, even), _mm512_set1_epi8(2)),
                  b3 = _mm512_add_epi8(b2, _mm512_set1_epi8(1));
    if (bits <= 4) {  // vpermb reads index bits 5:0: entries 16-63 repeat 0-15 (table_codes)
      t.lo[0] = _mm512_permutexvar_epi8(b2, d0);
      t.hi[0] = _mm512_permutexvar_epi8(b3, d0);
    } else {
      const __m512i d1 = out_bf16_hi<N>(_mm512_mul_ps(p1, s));
      t.lo[0] = _mm512_permutex2var_epi8(d0, b2, d1);
      t.hi[0] = _mm512_permutex2var_epi8(d0, b3, d1);
    }
    return t;
  }
  if (bits <= 5) {  // 32 words; vpermb reads index bits 5:0, so table bytes 32-63 repeat words 0-31
    const __m512i w = table_words<N, O, ZP>(bits, 0, s, z);
    t.lo[0] = _mm512_permutexvar_epi8(even, w);
    t.hi[0] = _mm512_permutexvar_epi8(odd, w);
    return t;
  }
  const int sbits = _mm_cvtsi128_si32(_mm512_castsi512_si128(_mm512_castps_si512(s)));
  if constexpr (O == kBF16 && N != kF16 && !ZP) {
    if (odd_table_scale(sbits)) {
      if (bits == 6) return odd_packed_table<6>(s, even, odd);
      if (bits == 7) return odd_packed_table<7>(s, even, odd);
    }
  }
  if constexpr (O == kF16 && N == kBF16 && !ZP) {
    if (bits == 7 && odd_f16_scale(sbits)) return odd_packed_table<7, true>(s, even, odd);
  }
  for (unsigned k = 0; 2 * k < (1u << bits) / 32; ++k) {
    const __m512i w0 = table_words<N, O, ZP>(bits, 2 * k, s, z), w1 = table_words<N, O, ZP>(bits, 2 * k + 1, s, z);
    t.lo[k] = _mm512_permutex2var_epi8(w0, even, w1);
    t.hi[k] = _mm512_permutex2var_epi8(w0, odd, w1);
  }
  return t;
}
// Up to 64 columns from u in the interleaved code order above (`n` of them valid) at o; R: table
// registers of each of lo and hi (1: b <= 6, 2: b = 7).
template <unsigned R, bool NT>
[[gnu::always_inline]] inline void packed_lookup(const PackedTable& t, __m512i u, uint16_t* o, unsigned n) {
  __m512i lo, hi;
  if constexpr (R == 1) {
    lo = _mm512_permutexvar_epi8(u, t.lo[0]);
    hi = _mm512_permutexvar_epi8(u, t.hi[0]);
  } else {
    lo = _mm512_permutex2var_epi8(t.lo[0], u, t.lo[1]);
    hi = _mm512_permutex2var_epi8(t.hi[0], u, t.hi[1]);
  }
  const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
  store_words64<NT>(o, w0, w1, n);
}
template <bool NT>
[[gnu::always_inline]] inline void packed_lookup(const PackedTable& t, unsigned bits, __m512i u, uint16_t* o,
                                                 unsigned n) {
  if (bits <= 6) packed_lookup<1, NT>(t, u, o, n);
  else packed_lookup<2, NT>(t, u, o, n);
}

// How a 64-column step inside a group of `len` columns is looked up (16-bit outputs): 1 = a
// PackedTable, 2 = the 8-bit kernel's memo ByteTable over the values, 0 = no table (byte_chunk,
// 4 calls a step). A PackedTable of 2^b entries costs about 2^b / 16 such calls to build; at
// group size 128 (bench/RESULTS.md, issue 30 packed kernel) 7 bits measured the same either way.
inline int packed_table_kind(unsigned bits, size_t len, bool memo) {
  if (bits <= 6) return 1;  // at most one step's worth, and the group holds a step
  if (memo && len >= kMemoFrom) return 2;
  return len >= 128 ? 1 : 0;
}

// The unpacked bytes of a step, in the order `idx` gathers (vpermb + vpmultishiftqb, unmasked).
inline __m512i step_codes(__m512i in, __m512i idx, __m512i ctl) {
  return _mm512_multishift_epi64_epi8(ctl, _mm512_permutexvar_epi8(idx, in));
}

// `count` whole steps of codes from p (a step's bytes apart) at o, through t (R: as packed_lookup).
template <unsigned R, bool NT>
[[gnu::always_inline]] inline void packed_steps(const PackedTable& t, const uint8_t* p, uint64_t step, size_t count,
                                                __m512i idx, __m512i ctl, uint16_t* o) {
  for (size_t i = 0; i < count; ++i)
    packed_lookup<R, NT>(t, step_codes(_mm512_loadu_si512(p + i * step), idx, ctl), o + 64 * i, 64);
}

template <Kind N, Kind O, bool ZP, bool NT>
void packed_run(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp, size_t gs,
                void* memo, void* out) {
  const uint64_t nbytes = (cols * bits + 7) / 8, step = 8ull * bits;
  alignas(64) uint8_t nat[64], il[64], ctl[64];
  for (unsigned q = 0; q < 64; ++q) {
    const unsigned run = q / 8, il_run = run % 2 ? 4 + run / 2 : run / 2;  // interleaved order 0, 4, 1, 5, ...
    nat[q] = static_cast<uint8_t>(run * bits + q % 8);
    il[q] = static_cast<uint8_t>(il_run * bits + q % 8);
    ctl[q] = static_cast<uint8_t>((q % 8) * bits);
  }
  const __m512i vnat = _mm512_load_si512(nat), vil = _mm512_load_si512(il), vctl = _mm512_load_si512(ctl);
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1u << bits) - 1));
  const __m512i half = _mm512_set1_epi8(static_cast<char>(1u << (bits - 1)));
  PackedTable pt{};
  __m512 ft0 = _mm512_setzero_ps(), ft1 = ft0;  // f32 output's table
  const ByteTable* bt = nullptr;
  int kind = 0;
  size_t j = 0, b = 0, g = 0, g0 = 0;  // group g = columns [g0, g0 + gs)
  if constexpr (O != kF32) {
    // Groups of whole steps, each looked up through its own PackedTable and read with plain loads,
    // in one tight loop: at group size 128 the general loop's per-step group and load bookkeeping
    // cost as much as the lookups. The row's last steps (masked loads) go on below.
    const size_t steps = gs / 64;
    if (gs != 0 && gs % 64 == 0 && packed_table_kind(bits, gs, memo != nullptr) == 1) {
      // The table width chosen once, outside the loop: a test of `bits` per group (packed_lookup's
      // runtime overload) measured 16-35 % slower in the BM_dequant_packed_l2 rows.
      simd::with_flag(bits <= 6, [&](auto one_reg) {
        constexpr unsigned R = decltype(one_reg)::value ? 1 : 2;
        for (; cols - g0 >= gs && nbytes - b >= step * (steps - 1) + 64; ++g, g0 += gs, b += step * steps) {
          const PackedTable t =
              packed_table<N, O, ZP>(bits, _mm512_set1_ps(scale[g]), ZP ? _mm512_set1_ps(zp[g]) : _mm512_setzero_ps());
          packed_steps<R, NT>(t, words + b, step, steps, vil, vctl, static_cast<uint16_t*>(out) + g0);
        }
      });
      j = g0;
    }
  }
  for (size_t tg = ~size_t(0); j < cols; j += 64, b += step) {  // tg: the group of the table held
    const unsigned n = cols - j < 64 ? static_cast<unsigned>(cols - j) : 64;
    // A plain load while 64 of the row's bytes remain, else exactly the bytes of this step.
    const __m512i in =
        nbytes - b >= 64
            ? _mm512_loadu_si512(words + b)
            : _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, static_cast<unsigned>(nbytes - b < step ? nbytes - b : step)),
                                      words + b);
    while (j - g0 >= gs) {
      ++g;
      g0 += gs;
    }
    if constexpr (O != kF32) {
      const size_t g1 = cols - g0 > gs ? g0 + gs : cols;
      if (j + n <= g1) {
        if (tg != g) {
          kind = packed_table_kind(bits, g1 - g0, memo != nullptr);
          if (kind) {
            const __m512 s = _mm512_set1_ps(scale[g]), z = ZP ? _mm512_set1_ps(zp[g]) : _mm512_setzero_ps();
            if (kind == 1) pt = packed_table<N, O, ZP>(bits, s, z);
            else bt = &memo_table<N, O, ZP, false>(memo, g, scale[g], ZP ? zp[g] : 0.f, s, z);
          }
          tg = g;
        }
        if (kind == 1) {
          // Unmasked: the table repeats its 2^b entries over the index bits the lookup reads.
          uint16_t* o = static_cast<uint16_t*>(out);
          packed_lookup<NT>(pt, bits, step_codes(in, vil, vctl), o + j, n);
          // The whole steps after this one in the group, read with plain loads, in one tight loop:
          // the step above carried the group and load bookkeeping, they need none.
          const size_t kg = (g1 - j - n) / 64, kb = nbytes - b >= 64 + step ? (nbytes - b - 64) / step : 0;
          const size_t k = kg < kb ? kg : kb;
          simd::with_flag(bits <= 6, [&](auto one_reg) {
            packed_steps<decltype(one_reg)::value ? 1 : 2, NT>(pt, words + b + step, step, k, vil, vctl, o + j + 64);
          });
          j += 64 * k;
          b += step * k;
          continue;
        }
        if (kind == 2) {
          const __m512i u = _mm512_and_si512(step_codes(in, vnat, vctl), mask);
          byte_lookup<NT>(*bt, _mm512_sub_epi8(u, half), static_cast<uint16_t*>(out) + j, n);
          continue;
        }
      }
    } else {
      // f32 output, <= 5 bits: the group's 2^b outputs (byte_chunk's products, natural_image) in one or
      // two registers, vpermps / vpermt2ps over the codes widened to dwords.
      const size_t g1 = cols - g0 > gs ? g0 + gs : cols;
      if (bits <= 5 && j + n <= g1) {
        if (tg != g) {
          const __m512 s = _mm512_set1_ps(scale[g]);
          __m512 p0 = _mm512_add_ps(table_codes(bits), _mm512_set1_ps(-static_cast<float>(1 << (bits - 1))));
          __m512 p1 = _mm512_add_ps(p0, _mm512_set1_ps(16.f));
          if constexpr (ZP) {
            p0 = _mm512_sub_ps(p0, _mm512_set1_ps(zp[g]));
            p1 = _mm512_sub_ps(p1, _mm512_set1_ps(zp[g]));
          }
          ft0 = natural_image<N>(_mm512_mul_ps(p0, s));
          ft1 = natural_image<N>(_mm512_mul_ps(p1, s));
          tg = g;
        }
        const __m512i u = _mm512_multishift_epi64_epi8(vctl, _mm512_permutexvar_epi8(vnat, in));  // unmasked, as above
        float* o = static_cast<float*>(out) + j;
        const __m128i q[4] = {_mm512_castsi512_si128(u), _mm512_extracti32x4_epi32(u, 1),
                              _mm512_extracti32x4_epi32(u, 2), _mm512_extracti32x4_epi32(u, 3)};
        for (unsigned k = 0; k < 4 && 16 * k < n; ++k) {
          const __m512i idx = _mm512_cvtepu8_epi32(q[k]);
          const __m512 v = bits <= 4 ? _mm512_permutexvar_ps(idx, ft0) : _mm512_permutex2var_ps(ft0, idx, ft1);
          if (n - 16 * k >= 16) put512<NT>(o + 16 * k, v);
          else _mm512_mask_storeu_ps(o + 16 * k, static_cast<__mmask16>(_bzhi_u32(~0u, n - 16 * k)), v);
        }
        continue;
      }
    }
    // No table: byte_chunk on each 16 columns, once per group among them (masked stores); a step
    // inside one group (7 and 8 bits at group size 128) without the per-chunk group search.
    __m512i v = _mm512_sub_epi8(_mm512_and_si512(step_codes(in, vnat, vctl), mask), half);
    if (n == 64 && j + 64 - g0 <= gs) {
      const __m512 sv = _mm512_set1_ps(scale[g]), zv = ZP ? _mm512_set1_ps(zp[g]) : _mm512_setzero_ps();
      byte_chunk<N, O, ZP, false, NT>(_mm512_castsi512_si128(v), sv, zv, out, j, 0xFFFF);
      byte_chunk<N, O, ZP, false, NT>(_mm512_extracti32x4_epi32(v, 1), sv, zv, out, j + 16, 0xFFFF);
      byte_chunk<N, O, ZP, false, NT>(_mm512_extracti32x4_epi32(v, 2), sv, zv, out, j + 32, 0xFFFF);
      byte_chunk<N, O, ZP, false, NT>(_mm512_extracti32x4_epi32(v, 3), sv, zv, out, j + 48, 0xFFFF);
      continue;
    }
    size_t gg = g, gg0 = g0;
    for (size_t c = j; c < j + n; c += 16, v = _mm512_alignr_epi32(v, v, 4)) {
      const size_t c1 = j + n - c < 16 ? j + n : c + 16;
      const __m128i x = _mm512_castsi512_si128(v);
      for (size_t a = c; a < c1;) {
        while (a - gg0 >= gs) {
          ++gg;
          gg0 += gs;
        }
        const size_t e = c1 - gg0 > gs ? gg0 + gs : c1;
        const __mmask16 m = static_cast<__mmask16>(_bzhi_u32(~0u, static_cast<unsigned>(e - c)) &
                                                   ~_bzhi_u32(~0u, static_cast<unsigned>(a - c)));
        byte_chunk<N, O, ZP, false, NT>(x, _mm512_set1_ps(scale[gg]), ZP ? _mm512_set1_ps(zp[gg]) : _mm512_setzero_ps(),
                                        out, c, m);
        a = e;
      }
    }
  }
}

}  // namespace

size_t bitmask_expand_1(const uint8_t* m, const void* v, size_t c, void* o, bool stream) noexcept {
  return stream ? expand_row<1, true>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o))
                : expand_row<1, false>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_2(const uint8_t* m, const void* v, size_t c, void* o, bool stream) noexcept {
  return stream ? expand_row<2, true>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o))
                : expand_row<2, false>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_4(const uint8_t* m, const void* v, size_t c, void* o, bool stream) noexcept {
  return stream ? expand_row<4, true>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o))
                : expand_row<4, false>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}

// 64 codes per step from the 8 * bits bytes that hold them: vpermb puts bytes [k*b, k*b + 8) in
// qword k (codes 8k..8k+7 start at its bit 0), vpmultishiftqb takes the 8 bits at bit j*b of it
// into byte j, and the mask and a byte subtraction give u - 2^(b-1). Masked loads read only the
// row's ceil(cols * b / 8) bytes.
void unpack_int8(const uint8_t* words, unsigned bits, size_t cols, int8_t* out) noexcept {
  const uint64_t nbytes = (cols * bits + 7) / 8, step = 8ull * bits;
  alignas(64) uint8_t idx[64], ctl[64];
  for (unsigned q = 0; q < 64; ++q) {
    idx[q] = static_cast<uint8_t>((q / 8) * bits + q % 8);
    ctl[q] = static_cast<uint8_t>((q % 8) * bits);
  }
  const __m512i vidx = _mm512_load_si512(idx), vctl = _mm512_load_si512(ctl);
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1u << bits) - 1));
  const __m512i half = _mm512_set1_epi8(static_cast<char>(1u << (bits - 1)));
  for (size_t i = 0, b = 0; i < cols; i += 64, b += step) {
    const uint64_t avail = nbytes - b < step ? nbytes - b : step;
    const __m512i in = _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, static_cast<unsigned>(avail)), words + b);
    const __m512i u = _mm512_and_si512(_mm512_multishift_epi64_epi8(vctl, _mm512_permutexvar_epi8(vidx, in)), mask);
    const __m512i v = _mm512_sub_epi8(u, half);
    if (cols - i >= 64) _mm512_storeu_si512(out + i, v);
    else _mm512_mask_storeu_epi8(out + i, _bzhi_u64(~0ull, static_cast<unsigned>(cols - i)), v);
  }
}

void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* out) noexcept {
  const size_t gs = static_cast<size_t>(spec.group_size);
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      simd::with_flag(spec.stream, [&](auto nt) {
        constexpr Kind N = decltype(n)::value, O = decltype(o)::value;
        constexpr bool Z = decltype(z)::value, NT = decltype(nt)::value;
        size_t j = 0;  // columns done by the E2M1 tables: whole groups
        // f16 of a bf16 product: the bf16 words rounded; of an f32 or f16 one, no bf16 word holds it
        if constexpr (((O == kBF16 && N != kF16) || (O == kF16 && N == kBF16)) && !Z)
          if ((gs == 16 || gs == 32) && is_e2m1_lut(lut))
            j = e2m1_groups<O, NT>(packed, cols, scale, gs, static_cast<uint16_t*>(out));
        if (j < cols)
          dequant_run<N, O, Z, NT>(packed + j / 2, cols - j, lut, scale + j / gs, Z ? zp + j / gs : zp, gs,
                                   static_cast<unsigned char*>(out) + j * (O == kF32 ? 4 : 2));
      });
    });
  });
}

void dequant_byte(const uint8_t* codes, size_t cols, ::ctstream::codecs::ByteCode code, const float* scale,
                  const float* zp, const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept {
  const size_t gs = static_cast<size_t>(spec.group_size);
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      simd::with_flag(code == ::ctstream::codecs::ByteCode::e4m3, [&](auto e4m3) {
        simd::with_flag(spec.stream, [&](auto nt) {
          byte_run<decltype(n)::value, decltype(o)::value, decltype(z)::value, decltype(e4m3)::value,
                   decltype(nt)::value>(codes, cols, scale, zp, gs, memo, out);
        });
      });
    });
  });
}

void dequant_packed(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept {
  const size_t gs = static_cast<size_t>(spec.group_size);
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      simd::with_flag(spec.stream, [&](auto nt) {
        constexpr Kind N = decltype(n)::value, O = decltype(o)::value;
        constexpr bool Z = decltype(z)::value, NT = decltype(nt)::value;
        if (bits == 8) byte_run<N, O, Z, false, NT, 0x80>(words, cols, scale, zp, gs, memo, out);
        else packed_run<N, O, Z, NT>(words, bits, cols, scale, zp, gs, memo, out);
      });
    });
  });
}
}  // namespace ctstream::codecs::avx512
