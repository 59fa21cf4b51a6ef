// AVX2 (+F16C, BMI2) bitmask-expand, fused 4-bit and fused 8-bit dequant kernels. Bit-exact with the scalar
// references in codecs/bitmask.cpp and codecs/dequant.cpp (tests/unit/test_codecs_simd.cpp).
// Never reads a value, mask or packed byte the scalar kernel would not read (AVX2 has no
// byte-masked loads: vector loads are used only while a whole vector of the row's values
// remains, the rest goes through zero-padded stack copies), never writes past `cols` elements.
//
// Includes: dequant.hpp is needed for the DequantSpec / DType definitions only (an aggregate and
// an enum); nothing from the C++ library it pulls in is used here, so no inline library code is
// emitted with AVX2 instructions (nm of this object shows no weak symbols).
#include <immintrin.h>

#include "codecs/dequant.hpp"
#include "codecs/isa_kernels.hpp"
#include "codecs/simd_dispatch.hpp"
#include "codecs/x86/byte_memo.hpp"
#include "codecs/x86/pow2_scales.hpp"
#include "codecs/x86/stores.hpp"

namespace ctstream::codecs::avx2 {
namespace {

using x86::put128;  // the streaming stores of codecs/x86/stores.hpp
using x86::put256;

// ---------------------------------------------------------------- bitmask expand
//
// Per mask byte a table entry of shuffle indices: output element i takes value number
// popcount(m & ((1 << i) - 1)) when bit i is set, else zero.

struct ExpandTables {
  uint64_t b1[9][256];  // pshufb bytes for 8 one-byte elements (0x80 = zero), indices + [c]
  uint8_t b2[256][16];  // pshufb bytes for 8 two-byte elements
  uint64_t b4[256];     // vpermd indices for 8 four-byte elements as signed bytes (-1 = zero)
};

constexpr ExpandTables make_tables() {
  ExpandTables t{};
  for (unsigned m = 0; m < 256; ++m) {
    unsigned k = 0;
    uint64_t e1 = 0, e4 = 0;
    for (unsigned i = 0; i < 8; ++i) {
      const bool set = (m >> i) & 1;
      e1 |= static_cast<uint64_t>(set ? k : 0x80u) << (8 * i);
      e4 |= static_cast<uint64_t>(set ? k : 0xFFu) << (8 * i);
      t.b2[m][2 * i] = static_cast<uint8_t>(set ? 2 * k : 0x80u);
      t.b2[m][2 * i + 1] = static_cast<uint8_t>(set ? 2 * k + 1 : 0x80u);
      if (set) ++k;
    }
    for (unsigned c = 0; c <= 8; ++c) t.b1[c][m] = e1 + c * 0x0101010101010101ull;  // 0x80 + c: still zero
    t.b4[m] = e4;
  }
  return t;
}
alignas(64) constexpr ExpandTables kTables = make_tables();

inline unsigned pc8(unsigned m) { return static_cast<unsigned>(_mm_popcnt_u32(m)); }

// Number of set mask bits in [0, cols) (the values the row holds).
size_t row_popcount(const uint8_t* mask, size_t cols) {
  size_t n = 0, i = 0;
  const size_t full = cols / 8;
  for (; i + 8 <= full; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, mask + i, 8);
    n += static_cast<size_t>(_mm_popcnt_u64(w));
  }
  for (; i < full; ++i) n += pc8(mask[i]);
  if (cols % 8) n += pc8(mask[full] & ((1u << (cols % 8)) - 1));
  return n;
}

// One step expands W columns from the mask bytes at m, reading values at v, writing W elements
// at o; it returns the values consumed. reach(m): how many bytes from v the step loads.

// 32 one-byte elements: 128-bit lane 0 expands mask bytes 0-1 from v, lane 1 bytes 2-3 from
// v + c0 + c1; each lane's pshufb control is two 8-byte table entries, the second offset by the
// first byte's popcount.
struct Step1 {
  static constexpr unsigned W = 32, E = 1;
  static unsigned reach(const uint8_t* m) { return pc8(m[0]) + pc8(m[1]) + 16; }
  template <bool NT>
  static unsigned step(const uint8_t* m, const uint8_t* v, uint8_t* o) {
    const unsigned m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3];
    const unsigned c0 = pc8(m0), c01 = c0 + pc8(m1), c2 = pc8(m2);
    const __m256i x =
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(v + c01), reinterpret_cast<const __m128i*>(v));
    const __m128i ctl0 = _mm_castpd_si128(
        _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kTables.b1[0][m0]))),
                     reinterpret_cast<const double*>(&kTables.b1[c0][m1])));
    const __m128i ctl1 = _mm_castpd_si128(
        _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kTables.b1[0][m2]))),
                     reinterpret_cast<const double*>(&kTables.b1[c2][m3])));
    put256<NT>(o, _mm256_shuffle_epi8(x, _mm256_set_m128i(ctl1, ctl0)));
    return c01 + c2 + pc8(m3);
  }
};
// 32 two-byte elements, two vectors: lane 0 of each expands its first mask byte from v, lane 1
// its second from v + 2 * (values of the first).
struct Step2 {
  static constexpr unsigned W = 32, E = 2;
  static unsigned reach(const uint8_t* m) { return 2 * (pc8(m[0]) + pc8(m[1]) + pc8(m[2])) + 16; }
  static __m256i half(unsigned m0, unsigned m1, unsigned c0, const uint8_t* v) {
    const __m256i x =
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(v + 2 * c0), reinterpret_cast<const __m128i*>(v));
    const __m256i ctl = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(kTables.b2[m1]),
                                            reinterpret_cast<const __m128i*>(kTables.b2[m0]));
    return _mm256_shuffle_epi8(x, ctl);
  }
  template <bool NT>
  static unsigned step(const uint8_t* m, const uint8_t* v, uint8_t* o) {
    const unsigned c0 = pc8(m[0]), c01 = c0 + pc8(m[1]), c2 = pc8(m[2]);
    put256<NT>(o, half(m[0], m[1], c0, v));
    put256<NT>(o + 32, half(m[2], m[3], c2, v + 2 * c01));
    return c01 + c2 + pc8(m[3]);
  }
};
// 8 four-byte elements: vpermd by the table's indices, lanes with index -1 zeroed by blendv.
struct Step4 {
  static constexpr unsigned W = 8, E = 4;
  static unsigned reach(const uint8_t*) { return 32; }
  template <bool NT>
  static unsigned step(const uint8_t* m, const uint8_t* v, uint8_t* o) {
    const __m256i idx = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kTables.b4[m[0]])));
    const __m256i x = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)), idx);
    put256<NT>(o, _mm256_blendv_ps(_mm256_castsi256_ps(x), _mm256_setzero_ps(), _mm256_castsi256_ps(idx)));
    return pc8(m[0]);
  }
};

// Whole steps straight from `values` while the step's loads stay inside the row's values; then
// the rest of the values (fewer than 64 bytes: fewer than the stopped step's reach, which is at
// most 64, or than the last partial step's W elements) are copied into a zero-padded 128-byte
// stack buffer that every remaining step may over-read (position < 64, reach <= 64); the last
// partial step expands a copy of its mask bytes (padding bits cleared) into a stack buffer of
// which only the columns before `cols` are copied out.
template <class S, bool NT>
size_t expand_row(const uint8_t* mask, const uint8_t* v, size_t cols, uint8_t* o) {
  constexpr unsigned W = S::W, E = S::E;
  const size_t total = row_popcount(mask, cols);
  size_t j = 0, k = 0;
  for (; j + W <= cols; j += W) {
    if (k * E + S::reach(mask + j / 8) > total * E) break;
    k += S::template step<NT>(mask + j / 8, v + k * E, o + j * E);
  }
  alignas(32) uint8_t buf[128] = {};
  if (total > k) __builtin_memcpy(buf, v + k * E, (total - k) * E);  // < 64 bytes (see above)
  const uint8_t* vb = buf;
  for (; j + W <= cols; j += W) vb += S::template step<NT>(mask + j / 8, vb, o + j * E) * E;
  if (j < cols) {
    const unsigned n = static_cast<unsigned>(cols - j);
    uint8_t m[W / 8] = {};
    __builtin_memcpy(m, mask + j / 8, (n + 7) / 8);
    if (n % 8) m[n / 8] &= static_cast<uint8_t>((1u << (n % 8)) - 1);
    alignas(32) uint8_t tmp[W * E];
    S::template step<false>(m, vb, tmp);
    __builtin_memcpy(o + j * E, tmp, n * E);
  }
  return total;
}

// ---------------------------------------------------------------- fused nibble dequant
//
// Chunks inside one group use a per-group table of the 16 possible outputs (below,
// dequant_run); chunks that straddle a group boundary and the tail compute each column: such a
// chunk is 16 columns = 8 packed bytes. Lane i of A holds the low nibble of byte p(i) (column
// 2p(i)), lane i of B its high nibble (column 2p(i)+1). For 16-bit outputs p is the identity and
// the results interleave with one 16-bit blend; for f32 output p = 0,1,4,5,2,3,6,7 so that
// unpacklo/unpackhi_ps give columns 0..7 and 8..15 directly.

using simd::kBF16;
using simd::kF16;
using simd::kF32;
using simd::Kind;
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Each lane's RNE bf16 in its high 16 bits (low 16 bits: junk); NaN -> quietened, as half.hpp.
// NaN = false: the caller knows no lane is NaN (a finite scale and zero point times a finite code
// value: at most an infinity, which the addition leaves one), so the NaN patch is skipped.
template <bool NaN = true>
[[gnu::always_inline]] inline __m256i bf16_round_hi(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
  if constexpr (!NaN) return r;
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x00400000)), nan);
}
template <bool NaN = true>
[[gnu::always_inline]] inline __m256 bf16_image(__m256 v) {
  return _mm256_castsi256_ps(_mm256_and_si256(bf16_round_hi<NaN>(v), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
[[gnu::always_inline]] inline __m256 f16_image(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, kRne)); }
// 8 bf16 values, each in the high half of a 32-bit lane whose low half is zero (so the lane is its
// f32), rounded to f16 (RNE).
[[gnu::always_inline]] inline __m128i f16_of_bf16_hi(__m256i x) {
  return _mm256_cvtps_ph(_mm256_castsi256_ps(x), kRne);
}

template <Kind N, bool NaN = true>
[[gnu::always_inline]] inline __m256 natural_image(__m256 v) {
  if constexpr (N == kBF16) return bf16_image<NaN>(v);
  else if constexpr (N == kF16) return f16_image(v);
  else return v;
}
template <Kind N, bool NaN = true>
[[gnu::always_inline]] inline __m256i out_bf16_hi(__m256 v) {
  if constexpr (N == kF16) return bf16_round_hi<NaN>(f16_image(v));
  else return bf16_round_hi<NaN>(v);
}
template <Kind N, bool NaN = true>
[[gnu::always_inline]] inline __m128i out_f16(__m256 v) {
  if constexpr (N == kBF16) return _mm256_cvtps_ph(bf16_image<NaN>(v), kRne);
  else return _mm256_cvtps_ph(v, kRne);
}
// True when f is neither NaN nor infinite.
inline bool finite(float f) {
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  return (b & 0x7F800000u) != 0x7F800000u;
}

struct Lanes {
  __m256 a, b;
};

template <Kind O>
[[gnu::always_inline]] inline __m256i col_a() {
  if constexpr (O == kF32) return _mm256_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14);
  else return _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
}

[[gnu::always_inline]] inline __m256 lut_lookup(__m256i idx, __m256 lo, __m256 hi) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // bit 3 selects the half
}

// 16 columns from the 8 bytes in the low half of `bytes`, written at out + j (whole chunk).
template <Kind N, Kind O, bool ZP, bool NT, bool NaN = true>
[[gnu::always_inline]] inline void chunk(__m128i bytes, __m256 lut_lo, __m256 lut_hi, Lanes s, Lanes z, void* out,
                                         size_t j) {
  if constexpr (O == kF32)
    bytes = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m256i ia = _mm256_cvtepu8_epi32(bytes);
  const __m256i ib = _mm256_srli_epi32(ia, 4);
  __m256 a = lut_lookup(ia, lut_lo, lut_hi), b = lut_lookup(ib, lut_lo, lut_hi);
  if constexpr (ZP) {
    a = _mm256_sub_ps(a, z.a);
    b = _mm256_sub_ps(b, z.b);
  }
  a = _mm256_mul_ps(a, s.a);
  b = _mm256_mul_ps(b, s.b);
  if constexpr (O == kBF16) {
    // (locals: clang's _mm256_blend_epi16 is a macro, and a template argument list's comma would
    // split its arguments)
    const __m256i ha = out_bf16_hi<N, NaN>(a), hb = out_bf16_hi<N, NaN>(b);
    const __m256i w = _mm256_blend_epi16(_mm256_srli_epi32(ha, 16), hb, 0xAA);
    put256<NT>(static_cast<uint16_t*>(out) + j, w);
  } else if constexpr (O == kF16) {
    const __m128i ha = out_f16<N, NaN>(a), hb = out_f16<N, NaN>(b);
    uint16_t* o = static_cast<uint16_t*>(out) + j;
    put128<NT>(o, _mm_unpacklo_epi16(ha, hb));
    put128<NT>(o + 8, _mm_unpackhi_epi16(ha, hb));
  } else {
    a = natural_image<N, NaN>(a);
    b = natural_image<N, NaN>(b);
    float* o = static_cast<float*>(out) + j;
    put256<NT>(o, _mm256_unpacklo_ps(a, b));
    put256<NT>(o + 8, _mm256_unpackhi_ps(a, b));
  }
}

// Per-lane scale (or zero point) vectors for the chunk at column j whose first column is in
// group g (ending at column nb), n valid columns; reads only entries of groups those columns use.
template <Kind O>
[[gnu::always_inline]] inline Lanes lane_values(const float* t, size_t j, size_t g, size_t nb, size_t gs, unsigned n) {
  const __m256i ca = col_a<O>(), cb = _mm256_add_epi32(ca, _mm256_set1_epi32(1));
  if (gs == 1) {  // one entry per column: gather t[j + col] for valid columns
    const __m256i lim = _mm256_set1_epi32(static_cast<int>(n));
    return {
        _mm256_mask_i32gather_ps(_mm256_setzero_ps(), t + j, ca, _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, ca)), 4),
        _mm256_mask_i32gather_ps(_mm256_setzero_ps(), t + j, cb, _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, cb)), 4)};
  }
  Lanes r{_mm256_set1_ps(t[g]), _mm256_set1_ps(t[g])};
  for (size_t b = nb; b < j + n; b += gs) {  // group ++g starts at column b, inside this chunk
    ++g;
    const __m256 v = _mm256_set1_ps(t[g]);
    const __m256i before = _mm256_set1_epi32(static_cast<int>(b - j) - 1);
    r.a = _mm256_blendv_ps(r.a, v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(ca, before)));
    r.b = _mm256_blendv_ps(r.b, v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(cb, before)));
  }
  return r;
}

// Table path. Inside one group the output is a function of the 4-bit code alone, so the 16
// possible outputs are computed once per group with exactly the per-element operations
// (f32 lut - zp, * scale, the S and D roundings) and each column is a table lookup.

// f32 (lut[c] - zp[g]) * scale[g] for codes 0-7 (a) and 8-15 (b).
template <bool ZP>
[[gnu::always_inline]] inline Lanes group_values(__m256 lut_lo, __m256 lut_hi, const float* scale, const float* zp,
                                                 size_t g) {
  const __m256 s = _mm256_set1_ps(scale[g]);
  if constexpr (ZP) {
    const __m256 z = _mm256_set1_ps(zp[g]);
    return {_mm256_mul_ps(_mm256_sub_ps(lut_lo, z), s), _mm256_mul_ps(_mm256_sub_ps(lut_hi, z), s)};
  } else {
    return {_mm256_mul_ps(lut_lo, s), _mm256_mul_ps(lut_hi, s)};
  }
}
// The 16 output words as two pshufb tables (low bytes, high bytes), each in both 128-bit lanes.
struct Table16 {
  __m256i lo, hi;
};
// The tables of 16 output words w (in order, 8 a lane).
[[gnu::always_inline]] inline Table16 table16_of_words(__m256i w) {
  // Per lane: low bytes of its 8 words, then their high bytes; then gather the halves:
  // q = [the 16 low bytes | the 16 high bytes].
  const __m256i split = _mm256_shuffle_epi8(w, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                                                                2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i q = _mm256_permute4x64_epi64(split, 0xD8);
  return {_mm256_permute2x128_si256(q, q, 0x00), _mm256_permute2x128_si256(q, q, 0x11)};
}
// NaN = false: no value is a NaN (a finite scale and zero point times finite code values), so
// the rounding skips its NaN patch.
template <Kind N, Kind O, bool NaN = true>
[[gnu::always_inline]] inline Table16 table16(Lanes t) {
  __m256i w;  // the 16 words in order
  if constexpr (O == kBF16) {
    w = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(out_bf16_hi<N, NaN>(t.a), 16),
                                                     _mm256_srli_epi32(out_bf16_hi<N, NaN>(t.b), 16)),
                                 0xD8);
  } else {
    w = _mm256_set_m128i(out_f16<N, NaN>(t.b), out_f16<N, NaN>(t.a));
  }
  return table16_of_words(w);
}
// The 32 nibbles of 16 code bytes as bytes: lane 0 from bytes 0-7, lane 1 from bytes 8-15, each byte's
// low nibble then its high nibble (packed order: the column order). Per 16-bit lane w = byte:
// (w | w << 4) & 0x0F0F.
[[gnu::always_inline]] inline __m256i nibbles(__m128i b) {
  const __m256i w = _mm256_cvtepu8_epi16(b);
  return _mm256_and_si256(_mm256_or_si256(w, _mm256_slli_epi16(w, 4)), _mm256_set1_epi16(0x0F0F));
}
// 16 output words w (in order) at columns j .. j + 15 of o: as they are (16-bit outputs) or, O = kF32,
// each as the f32 whose high half it is (a bf16 value widened).
template <Kind O, bool NT>
[[gnu::always_inline]] inline void put_words(void* o, size_t j, __m256i w) {
  if constexpr (O == kF32) {
    float* f = static_cast<float*>(o) + j;
    const __m256i a = _mm256_unpacklo_epi16(_mm256_setzero_si256(), w),  // words 0-3 | 8-11
        b = _mm256_unpackhi_epi16(_mm256_setzero_si256(), w);            // words 4-7 | 12-15
    put256<NT>(f, _mm256_permute2x128_si256(a, b, 0x20));
    put256<NT>(f + 8, _mm256_permute2x128_si256(a, b, 0x31));
  } else {
    put256<NT>(static_cast<uint16_t*>(o) + j, w);
  }
}
// 32 columns of 16-bit output. The 16 bytes are reordered so that after splitting nibbles and
// interleaving, lane 0 holds the codes of columns 0-7 and 16-23, lane 1 those of 8-15 and
// 24-31; the byte lookups interleaved by unpacklo/hi_epi8 are then columns 0-15 and 16-31.
// O = kF32: the tables' words are bf16, each written as the f32 it is the high half of (put_words).
template <bool NT, Kind O = kBF16>
[[gnu::always_inline]] inline void chunk_table16(const uint8_t* p, const Table16& tab, void* o) {
  const __m256i idx = nibbles(_mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                               _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15)));
  const __m256i l = _mm256_shuffle_epi8(tab.lo, idx), h = _mm256_shuffle_epi8(tab.hi, idx);
  put_words<O, NT>(o, 0, _mm256_unpacklo_epi8(l, h));
  put_words<O, NT>(o, 16, _mm256_unpackhi_epi8(l, h));
}
// 16 columns of 16-bit output (8 bytes) with the same tables, in 128-bit registers.
template <bool NT>
[[gnu::always_inline]] inline void chunk_table16_half(const uint8_t* p, const Table16& tab, uint16_t* o) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i nib = _mm_set1_epi8(0x0F);
  const __m128i idx = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
  const __m128i l = _mm_shuffle_epi8(_mm256_castsi256_si128(tab.lo), idx);
  const __m128i h = _mm_shuffle_epi8(_mm256_castsi256_si128(tab.hi), idx);
  put128<NT>(o, _mm_unpacklo_epi8(l, h));
  put128<NT>(o + 8, _mm_unpackhi_epi8(l, h));
}
// 16 columns of f32 output: the two 8-float tables through vpermps + blend, lanes as in chunk().
template <bool NT>
[[gnu::always_inline]] inline void chunk_table32(const uint8_t* p, __m256 tab_lo, __m256 tab_hi, float* o) {
  const __m128i bytes = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                                         _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m256i ia = _mm256_cvtepu8_epi32(bytes);
  const __m256 a = lut_lookup(ia, tab_lo, tab_hi), b = lut_lookup(_mm256_srli_epi32(ia, 4), tab_lo, tab_hi);
  put256<NT>(o, _mm256_unpacklo_ps(a, b));
  put256<NT>(o + 8, _mm256_unpackhi_ps(a, b));
}

template <Kind N, Kind O, bool ZP, bool NT>
void dequant_run(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp, size_t gs,
                 void* out) {
  const __m256 lut_lo = _mm256_loadu_ps(lut), lut_hi = _mm256_loadu_ps(lut + 8);
  size_t j = 0, g = 0, nb = gs;  // nb: first column after group g
  while (j + 16 <= cols) {
    if (j + 16 <= nb) {  // whole chunks inside group g: look the 16 possible outputs up
      const size_t lim = nb < cols ? nb : cols;
      if constexpr (O == kF32) {
        const Lanes t = group_values<ZP>(lut_lo, lut_hi, scale, zp, g);  // codes 0-7, 8-15
        const __m256 tab_lo = natural_image<N>(t.a), tab_hi = natural_image<N>(t.b);
        for (; j + 16 <= lim; j += 16) chunk_table32<NT>(packed + j / 2, tab_lo, tab_hi, static_cast<float*>(out) + j);
      } else if (j + 32 <= lim) {
        const Table16 tab = table16<N, O>(group_values<ZP>(lut_lo, lut_hi, scale, zp, g));
        for (; j + 32 <= lim; j += 32) chunk_table16<NT>(packed + j / 2, tab, static_cast<uint16_t*>(out) + j);
        if (j + 16 <= lim) {
          chunk_table16_half<NT>(packed + j / 2, tab, static_cast<uint16_t*>(out) + j);
          j += 16;
        }
      } else {  // a single 16-column chunk in this group (e.g. group size 16): no table
        const Lanes s{_mm256_set1_ps(scale[g]), _mm256_set1_ps(scale[g])};
        const Lanes z = ZP ? Lanes{_mm256_set1_ps(zp[g]), _mm256_set1_ps(zp[g])} : s;
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j / 2));
        // Code values are finite: with a finite scale and zero point no output is NaN.
        if (finite(scale[g]) && (!ZP || finite(zp[g]))) chunk<N, O, ZP, NT, false>(bytes, lut_lo, lut_hi, s, z, out, j);
        else chunk<N, O, ZP, NT>(bytes, lut_lo, lut_hi, s, z, out, j);
        j += 16;
      }
    } else {
      const Lanes s = lane_values<O>(scale, j, g, nb, gs, 16);
      Lanes z = s;
      if constexpr (ZP) z = lane_values<O>(zp, j, g, nb, gs, 16);
      chunk<N, O, ZP, NT>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j / 2)), lut_lo, lut_hi, s, z, out,
                          j);
      j += 16;
    }
    while (nb <= j) {
      ++g;
      nb += gs;
    }
  }
  if (j < cols) {  // 1..15 columns: through zero-padded stack copies of the input and output
    const unsigned n = static_cast<unsigned>(cols - j);
    uint64_t in = 0;
    __builtin_memcpy(&in, packed + j / 2, (n + 1) / 2);
    alignas(32) unsigned char tmp[64];
    const Lanes s = lane_values<O>(scale, j, g, nb, gs, n);
    Lanes z = s;
    if constexpr (ZP) z = lane_values<O>(zp, j, g, nb, gs, n);
    chunk<N, O, ZP, false>(_mm_cvtsi64_si128(static_cast<long long>(in)), lut_lo, lut_hi, s, z, tmp, 0);
    const size_t esz = O == kF32 ? 4 : 2;
    __builtin_memcpy(static_cast<unsigned char*>(out) + j * esz, tmp, n * esz);
  }
}

// E2M1 codes (fp4: nvfp4's 16-column and mxfp4's 32-column groups) -> bf16 of a bf16 or f32
// product (or that bf16 value as f32 or f16), no zero points: a group's table from two roundings
// instead of sixteen. The magnitudes 0.5, 1, 2, 4 are 2^k and 1.5, 3, 6 are 2^k 1.5, so while the
// products and their roundings are normal and finite, each output's bits are those of T0 =
// bf16(scale) or T1 = bf16(1.5 scale) plus k << 7 (rounding commutes with a power of two there);
// the code's sign adds 0x8000 (RNE is symmetric) and a zero code is the scale's signed zero flipped
// by its own. T0, T1 and that zero are computed for 8 groups at once; the tables of a lane's group
// are three in-lane vpshufb, an add and an xor of them (e2m1_pair_table). 16-column groups go two
// at a time, one group's tables in each lane (the scales loaded even groups to lane 0, odd ones to
// lane 1), 32 columns a step; a 32-column group's tables fill both lanes (one vpermq first).
// A scale's exponent field in 8..240 keeps every product and table entry normal and far from
// overflow (0.5 |scale| >= 2^-120, 6 |scale| < 2^117); a run holding another goes the general way.
[[gnu::always_inline]] inline bool is_e2m1_lut(const float* lut) {  // exactly e2m1_to_f32's values, -0.0 at code 8
  const __m256i pos =
      _mm256_setr_epi32(0, 0x3F000000, 0x3F800000, 0x3FC00000, 0x40000000, 0x40400000, 0x40800000, 0x40C00000);
  const __m256i neg = _mm256_or_si256(pos, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256i eq =
      _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lut)), pos),
                       _mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lut + 8)), neg));
  return _mm256_movemask_epi8(eq) == -1;
}
// The tables of two groups, one a lane, from q holding each lane's group's words (zero, T0, T1, 0)
// in qword Half of the lane. Code c < 8 takes word 0 (zero), 1 (T0: 0.5, 1, 2, 4) or 2 (T1: 1.5,
// 3, 6) plus its power of two (k << 7); code c + 8 is code c negated, its word that one with the
// sign flipped (RNE is symmetric; a zero's sign flips as -(+-0) does): the same low byte, the high
// byte ^ 0x80. Every step stays in its lane. Words (E2m1Words): kBf16 the bf16 words above. kF16Round:
// the words of codes 0-7 rounded to f16 (the f16 of a bf16 product; RNE is symmetric, so the sign
// still flips by the high byte's top bit), 8 roundings per table: rounding the outputs instead cost
// 16 per 32 columns (nvfp4 0.47 of memset against 0.56). kF16Shift: q holds f16 words of T0 and T1
// (e2m1_groups: where every entry is an f16 normal, so each is that word plus k << 10, the power of
// two on f16's exponent field), no rounding per table.
enum class E2m1Words { kBf16, kF16Round, kF16Shift };
template <int Half, E2m1Words W = E2m1Words::kBf16>
[[gnu::always_inline]] inline Table16 e2m1_pair_table(__m256i q) {
  constexpr char o = 8 * Half;
  const __m256i pick = _mm256_setr_epi8(o, o + 1, o + 2, o + 3, o + 2, o + 3, o + 4, o + 5, o + 2, o + 3, o + 4, o + 5,
                                        o + 2, o + 3, o + 4, o + 5, o, o + 1, o + 2, o + 3, o + 2, o + 3, o + 4, o + 5,
                                        o + 2, o + 3, o + 4, o + 5, o + 2, o + 3, o + 4, o + 5);
  constexpr short k = W == E2m1Words::kF16Shift ? 1024 : 128;  // 2^1 on the exponent field
  const __m256i add = _mm256_setr_epi16(0, -k, 0, 0, k, k, 2 * k, 2 * k, 0, -k, 0, 0, k, k, 2 * k, 2 * k);
  __m256i w = _mm256_add_epi16(_mm256_shuffle_epi8(q, pick), add);  // codes 0-7's words, per lane
  if constexpr (W == E2m1Words::kF16Round) {
    // each lane's words 0-3 (then 4-7) as f32, rounded: [lane 0's, lane 1's] per half; then back in lanes
    const __m256i zero = _mm256_setzero_si256();
    const __m128i a = f16_of_bf16_hi(_mm256_unpacklo_epi16(zero, w)),
                  b = f16_of_bf16_hi(_mm256_unpackhi_epi16(zero, w));
    w = _mm256_set_m128i(_mm_unpackhi_epi64(a, b), _mm_unpacklo_epi64(a, b));
  }
  const __m256i lo = _mm256_shuffle_epi8(w, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2,
                                                             4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14));
  const __m256i hi = _mm256_shuffle_epi8(w, _mm256_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3,
                                                             5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i sign = _mm256_setr_epi64x(0, static_cast<long long>(0x8080808080808080ull), 0,
                                          static_cast<long long>(0x8080808080808080ull));
  return {lo, _mm256_xor_si256(hi, sign)};
}
// 32 columns (16 bytes of codes) through a pair table: lane 0 looks up columns 0-15, lane 1 16-31.
template <bool NT, Kind O>
[[gnu::always_inline]] inline void chunk_pair_table16(const uint8_t* p, const Table16& tab, void* o) {
  const __m256i idx = nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i l = _mm256_shuffle_epi8(tab.lo, idx), h = _mm256_shuffle_epi8(tab.hi, idx);
  const __m256i a = _mm256_unpacklo_epi8(l, h), c = _mm256_unpackhi_epi8(l, h);  // columns 0-7 | 16-23, 8-15 | 24-31
  put_words<O, NT>(o, 0, _mm256_permute2x128_si256(a, c, 0x20));
  put_words<O, NT>(o, 16, _mm256_permute2x128_si256(a, c, 0x31));
}
// Columns from 0 while whole runs of 8 groups of gs (16 or 32) columns remain and their scales are
// in range; returns the columns written (a whole number of groups).
// f16 outputs: a run whose scales' exponent fields all lie in 114..139 (|scale| in [2^-13, 2^13):
// 0.5 bf16(|scale|) >= 2^-14 and 4 bf16(1.5 |scale|) <= 49152, every entry an f16 normal) takes
// T0 and T1 as f16 words, rounded once per 8 groups (E2m1Words::kF16Shift); another in 8..240 rounds
// each table's words (kF16Round).
template <Kind Out, bool NT>
size_t e2m1_groups(const uint8_t* packed, size_t cols, const float* scale, size_t gs, void* out) {
  constexpr bool F16 = Out == kF16;      // f16 words in the tables
  constexpr Kind O = F16 ? kBF16 : Out;  // the tables' words as put_words writes them
  const auto at = [out](size_t j) { return static_cast<unsigned char*>(out) + j * (O == kF32 ? 4 : 2); };
  const auto outside = [](__m256i e, int lo, int hi) {
    const __m256i x =
        _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), e), _mm256_cmpgt_epi32(e, _mm256_set1_epi32(hi)));
    return !_mm256_testz_si256(x, x);
  };
  size_t j = 0;
  for (size_t g = 0; cols - j >= 8 * gs; g += 8) {
    // 16-column groups: the even groups' scales in lane 0, the odd ones' in lane 1 (pairs).
    const __m256 s8 = _mm256_loadu_ps(scale + g);
    const __m256 s = gs == 16 ? _mm256_permutevar8x32_ps(s8, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)) : s8;
    const __m256i e = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(s), 23), _mm256_set1_epi32(0xFF));
    if (outside(e, 8, 240)) break;
    const __m256 s15 = _mm256_mul_ps(s, _mm256_set1_ps(1.5f));
    const __m256i zero = _mm256_srli_epi32(
        _mm256_and_si256(_mm256_castps_si256(s), _mm256_set1_epi32(static_cast<int>(0x80000000u))), 16);
    const auto run = [&](auto words) {
      constexpr E2m1Words W = decltype(words)::value;
      // T0 = bf16(scale), T1 = bf16(1.5 scale): their words in each dword's low half (kF16Shift: f16 words)
      const auto word = [](__m256 v) {
        if constexpr (W == E2m1Words::kF16Shift)
          return _mm256_cvtepu16_epi32(_mm256_cvtps_ph(bf16_image<false>(v), kRne));
        else return _mm256_srli_epi32(bf16_round_hi<false>(v), 16);
      };
      const __m256i t0 = word(s), t1 = word(s15);
      const __m256i zt0 = _mm256_or_si256(zero, _mm256_slli_epi32(t0, 16));
      // Qwords (zero, T0, T1, 0) of the scales' dwords 0 1 | 4 5 (qa) and 2 3 | 6 7 (qb).
      const __m256i qa = _mm256_unpacklo_epi32(zt0, t1), qb = _mm256_unpackhi_epi32(zt0, t1);
      if (gs == 16) {  // qa: groups 0 2 | 1 3, qb: 4 6 | 5 7
        chunk_pair_table16<NT, O>(packed + j / 2, e2m1_pair_table<0, W>(qa), at(j));
        chunk_pair_table16<NT, O>(packed + j / 2 + 16, e2m1_pair_table<1, W>(qa), at(j + 32));
        chunk_pair_table16<NT, O>(packed + j / 2 + 32, e2m1_pair_table<0, W>(qb), at(j + 64));
        chunk_pair_table16<NT, O>(packed + j / 2 + 48, e2m1_pair_table<1, W>(qb), at(j + 96));
        j += 128;
      } else {  // one group in both lanes: qa 0 1 | 4 5, qb 2 3 | 6 7
        const __m256i q[8] = {_mm256_permute4x64_epi64(qa, 0x00), _mm256_permute4x64_epi64(qa, 0x55),
                              _mm256_permute4x64_epi64(qb, 0x00), _mm256_permute4x64_epi64(qb, 0x55),
                              _mm256_permute4x64_epi64(qa, 0xAA), _mm256_permute4x64_epi64(qa, 0xFF),
                              _mm256_permute4x64_epi64(qb, 0xAA), _mm256_permute4x64_epi64(qb, 0xFF)};
        for (unsigned k = 0; k < 8; ++k, j += 32)
          chunk_table16<NT, O>(packed + j / 2, e2m1_pair_table<0, W>(q[k]), at(j));
      }
    };
    using Bf16 = std::integral_constant<E2m1Words, E2m1Words::kBf16>;
    using Shift = std::integral_constant<E2m1Words, E2m1Words::kF16Shift>;
    using Round = std::integral_constant<E2m1Words, E2m1Words::kF16Round>;
    if constexpr (!F16) run(Bf16{});
    else if (!outside(e, 114, 139)) run(Shift{});
    else run(Round{});
  }
  return j;
}

// ---------------------------------------------------------------- fused 8-bit dequant
//
// 8 columns per chunk, one group's scale (and zero point) broadcast; the E4M3 decode is the
// AVX-512 file's (f16 bits times 256, NaN patched). Partial chunks go through a zero-padded
// stack copy of the codes and a stack output (AVX2 has no byte-masked loads or 16-bit stores).

template <bool E4M3>
[[gnu::always_inline]] inline __m256 byte_values(__m128i bytes) {  // low 8 bytes
  if constexpr (!E4M3) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
  } else {
    const __m128i w = _mm_cvtepu8_epi16(bytes);
    const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
    const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8), _mm_slli_epi16(mag, 7));
    const __m256 x = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.f));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
    const __m256 q =
        _mm256_or_ps(_mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)))),
                     _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)));
    return _mm256_blendv_ps(x, q, nan);
  }
}

// 8 columns at o (whole chunk).
template <Kind N, Kind O, bool ZP, bool E4M3, bool NT = false>
[[gnu::always_inline]] inline void byte_chunk(__m128i bytes, __m256 s, __m256 z, void* o) {
  __m256 p = byte_values<E4M3>(bytes);
  if constexpr (ZP) p = _mm256_sub_ps(p, z);
  p = _mm256_mul_ps(p, s);
  if constexpr (O == kBF16) {
    const __m256i hi = _mm256_srli_epi32(out_bf16_hi<N>(p), 16);  // 8 x u32 < 2^16
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
    put128<NT>(o, w);
  } else if constexpr (O == kF16) {
    put128<NT>(o, out_f16<N>(p));
  } else {
    put256<NT>(o, natural_image<N>(p));
  }
}

// 16 columns at o from 16 codes: the chunk above twice, with the work on the codes done once for
// 16 (E4M3: their f16 words, NaN codes made f16 quiet NaNs keeping their sign, which vcvtph2ps
// widens to the f32 NaN e4m3_to_f32 gives) and the two halves packed in one step. fold: E4M3 without
// zero points, s = scale * 256, exact (the caller checks): (x * 256) * scale and x * (256 * scale)
// are the same real number, rounded once.
template <Kind N, Kind O, bool ZP, bool E4M3, bool NT, bool NaN = true>
[[gnu::always_inline]] inline void byte_chunk16(__m128i bytes, __m256 s, __m256 z, bool fold, void* o) {
  __m256 p0, p1;
  if constexpr (E4M3) {
    const __m256i w = _mm256_cvtepu8_epi16(bytes);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    const __m256i h = _mm256_blendv_epi8(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7)),
                                         _mm256_or_si256(sign, _mm256_set1_epi16(0x7E00)),
                                         _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)));
    p0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    p1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    if (!fold) {
      p0 = _mm256_mul_ps(p0, _mm256_set1_ps(256.f));
      p1 = _mm256_mul_ps(p1, _mm256_set1_ps(256.f));
    }
  } else {
    p0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
    p1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
  }
  if constexpr (ZP) {
    p0 = _mm256_sub_ps(p0, z);
    p1 = _mm256_sub_ps(p1, z);
  }
  p0 = _mm256_mul_ps(p0, s);
  p1 = _mm256_mul_ps(p1, s);
  if constexpr (O == kBF16) {
    const __m256i a = _mm256_srli_epi32(out_bf16_hi<N, NaN>(p0), 16),
                  b = _mm256_srli_epi32(out_bf16_hi<N, NaN>(p1), 16);
    // packus interleaves the lanes (a0 b0 | a1 b1, 4 words each); qwords 0 2 1 3 restore the order
    put256<NT>(o, _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
  } else if constexpr (O == kF16) {
    const __m128i h0 = out_f16<N, NaN>(p0), h1 = out_f16<N, NaN>(p1);  // locals: a macro in clang, as above
    put128<NT>(o, h0);                                                 // two 16-byte stores: no vinserti128
    put128<NT>(static_cast<uint16_t*>(o) + 8, h1);
  } else {
    put256<NT>(o, natural_image<N, NaN>(p0));
    put256<NT>(static_cast<float*>(o) + 8, natural_image<N, NaN>(p1));
  }
}

// int8 codes -> bf16 outputs of a bf16 or f32 product, the rounding done on 16-bit halves (16
// columns, 15 vector operations instead of 19). Two vpshufb of the 16 code bytes, broadcast to both
// lanes, put code(2i) and code(2i + 1) (lane 1: codes 8-15) in the top byte of dword i, zeros below:
// code * 2^24, exact as int32 and as f32. With the scale times 2^-24 (and the zero point times 2^24)
// every product is the same real number as (code - zp) * scale, so it rounds to the same f32, while
// those scaled factors are exact (split_factors_exact). (vpmovsxwd, a shift and a mask in place of
// the two shuffles measured 7-10 % slower: 36.2-37.3 against 38.9-39.1 GB/s in L2.) Each product's
// high halves (odd columns' shifted into the odd words) and low halves then lie in one vector
// each, in column order, and bf16 RNE -- the 32-bit rounding
// (bits + 0x7FFF + lsb) >> 16 of bf16_round_hi -- is hi + 1 where lo > 0x8000, or lo == 0x8000 and
// hi is odd: (lo - 0x8000) + (hi & 1) > 0, signed and saturating. Finite factors only: no NaN to
// patch (a finite code times them is at most an infinity, low half 0, which no carry changes).
inline bool split_factors_exact(float scale, const float* zp) {
  uint32_t s, z = 0;
  __builtin_memcpy(&s, &scale, 4);
  if (zp) __builtin_memcpy(&z, zp, 4);
  const uint32_t se = (s >> 23) & 0xFF, ze = (z >> 23) & 0xFF;
  // scale * 2^-24 stays normal (or is a zero); zp * 2^24 stays finite (zeros and subnormals scale up exactly)
  return ((se >= 25 && se != 0xFF) || (s & 0x7FFFFFFFu) == 0) && ze <= 0xFE - 24;
}
// The bf16 RNE of even-column products pe and odd-column ones po (finite factors), interleaved:
// 16 columns at o.
[[gnu::always_inline]] inline __m256i bf16_pair_words(__m256 pe, __m256 po) {
  const __m256i e = _mm256_castps_si256(pe), d1 = _mm256_castps_si256(po);
  const __m256i e_hi = _mm256_srli_epi32(e, 16), d1_lo = _mm256_slli_epi32(d1, 16);  // locals: a macro in clang
  const __m256i hi = _mm256_blend_epi16(e_hi, d1, 0xAA), lo = _mm256_blend_epi16(e, d1_lo, 0xAA);
  const __m256i t = _mm256_adds_epi16(_mm256_xor_si256(lo, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                      _mm256_and_si256(hi, _mm256_set1_epi16(1)));
  return _mm256_sub_epi16(hi, _mm256_cmpgt_epi16(t, _mm256_setzero_si256()));
}
template <bool NT>
[[gnu::always_inline]] inline void bf16_pairs(__m256 pe, __m256 po, void* o) {
  put256<NT>(o, bf16_pair_words(pe, po));
}
template <bool ZP, bool NT>
[[gnu::always_inline]] inline void int8_chunk16_split(__m128i bytes, __m256 s, __m256 z, void* o) {
  const __m256i b = _mm256_broadcastsi128_si256(bytes);
  const __m256i even = _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 2, -1, -1, -1, 4, -1, -1, -1, 6,  //
                                        -1, -1, -1, 8, -1, -1, -1, 10, -1, -1, -1, 12, -1, -1, -1, 14);
  const __m256i odd = _mm256_setr_epi8(-1, -1, -1, 1, -1, -1, -1, 3, -1, -1, -1, 5, -1, -1, -1, 7,  //
                                       -1, -1, -1, 9, -1, -1, -1, 11, -1, -1, -1, 13, -1, -1, -1, 15);
  __m256 pe = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, even));
  __m256 po = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, odd));
  if constexpr (ZP) {
    pe = _mm256_sub_ps(pe, z);
    po = _mm256_sub_ps(po, z);
  }
  bf16_pairs<NT>(_mm256_mul_ps(pe, s), _mm256_mul_ps(po, s), o);
}

// E4M3 -> bf16 by 16-entry tables (no zero points; a bf16 output of a bf16 or f32 product, one
// rounding of the f32 product, or that bf16 value as f32 or rounded to f16 where the product is
// bf16). A code s eeee mmm with e >= 1 is (-1)^s (8 + m) 2^(e-10), so its product with the scale is
// 2^e A_m, A_m = (8 + m) 2^-10 scale. While A_m and the result are normal and finite, rounding to
// f32 and then to bf16 commutes with the power of two: the output's bits are those of bf16(A_m)
// plus e << 7. RNE is symmetric, so the code's sign adds 0x8000 (mod 2^16: the sign bit flips, as
// -x * scale = -(x * scale); a zero code keeps the scale's sign flipped by its own, as +-0 * scale
// does). Codes with e = 0 are m 2^-9, their own eight products. Per step of 32 codes, three
// vpshufb lookups by nibble and a blend give the high and low bytes:
//   L[e0 m]       = bits(bf16(A_m)) + (e0 << 7)      by the low nibble (e0 = e's low bit)
//   Z[m]          = bits(bf16(m 2^-9 scale))         by the low nibble, for codes with e = 0
//   H[s e3 e2 e1] = s << 7 | e3e2e1                   added to the high byte: the rest of e << 7
// The scale's binade must keep that true for every code: |scale| in [2^-111, 2^104) (exponent
// field 16..230) keeps A_m >= 2^-118 and every result below 2^113, so no exponent field passes
// 240 and no addition carries into the sign. Other scales, and steps holding a NaN code (0x7F,
// 0xFF: no such form), go through byte_chunk16.
struct E4m3Tables {
  Table16 l, z;  // L and Z above, each 16-byte table in both lanes
};
inline bool e4m3_table_scale(uint32_t sbits) {
  const uint32_t e = (sbits >> 23) & 0xFF;
  return e >= 16 && e <= 230;
}
// The bf16 words of the low nibble's codes: L's 16 (bf16(A_m) and, for e0 = 1, bf16(2 A_m) = its
// bits + 128) and the e = 0 codes' 8 (bf16(m 2^-9 scale)), 8 of each a 32-bit lane's low half.
struct E4m3Bf16 {
  __m256i a, z;
};
[[gnu::always_inline]] inline E4m3Bf16 e4m3_bf16(float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  constexpr float k = 0.0009765625f;  // 2^-10
  const __m256 a = _mm256_mul_ps(_mm256_setr_ps(8 * k, 9 * k, 10 * k, 11 * k, 12 * k, 13 * k, 14 * k, 15 * k), s);
  const __m256 z = _mm256_mul_ps(_mm256_setr_ps(0, 2 * k, 4 * k, 6 * k, 8 * k, 10 * k, 12 * k, 14 * k), s);
  return {_mm256_srli_epi32(bf16_round_hi<false>(a), 16), _mm256_srli_epi32(bf16_round_hi<false>(z), 16)};
}
// 16 words in order from two vectors of 8 (packus interleaves lanes; qwords 0 2 1 3 restore it).
[[gnu::always_inline]] inline __m256i e4m3_words(__m256i x, __m256i y) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(x, y), 0xD8);
}
[[gnu::always_inline]] inline E4m3Tables e4m3_tables(float scale) {
  const E4m3Bf16 b = e4m3_bf16(scale);
  // L: ta0-7, then ta0-7 + 128 (e0 = 1). Z: tz0-7 twice (the second never looked up: codes with
  // e = 0 have low nibbles 0-7).
  return {table16_of_words(e4m3_words(b.a, _mm256_add_epi32(b.a, _mm256_set1_epi32(128)))),
          table16_of_words(e4m3_words(b.z, b.z))};
}
// 32 columns at o from the codes at p, unless one of them is a NaN code (then false, nothing
// written). O = kBF16: the words; kF32 (natural bf16): each word << 16, the bf16 value as f32;
// kF16 (natural bf16): that f32 rounded to f16.
// The H table (below, in both lanes), which pow2_e4m3_run offsets per group.
[[gnu::always_inline]] inline __m256i e4m3_h() {
  return _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -128, -127, -126, -125, -124, -123, -122, -121,  //
                          0, 1, 2, 3, 4, 5, 6, 7, -128, -127, -126, -125, -124, -123, -122, -121);
}
// The words of 32 codes c (bytes) by the tables: L + H, or Z + H for the codes whose bits Whole
// (0x78: e = 0; 0x70: e <= 1) are all zero. w0 from each lane's low 8 codes, w1 its high 8.
template <uint8_t Whole>
[[gnu::always_inline]] inline void e4m3_lookup(__m256i c, const E4m3Tables& t, __m256i h, __m256i& w0, __m256i& w1) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(c, nib), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), nib);
  const __m256i sub = _mm256_cmpeq_epi8(_mm256_and_si256(c, _mm256_set1_epi8(Whole)), _mm256_setzero_si256());
  const __m256i wlo = _mm256_blendv_epi8(_mm256_shuffle_epi8(t.l.lo, lo), _mm256_shuffle_epi8(t.z.lo, lo), sub);
  const __m256i whi =
      _mm256_add_epi8(_mm256_blendv_epi8(_mm256_shuffle_epi8(t.l.hi, lo), _mm256_shuffle_epi8(t.z.hi, lo), sub),
                      _mm256_shuffle_epi8(h, hi));
  w0 = _mm256_unpacklo_epi8(wlo, whi);
  w1 = _mm256_unpackhi_epi8(wlo, whi);
}
template <Kind O, bool NT>
[[gnu::always_inline]] inline bool e4m3_step32(const uint8_t* p, const E4m3Tables& t, void* o, __m256i h = e4m3_h()) {
  // The codes rearranged so that the in-lane unpacks below leave whole stores in column order.
  // bf16: qwords 0 2 1 3, each lane's low 8 bytes hold codes 0-7 | 8-15 and its high 8 codes
  // 16-23 | 24-31: the byte unpacks give words of codes 0-15 and 16-31. f32: dwords 0 2 4 6 1 3 5 7,
  // lane 0 holds codes 0-3, 8-11, 16-19, 24-27 and lane 1 the next four of each: the word unpacks
  // of the byte unpacks give codes 0-7, 8-15, 16-23 and 24-31 (f16: the same f32, each pair of
  // eights rounded into one store).
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i c = O != kBF16 ? _mm256_permutevar8x32_epi32(raw, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7))
                               : _mm256_permute4x64_epi64(raw, 0xD8);
  const __m256i nan =
      _mm256_cmpeq_epi8(_mm256_or_si256(c, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_set1_epi8(-1));
  if (!_mm256_testz_si256(nan, nan)) return false;
  __m256i w0, w1;
  e4m3_lookup<0x78>(c, t, h, w0, w1);
  if constexpr (O == kF32) {
    const __m256i zero = _mm256_setzero_si256();
    float* f = static_cast<float*>(o);
    put256<NT>(f, _mm256_unpacklo_epi16(zero, w0));
    put256<NT>(f + 8, _mm256_unpackhi_epi16(zero, w0));
    put256<NT>(f + 16, _mm256_unpacklo_epi16(zero, w1));
    put256<NT>(f + 24, _mm256_unpackhi_epi16(zero, w1));
  } else if constexpr (O == kF16) {  // the f32 image rounded to f16, as out_f16<kBF16>
    const __m256i zero = _mm256_setzero_si256();
    uint16_t* h = static_cast<uint16_t*>(o);
    put128<NT>(h, f16_of_bf16_hi(_mm256_unpacklo_epi16(zero, w0)));
    put128<NT>(h + 8, f16_of_bf16_hi(_mm256_unpackhi_epi16(zero, w0)));
    put128<NT>(h + 16, f16_of_bf16_hi(_mm256_unpacklo_epi16(zero, w1)));
    put128<NT>(h + 24, f16_of_bf16_hi(_mm256_unpackhi_epi16(zero, w1)));
  } else {
    put256<NT>(o, w0);
    put256<NT>(static_cast<uint16_t*>(o) + 16, w1);
  }
  return true;
}
// 32 columns at o from the codes at p by the tables; a step holding a NaN code by the arithmetic
// instead: s256 = the scale times 256 (E4M3's f16 decode folded in, as byte_run does: every scale
// the tables take is below 2^119), no NaN patch (a finite scale).
template <Kind N, Kind O, bool NT>
[[gnu::always_inline]] inline void e4m3_put32(const uint8_t* p, const E4m3Tables& t, __m256 s256, void* o,
                                              __m256i h = e4m3_h()) {
  if (e4m3_step32<O, NT>(p, t, o, h)) return;
  constexpr size_t osz = O == kF32 ? 4 : 2;
  for (size_t k = 0; k < 32; k += 16)
    byte_chunk16<N, O, false, true, NT, false>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k)), s256,
                                               _mm256_setzero_ps(), true, static_cast<unsigned char*>(o) + k * osz);
}

// E4M3 -> f16 of a bf16 product by the same lookups, the tables holding f16 words. Where the
// product 2^e A_m (e >= 2) is an f16 normal, its f16 bits are its bf16 word w = bits(bf16(A_m)) +
// (e << 7) rebased: ((|w| - (112 << 7)) << 3) | sign, the exponent field moved from bias 127 to 15
// and the 7 fraction bits up to f16's 10 (exact: bf16 has 8 significant bits). That is a sum mod
// 2^16 of the lookups, as the bf16 word is: L holds its words w as (|w| - 0x3800) << 3 plus w's
// sign, and H puts e's high bits at << 11 (e3e2e1 << 3 on the high byte), the code's sign at << 15
// as before. The codes with e <= 1 (high nibble s000: the low nibble alone tells them apart) are
// looked up whole: Z holds f16(bf16(x scale)) of each, rounded by vcvtps2ph once per row -- the
// f16 subnormals among small products included. What the tables cannot give: a code with e >= 2
// whose product is below 2^-14 (an f16 subnormal, whose rounding is not a shift), and a NaN code.
// Those are the magnitudes (code & 0x7F) in [16, T), T = 8 e_min, and 127; a step holding one goes
// through e4m3_put32 (the bf16 tables, then vcvtps2ph).
struct E4m3F16 {
  E4m3Tables t;
  // T - 144 per byte: a magnitude x >= 16 plus 112 is x - 144 as a signed byte, below it where x < T
  // (x < 16 gives 112 .. 127, never below it)
  __m256i below;
};
// The f16 tables of a scale e4m3_table_scale takes, or false where they give no code: 448 |scale|
// must stay below f16's overflow (the largest product, 2^15 bf16(A_7), of bf16 exponent field <=
// 142: below 65536, so at most 65280), and some e <= 15 must make every 2^e A_m an f16 normal (bf16
// field >= 113, from e_min = 113 - field(bf16(A_0)) on).
inline bool e4m3_f16_tables(float scale, E4m3F16& f) {
  const E4m3Bf16 b = e4m3_bf16(scale);
  const int e0 = (_mm256_extract_epi32(b.a, 0) >> 7) & 0xFF, e7 = (_mm256_extract_epi32(b.a, 7) >> 7) & 0xFF;
  const int e_min = 113 - e0 > 2 ? 113 - e0 : 2;
  if (e7 + 15 > 142 || e_min > 15) return false;
  const __m256i a1 = _mm256_add_epi32(b.a, _mm256_set1_epi32(128));  // bf16(2 A_m): e0 = 1, or e = 1
  const __m256i sign = _mm256_set1_epi16(static_cast<short>(0x8000)), l = e4m3_words(b.a, a1);
  const __m256i lf =
      _mm256_xor_si256(_mm256_slli_epi16(_mm256_sub_epi16(_mm256_andnot_si256(sign, l), _mm256_set1_epi16(0x3800)), 3),
                       _mm256_and_si256(l, sign));
  // Z: the e = 0 codes' products, then the e = 1 ones' (bf16(2 A_m)), each word as its f32 rounded to f16
  const __m256i zf =
      _mm256_set_m128i(f16_of_bf16_hi(_mm256_slli_epi32(a1, 16)), f16_of_bf16_hi(_mm256_slli_epi32(b.z, 16)));
  f = {{table16_of_words(lf), table16_of_words(zf)}, _mm256_set1_epi8(static_cast<char>(8 * e_min - 144))};
  return true;
}
// The H table of the f16 words: s << 7 | e3e2e1 << 3 on the high byte, in both lanes.
[[gnu::always_inline]] inline __m256i e4m3_h_f16() {
  return _mm256_setr_epi8(0, 8, 16, 24, 32, 40, 48, 56, -128, -120, -112, -104, -96, -88, -80, -72,  //
                          0, 8, 16, 24, 32, 40, 48, 56, -128, -120, -112, -104, -96, -88, -80, -72);
}
// 32 columns [j, j1) as f16 from the codes there, 32 a step, by the f16 tables f, or e4m3_put32's
// (t, s256) for the steps they cannot give; returns where it stopped (fewer than 32 columns left).
// Per block of up to 64 steps a first pass flags those steps, and then two loops run over the bits
// of the block's masks, the table steps and then the flagged ones: the codes choose no branch per
// step. (Choosing per step by a branch cost the tables all their gain on a real row: 7-10 % of
// steps flagged there, and each a mispredicted branch plus the old step.)
template <Kind N, bool NT>
size_t e4m3_f16_run(const uint8_t* codes, size_t j, size_t j1, const E4m3F16& f, const E4m3Tables& t, __m256 s256,
                    unsigned char* o) {
  const __m256i h = e4m3_h_f16(), hb = e4m3_h(), m7 = _mm256_set1_epi8(0x7F);
  while (j1 - j >= 32) {
    const size_t n = (j1 - j) / 32 < 64 ? (j1 - j) / 32 : 64;
    const uint8_t* p = codes + j;
    unsigned char* q = o + j * 2;
    uint64_t flagged = 0;
    for (size_t k = 0; k < n; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + 32 * k + x86::kCodesAhead),
                   _MM_HINT_T0);
      const __m256i mag = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k)), m7);
      const __m256i out = _mm256_or_si256(_mm256_cmpeq_epi8(mag, m7),
                                          _mm256_cmpgt_epi8(f.below, _mm256_add_epi8(mag, _mm256_set1_epi8(0x70))));
      flagged |= static_cast<uint64_t>(!_mm256_testz_si256(out, out)) << k;
    }
    for (uint64_t go = ~flagged & (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1); go; go &= go - 1) {
      const size_t k = static_cast<size_t>(__builtin_ctzll(go));
      __m256i w0, w1;
      e4m3_lookup<0x70>(
          _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k)), 0xD8), f.t, h, w0,
          w1);
      put256<NT>(q + 64 * k, w0);
      put256<NT>(q + 64 * k + 32, w1);
    }
    for (; flagged; flagged &= flagged - 1) {
      const size_t k = static_cast<size_t>(__builtin_ctzll(flagged));
      e4m3_put32<N, kF16, NT>(p + 32 * k, t, s256, q + 64 * k, hb);
    }
    j += 32 * n;
  }
  return j;
}

// E4M3 rows whose group scales are all positive powers of two in range (codecs/x86/pow2_scales.hpp;
// mxfp8: groups of 32, or any multiple of 32 columns): the output of a nonzero code x is bf16(x)'s
// bits plus k << 7, which is bf16(2^r x)'s plus d << 8 with r = k mod 2 and d = (k - r) / 2 -- the
// tables of scale 2^r, and d added to each word's high byte. That add is folded into each group's
// tables: d added to every entry of H (every code's high byte takes one H entry) and subtracted
// from Z's high byte for m = 0 (the zero codes, the only ones 2^k leaves as they are: their words
// stay the sign alone). Steps holding a NaN code take byte_chunk16 with the group's scale.
inline bool pow2_scales(const float* scale, size_t n) {
  const __m256i clear = _mm256_set1_epi32(static_cast<int>(x86::kPow2Clear));
  const __m256i below = _mm256_set1_epi32(static_cast<int>(x86::kPow2FieldMin)),
                above = _mm256_set1_epi32(static_cast<int>(x86::kPow2FieldMax));
  for (size_t i = 0; i < n; i += 8) {
    const int m = static_cast<int>(n - i < 8 ? n - i : 8);
    const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i b = _mm256_maskload_epi32(reinterpret_cast<const int*>(scale + i), valid);  // masked: no read past n
    const __m256i e = _mm256_srli_epi32(b, 23);  // the sign is clear wherever pow2 holds
    const __m256i pow2 = _mm256_cmpeq_epi32(_mm256_and_si256(b, clear), _mm256_setzero_si256());
    const __m256i ok =
        _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpgt_epi32(below, e), _mm256_cmpgt_epi32(e, above)), pow2);
    const __m256i bad = _mm256_andnot_si256(ok, valid);
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  return true;
}
// f16 outputs of those rows take no table, as AVX-512's pow2_run_f16: an E4M3 code's bits placed in
// an f16 word (sign to bit 15, exponent and mantissa to bits 13-7) are x 2^-8, which vcvtph2ps
// widens exactly; times s256 = 2^(k + 8) that is x 2^k exactly, and vcvtps2ph rounds it once, as the
// bf16 tables' words are rounded. A step holding a NaN code takes e4m3_put32's arithmetic.
template <Kind N, bool NT>
[[gnu::always_inline]] inline void pow2_f16_step32(const uint8_t* p, __m256 s256, uint16_t* o) {
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i nan =
      _mm256_cmpeq_epi8(_mm256_or_si256(c, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_set1_epi8(-1));
  if (!_mm256_testz_si256(nan, nan)) [[unlikely]] {
    for (size_t k = 0; k < 32; k += 16)
      byte_chunk16<N, kF16, false, true, NT, false>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k)), s256,
                                                    _mm256_setzero_ps(), true, o + k);
    return;
  }
  const auto eight = [&](size_t k) {  // codes k .. k + 7, sign-extended: the sign in bits 15-7
    const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k)));
    const __m128i h = _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(static_cast<short>(0xBFFF)));
    return _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(h), s256), kRne);
  };
  put256<NT>(o, _mm256_set_m128i(eight(8), eight(0)));
  put256<NT>(o + 16, _mm256_set_m128i(eight(24), eight(16)));
}
// Whole 32-column steps; returns the columns written (the rest, under 32, lies in one group).
template <Kind N, Kind O, bool NT>
size_t pow2_e4m3_run(const uint8_t* codes, size_t cols, const float* scale, size_t gs, void* out) {
  constexpr size_t osz = O == kF32 ? 4 : 2;
  auto* o = static_cast<unsigned char*>(out);
  if constexpr (O == kF16) {
    size_t j = 0;
    const float* sg = scale;
    for (size_t next = gs; j + 32 <= cols; j += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead),
                   _MM_HINT_T0);
      if (j == next) ++sg, next += gs;
      pow2_f16_step32<N, NT>(codes + j, _mm256_set1_ps(*sg * 256.f), reinterpret_cast<uint16_t*>(o + j * 2));
    }
    return j;
  }
  const E4m3Tables by_r[2] = {e4m3_tables(1.f), e4m3_tables(2.f)};
  const __m256i h_table = e4m3_h(), m0 = _mm256_setr_epi64x(0xFF, 0, 0xFF, 0);  // byte 0 of each lane: Z's m = 0
  // The step's group by a running count: as j / gs, a 64-bit division per step (a loop over the
  // groups with one over each group's steps measured 21 % slower still: the per-group setup hoisted
  // out of the steps spilled).
  size_t j = 0;
  const float* sg = scale;
  for (size_t next = gs; j + 32 <= cols; j += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead), _MM_HINT_T0);
    if (j == next) ++sg, next += gs;
    const float sc = *sg;
    uint32_t b;
    __builtin_memcpy(&b, &sc, 4);
    const int k = static_cast<int>(b >> 23) - 127;
    const __m256i d = _mm256_set1_epi8(static_cast<char>(k >> 1));  // (k - r) / 2, r = k & 1
    E4m3Tables t = by_r[k & 1];
    t.z.hi = _mm256_sub_epi8(t.z.hi, _mm256_and_si256(d, m0));
    e4m3_put32<N, O, NT>(codes + j, t, _mm256_set1_ps(sc * 256.f), o + j * osz, _mm256_add_epi8(h_table, d));
  }
  return j;
}

// E4M3 rows of groups of 64-511 columns, a multiple of 32, whose tables the memo keeps (block
// strategy: 128 x 128 blocks, 128 rows share each table): the whole groups from column 0 while
// e4m3_table_scale holds; returns the columns done, a group's first column. The same steps as
// byte_run's table loop, in a loop of their own: there, 31 % of fp8 block 128's samples lay
// outside the steps, in each 128-column group's choices and the constants they set up (perf,
// L2-resident rows); here 43-45 GB/s against 36-38 at 32 MiB, 1 thread.
template <Kind N, Kind O, bool NT>
size_t e4m3_memo_run(const uint8_t* codes, size_t cols, const float* scale, size_t gs, void* memo, void* out) {
  constexpr size_t osz = O == kF32 ? 4 : 2;
  auto* o = static_cast<unsigned char*>(out);
  size_t j = 0;
  for (size_t g = 0; cols - j >= gs; ++g) {
    const float sc = scale[g];
    if (!e4m3_table_scale(x86::f32_bits_of(sc))) break;
    const E4m3Tables& m =
        x86::memo_table<E4m3Tables>(memo, g, x86::kAvx2E4m3Tag, sc, 0.f, [&] { return e4m3_tables(sc); });
    // Into registers by whole loads: a copy of the struct, which GCC made by 16-byte moves through
    // the stack, stalled every group on the 32-byte reloads (stores not forwarded).
    const auto ld = [](const __m256i& v) { return _mm256_load_si256(&v); };
    const E4m3Tables t{{ld(m.l.lo), ld(m.l.hi)}, {ld(m.z.lo), ld(m.z.hi)}};
    for (const size_t end = j + gs; j < end; j += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead),
                   _MM_HINT_T0);
      e4m3_put32<N, O, NT>(codes + j, t, _mm256_set1_ps(sc * 256.f), o + j * osz);
    }
  }
  return j;
}

// Flip = 0x80: offset-binary codes (u, value u - 128: pack-quantized 8-bit), int8 codes with the top
// bit flipped, which one XOR per load makes them.
template <Kind N, Kind O, bool ZP, bool E4M3, bool NT, uint8_t Flip = 0>
void byte_run(const uint8_t* codes, size_t cols, const float* scale, const float* zp, size_t gs, void* memo,
              void* out) {
  // E4M3 outputs the tables above give: bf16 of a bf16 or f32 product; f32 / f16 of a bf16 one.
  constexpr bool kTables = E4M3 && !ZP && ((O == kBF16 && N != kF16) || N == kBF16);
  const __m128i flip = _mm_set1_epi8(static_cast<char>(Flip));
  constexpr size_t osz = O == kF32 ? 4 : 2;
  auto* o = static_cast<unsigned char*>(out);
  if constexpr (kTables) {
    if (gs % 32 == 0 && gs < 512 && pow2_scales(scale, (cols + gs - 1) / gs)) {
      // The rest, under 32 columns inside one group, as a row of its own below.
      const size_t done = pow2_e4m3_run<N, O, NT>(codes, cols, scale, gs, out);
      codes += done, cols -= done, scale += done / gs, o += done * osz;
    } else if (memo && gs % 32 == 0 && gs >= 64 && gs < 512) {
      const size_t done = e4m3_memo_run<N, O, NT>(codes, cols, scale, gs, memo, out);
      codes += done, cols -= done, scale += done / gs, o += done * osz;
    }
  }
  __m256 z = _mm256_setzero_ps();
  for (size_t j0 = 0, g = 0; j0 < cols; j0 += gs, ++g) {
    const size_t j1 = cols - j0 > gs ? j0 + gs : cols;
    const __m256 s = _mm256_set1_ps(scale[g]);
    if constexpr (ZP) z = _mm256_set1_ps(zp[g]);
    size_t j = j0;
    // E4M3 without zero points folds the 256 of its f16 decode into the scale while that product is
    // exact: |scale| < 2^119 (NaN and infinities not folded), so scale * 256 stays finite.
    uint32_t sbits;
    __builtin_memcpy(&sbits, &scale[g], 4);
    const bool fold = E4M3 && !ZP && (sbits & 0x7F800000u) < ((127u + 119u) << 23);
    const __m256 s16 = fold ? _mm256_mul_ps(s, _mm256_set1_ps(256.f)) : s;
    if constexpr (kTables) {
      if (j1 - j >= 64 && e4m3_table_scale(sbits)) {  // a table pays for itself over two steps
        // Groups shorter than a row's 512 columns: the rows that repeat this scale share the table
        // (codecs/x86/byte_memo.hpp); it depends on the scale alone.
        const E4m3Tables t = memo && j1 - j < 512
                                 ? x86::memo_table<E4m3Tables>(memo, g, x86::kAvx2E4m3Tag, scale[g], 0.f,
                                                               [&] { return e4m3_tables(scale[g]); })
                                 : e4m3_tables(scale[g]);
        if constexpr (O == kF16) {  // natural bf16 (kTables)
          E4m3F16 f;
          if (j1 - j >= 256 && e4m3_f16_tables(scale[g], f)) j = e4m3_f16_run<N, NT>(codes, j, j1, f, t, s16, o);
        }
        for (; j + 32 <= j1; j += 32) {
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(codes) + j + x86::kCodesAhead),
                       _MM_HINT_T0);
          // e4m3_put32's work, spelled out: through the helper this loop measured 20 % slower on
          // fp8 channel at 32 MiB (43 against 55 GB/s; the stores' branches laid out otherwise).
          if (e4m3_step32<O, NT>(codes + j, t, o + j * osz)) continue;
          for (size_t h = j; h < j + 32; h += 16)  // a finite scale: no NaN patch, as below
            byte_chunk16<N, O, ZP, E4M3, NT, false>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + h)), s16,
                                                    z, fold, o + h * osz);
        }
      }
    }
    if constexpr (!E4M3 && O == kBF16 && N != kF16) {
      if (split_factors_exact(scale[g], ZP ? &zp[g] : nullptr)) {
        const __m256 s24 = _mm256_set1_ps(scale[g] * 0x1p-24f), z24 = ZP ? _mm256_set1_ps(zp[g] * 0x1p24f) : z;
        for (; j + 16 <= j1; j += 16)
          int8_chunk16_split<ZP, NT>(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j)), flip),
                                     s24, z24, o + j * osz);
      }
    }
    // Under a finite scale and zero point the rounding needs no NaN patch. int8 codes are finite, so
    // no output is NaN. E4M3's NaN codes enter as f16 quiet NaNs, which vcvtph2ps widens to
    // sign | 0x7FC00000, and the multiply and subtraction pass that operand on; the unpatched rounding
    // of it (+0x7FFF, low half zero, no carry) is the patched one, sign | 0x7FC0. A code's finite value
    // times a finite scale is at most an infinity, never a NaN of another payload.
    simd::with_flag(finite(scale[g]) && (!ZP || finite(zp[g])), [&](auto no_nan) {
      for (; j + 16 <= j1; j += 16)
        byte_chunk16<N, O, ZP, E4M3, NT, !decltype(no_nan)::value>(
            _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j)), flip), s16, z, fold,
            o + j * osz);
    });
    for (; j + 8 <= j1; j += 8)
      byte_chunk<N, O, ZP, E4M3, NT>(_mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j)), flip),
                                     s, z, o + j * osz);
    if (j < j1) {
      const size_t n = j1 - j;
      alignas(16) unsigned char in[16] = {}, tmp[32];
      for (size_t k = 0; k < n; ++k) in[k] = codes[j + k];
      byte_chunk<N, O, ZP, E4M3>(_mm_xor_si128(_mm_load_si128(reinterpret_cast<const __m128i*>(in)), flip), s, z, tmp);
      for (size_t k = 0; k < n * osz; ++k) o[j * osz + k] = tmp[k];
    }
  }
}

// ---------------------------------------------------------------- packed int codes -> int8
//
// Dense pack-quantized codes (code i at stream bits [i*b, i*b+b) of little-endian bytes:
// compressed_tensors/compressors/pack_quantized/helpers.py `unpack_from_int32`), 16 per 256-bit
// register: codes 0-15 span 2b <= 14 bytes, so one 16-byte load into both lanes holds them, and
// vpshufb takes for code c (lane 0: 0-7, lane 1: 8-15) the 16-bit window of bytes floor(c*b/8)
// and the next (<= 14 + 1); the code is bits [s, s + b) of it, s = c*b % 8 <= 7. AVX2 has no
// 16-bit variable shift: a multiply by 2^(8-s) moves them to bits [8, 8 + b) (what passes bit 16
// drops) and a shift by 8 leaves them in the low byte, under the next code's bits; the byte mask
// after the pack, and a byte subtraction u - 2^(b-1).

// narrow_a / narrow_b (b <= 3, packed_idx_narrow): the windows of codes 0-7 | 8-15 and 16-23 | 24-31
// within the step's first 16 bytes, in both lanes.
struct UnpackCtl {
  __m256i shuf, mul, narrow_a, narrow_b;
};
inline UnpackCtl unpack_ctl(unsigned bits) {
  alignas(32) uint8_t shuf[32], na[32], nb[32];
  alignas(32) uint16_t mul[16];
  for (unsigned c = 0; c < 8; ++c) {
    const unsigned bit = c * bits;
    for (unsigned lane = 0; lane < 2; ++lane) {
      const unsigned byte = (8 * lane + c) * bits / 8;  // <= 15 * 7 / 8 = 13: the window inside the 16 bytes
      shuf[16 * lane + 2 * c] = static_cast<uint8_t>(byte);
      shuf[16 * lane + 2 * c + 1] = static_cast<uint8_t>(byte + 1);
      mul[8 * lane + c] = static_cast<uint16_t>(1u << (8 - bit % 8));  // codes 8 + c: the same bit % 8
      // b <= 3: code 31's window ends at byte 31 * 3 / 8 + 1 = 12 (unused, and possibly past 15, for wider codes)
      for (unsigned half = 0; half < 2; ++half) {
        uint8_t* t = half ? nb : na;
        const unsigned first = (16 * half + 8 * lane + c) * bits / 8;
        t[16 * lane + 2 * c] = static_cast<uint8_t>(first);
        t[16 * lane + 2 * c + 1] = static_cast<uint8_t>(first + 1);
      }
    }
  }
  const auto ld = [](const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); };
  return {ld(shuf), ld(mul), ld(na), ld(nb)};
}
// Codes 16q .. 16q + 15 as 16-bit lanes from p = the bytes of code 16q, each code in its lane's
// low byte (the bits above it not masked off).
[[gnu::always_inline]] inline __m256i unpack16(const uint8_t* p, const UnpackCtl& ctl) {
  const __m256i in = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(in, ctl.shuf), ctl.mul), 8);
}
// u of codes 0-31 from p (reach 2 * bits + 16 bytes) as bytes, in the order packus leaves: per
// lane codes 0-7 and 16-23 (lane 0), 8-15 and 24-31 (lane 1).
[[gnu::always_inline]] inline __m256i packed_idx(const uint8_t* p, unsigned bits, const UnpackCtl& ctl) {
  return _mm256_and_si256(_mm256_packus_epi16(unpack16(p, ctl), unpack16(p + 2 * bits, ctl)),
                          _mm256_set1_epi8(static_cast<char>((1u << bits) - 1)));
}
// The same in order: qwords 0 2 1 3.
[[gnu::always_inline]] inline __m256i unpack32(const uint8_t* p, unsigned bits, const UnpackCtl& ctl) {
  return _mm256_permute4x64_epi64(packed_idx(p, bits, ctl), 0xD8);
}

// ---------------------------------------------------------------- fused packed int1-5 dequant
//
// Codes of b <= 5 bits take one of 2^b values, so inside a group the output is a function of u
// alone, as in the nibble kernel: its per-group tables (group_values over the code values
// u - 2^(b-1) as f32, table16 / natural_image: the 8-bit kernel's arithmetic on the same int8
// values, so the same bits) looked up by the codes unpack16 leaves, 32 columns a step. 16-bit
// outputs: T = 1 or 2 pshufb tables of 16 entries (b <= 4, b = 5), bit 4 of u choosing between
// them with blendv; f32 outputs: b <= 4, the two 8-float tables. Entries past 2^b are never
// looked up (u is masked to b bits). 2-bit codes with 16-bit outputs take their indices straight
// from their bytes (packed_idx2: a third of the operations of unpack16's multiply); 1- and 3-bit
// codes unpack16's windows from one load (packed_idx_narrow). Six bits (four tables, three blends
// per half) measured slower than the two-pass path; b >= 6 goes to packed_split_run (bf16 outputs,
// and f16 of a bf16 product for 6 and 7 bits) or the two passes. 5 bits without zero points, 16-bit
// outputs: int5_mirror's second table.

// 32 columns of 16-bit output from the codes at p: packed_idx's order makes the byte lookups
// interleaved by unpacklo/hi_epi8 columns 0-15 and 16-31. pshufb reads index bits 3:0 (and 7,
// clear: u < 32); a 16-bit shift by 3 puts bit 4 of each byte in its bit 7, which is all blendv
// reads (the bits shifted in from the byte below land under bit 7).
// Codes of b <= 3 bits: the same, from one 16-byte load of the step's 4b <= 12 bytes (reach 16) in
// both lanes, whose windows two vpshufb take for codes 0-15 and 16-31; one mask after the pack.
[[gnu::always_inline]] inline __m256i packed_idx_narrow(const uint8_t* p, unsigned bits, const UnpackCtl& ctl) {
  const __m256i in = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i a = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(in, ctl.narrow_a), ctl.mul), 8);
  const __m256i b = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(in, ctl.narrow_b), ctl.mul), 8);
  return _mm256_and_si256(_mm256_packus_epi16(a, b), _mm256_set1_epi8(static_cast<char>((1u << bits) - 1)));
}
// 2-bit codes: the same positions from the step's 8 bytes alone (reach 8), without the multiply. Code
// u at bits 2k of its byte is looked up as the byte masked in place, u for k = 0 and 4u for k = 1,
// from the byte itself, k = 2 and 3 the same from the byte shifted down by 4 (packed_groups: the
// tables' entry 4u repeats entry u).
[[gnu::always_inline]] inline __m256i packed_idx2(const uint8_t* p) {
  long long q;
  __builtin_memcpy(&q, p, 8);
  const __m256i b = _mm256_set1_epi64x(q);
  const __m256i src = _mm256_blend_epi32(b, _mm256_srli_epi16(b, 4), 0xCC);  // per lane: bytes, bytes >> 4
  const __m256i pick = _mm256_setr_epi8(0, 0, 8, 8, 1, 1, 9, 9, 4, 4, 12, 12, 5, 5, 13, 13,       // codes 0-7, 16-23
                                        2, 2, 10, 10, 3, 3, 11, 11, 6, 6, 14, 14, 7, 7, 15, 15);  // 8-15, 24-31
  return _mm256_and_si256(_mm256_shuffle_epi8(src, pick), _mm256_set1_epi16(0x0C03));
}
template <unsigned T, bool NT>
[[gnu::always_inline]] inline void packed_table16(__m256i idx, const Table16* tab, uint16_t* o) {
  __m256i l = _mm256_shuffle_epi8(tab[0].lo, idx), h = _mm256_shuffle_epi8(tab[0].hi, idx);
  if constexpr (T == 2) {
    const __m256i b4 = _mm256_slli_epi16(idx, 3);
    l = _mm256_blendv_epi8(l, _mm256_shuffle_epi8(tab[1].lo, idx), b4);
    h = _mm256_blendv_epi8(h, _mm256_shuffle_epi8(tab[1].hi, idx), b4);
  }
  put256<NT>(o, _mm256_unpacklo_epi8(l, h));
  put256<NT>(o + 16, _mm256_unpackhi_epi8(l, h));
}
// 32 columns of f32 output of a bf16 product (natural bf16): the bf16 word tables' lookups, each
// word widened (<< 16, exact). The indices in packed_idx's order, dwords 0 4 2 6 | 1 5 3 7 (codes
// 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31): the byte unpacks then the word unpacks with zero
// leave codes 0-7, 8-15, 16-23 and 24-31 whole, in order.
template <bool NT>
[[gnu::always_inline]] inline void packed_table16_f32(__m256i idx, const Table16& tab, float* o) {
  const __m256i c = _mm256_permutevar8x32_epi32(idx, _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7));
  const __m256i l = _mm256_shuffle_epi8(tab.lo, c), h = _mm256_shuffle_epi8(tab.hi, c);
  const __m256i w0 = _mm256_unpacklo_epi8(l, h), w1 = _mm256_unpackhi_epi8(l, h), zero = _mm256_setzero_si256();
  put256<NT>(o, _mm256_unpacklo_epi16(zero, w0));
  put256<NT>(o + 8, _mm256_unpackhi_epi16(zero, w0));
  put256<NT>(o + 16, _mm256_unpacklo_epi16(zero, w1));
  put256<NT>(o + 24, _mm256_unpackhi_epi16(zero, w1));
}
// 32 columns of f32 output: the codes u in order (unpack32), 8 at a time through the two 8-float
// tables.
template <bool NT>
[[gnu::always_inline]] inline void packed_table32(__m256i u, __m256 tab_lo, __m256 tab_hi, float* o) {
  const __m128i u0 = _mm256_castsi256_si128(u), u1 = _mm256_extracti128_si256(u, 1);
  put256<NT>(o, lut_lookup(_mm256_cvtepu8_epi32(u0), tab_lo, tab_hi));
  put256<NT>(o + 8, lut_lookup(_mm256_cvtepu8_epi32(_mm_srli_si128(u0, 8)), tab_lo, tab_hi));
  put256<NT>(o + 16, lut_lookup(_mm256_cvtepu8_epi32(u1), tab_lo, tab_hi));
  put256<NT>(o + 24, lut_lookup(_mm256_cvtepu8_epi32(_mm_srli_si128(u1, 8)), tab_lo, tab_hi));
}
// 5-bit codes without zero points, bf16 outputs of a bf16 or f32 product (or f16): the table of codes 0-15
// (values q = u - 16 = -16 .. -1) from that of codes 16-31 (q = 0 .. 15). RNE is symmetric, so
// bf16(-x s) is bf16(x s) with the sign bit flipped (+0x80 to the high byte), entry u that of
// 16 - u; and bf16(-16 s) is -16 bf16(s): entry 1 plus 4 << 7 (+2 to the high byte), while s and
// 16 bf16(s) are normal and finite -- exponent field 1 .. 249 (bf16(s) may round up one binade).
// f16 outputs (of a bf16, f16 or f32 product): the same with f16 words, -16 times entry 1 being
// that entry plus 4 << 10 (+16 to the high byte) while entry 1 is an f16 normal and 16 times it
// finite -- field 113 .. 137 (|s| in [2^-14, 2^11): entry 1 at most 2^11, 16 times it 2^15).
template <Kind O>
inline bool int5_mirror_scale(float scale) {
  uint32_t s;
  __builtin_memcpy(&s, &scale, 4);
  const uint32_t e = (s >> 23) & 0xFF;
  return O == kF16 ? e >= 113 && e <= 137 : e >= 1 && e <= 249;
}
template <Kind O>
[[gnu::always_inline]] inline Table16 int5_mirror(const Table16& t) {
  const __m256i rev = _mm256_setr_epi8(1, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1,  //
                                       1, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
  constexpr char a = O == kF16 ? -128 + 16 : -128 + 2;  // entry 0: the sign flipped, times 16
  const __m256i adj =
      _mm256_setr_epi8(a, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, a,
                       -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128);
  return {_mm256_shuffle_epi8(t.lo, rev), _mm256_add_epi8(_mm256_shuffle_epi8(t.hi, rev), adj)};
}
// The step's indices from the codes at p (its reach of bytes), in packed_idx's order: Mode 2 =
// packed_idx2, 1 = packed_idx_narrow, 0 = packed_idx.
template <int Mode>
[[gnu::always_inline]] inline __m256i packed_indices(const uint8_t* p, unsigned bits, const UnpackCtl& ctl) {
  if constexpr (Mode == 2) return packed_idx2(p);
  else if constexpr (Mode == 1) return packed_idx_narrow(p, bits, ctl);
  else return packed_idx(p, bits, ctl);
}
// Whether packed_groups looks outputs up as words (the 16-bit outputs' tables; f32 outputs of a
// bf16 product are bf16 words widened, packed_table16_f32), else as f32 through two 8-float tables.
template <Kind N, Kind O>
constexpr bool kPackedWords = O != kF32 || N == kBF16;
// The 32 columns of a step's indices at dst, through the group's tables.
template <Kind N, Kind O, unsigned T, bool NT>
[[gnu::always_inline]] inline void packed_put32(__m256i idx, const Table16* tab, __m256 tab_lo, __m256 tab_hi,
                                                void* dst) {
  if constexpr (!kPackedWords<N, O>)
    packed_table32<NT>(_mm256_permute4x64_epi64(idx, 0xD8), tab_lo, tab_hi, static_cast<float*>(dst));
  else if constexpr (O == kF32) packed_table16_f32<NT>(idx, tab[0], static_cast<float*>(dst));
  else packed_table16<T, NT>(idx, tab, static_cast<uint16_t*>(dst));
}
// packed_groups' columns for one index mode. Everything by value: the output's stores may alias
// whatever a reference reaches (vector types alias all), which would reload it every step.
template <Kind N, Kind O, bool ZP, bool NT, unsigned T, int Mode>
void packed_groups_run(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp, size_t gs,
                       unsigned char* o) {
  constexpr bool kWords = kPackedWords<N, O>;
  constexpr size_t osz = O == kF32 ? 4 : 2;
  const UnpackCtl ctl = Mode == 2 ? UnpackCtl{} : unpack_ctl(bits);
  alignas(32) float lut[16 * T];
  for (int e = 0; e < static_cast<int>(16 * T); ++e)
    lut[e] = static_cast<float>((Mode == 2 ? (e & 3) | e >> 2 : e) - (1 << (bits - 1)));
  const uint64_t nbytes = (cols * bits + 7) / 8, reach = Mode == 2 ? 8 : Mode == 1 ? 16 : 2ull * bits + 16;
  const uint64_t stride = 4ull * bits;  // a step's bytes
  // steps 0 .. m load inside the row's bytes: stride m + reach <= nbytes
  const size_t fit = nbytes < reach ? 0 : static_cast<size_t>((nbytes - reach) / stride + 1) * 32;
  for (size_t g = 0, g0 = 0; g0 < cols; ++g, g0 += gs) {
    const size_t g1 = cols - g0 > gs ? g0 + gs : cols, whole = g1 < fit ? g1 : fit;
    Table16 tab[T];
    __m256 tab_lo = _mm256_setzero_ps(), tab_hi = tab_lo;
    if constexpr (!kWords) {
      const Lanes t = group_values<ZP>(_mm256_load_ps(lut), _mm256_load_ps(lut + 8), scale, zp, g);
      tab_lo = natural_image<N>(t.a);
      tab_hi = natural_image<N>(t.b);
    } else {
      // The word tables: of the 16-bit output, or of the bf16 product an f32 output widens.
      constexpr Kind TN = O == kF32 ? kBF16 : N, TO = O == kF32 ? kBF16 : O;
      const auto build = [&](unsigned k, auto no_nan) {
        return table16<TN, TO, !decltype(no_nan)::value>(
            group_values<ZP>(_mm256_load_ps(lut + 16 * k), _mm256_load_ps(lut + 16 * k + 8), scale, zp, g));
      };
      simd::with_flag(finite(scale[g]) && (!ZP || finite(zp[g])), [&](auto no_nan) {
        if constexpr (T == 2 && !ZP && (TO == kF16 || TN != kF16)) {
          if (int5_mirror_scale<TO>(scale[g])) {
            tab[1] = build(1, no_nan);
            tab[0] = int5_mirror<TO>(tab[1]);
            return;
          }
        }
        for (unsigned k = 0; k < T; ++k) tab[k] = build(k, no_nan);
      });
    }
    size_t j = g0;
    for (const uint8_t* p = words + j / 8 * bits; j + 32 <= whole; j += 32, p += stride)
      packed_put32<N, O, T, NT>(packed_indices<Mode>(p, bits, ctl), tab, tab_lo, tab_hi, o + j * osz);
    for (; j < g1; j += 32) {  // the row's end: from a zero-padded copy of its bytes left
      const uint64_t at = j / 8 * bits;
      alignas(32) uint8_t in[2 * 5 + 16] = {};  // the widest reach: 5-bit codes
      alignas(32) unsigned char tmp[32 * osz];
      for (uint64_t b = 0; b < reach && at + b < nbytes; ++b) in[b] = words[at + b];
      packed_put32<N, O, T, false>(packed_indices<Mode>(in, bits, ctl), tab, tab_lo, tab_hi, tmp);
      // Bytes in and out by loops: a memcpy call for the outputs, into the line the streaming stores
      // are filling, measured 10 % slower on 4096-column rows (32 MiB, 1 thread), and for the
      // inputs within noise, 0-5 % slower. Tried and not kept: the row's last 32 bytes by two
      // loads and whole steps stored straight (int5 +4 %, but int3 -> f16 -6 %: its main loop lost
      // a register to the longer row end, a reload every step; out of line, within noise).
      const size_t n = (g1 - j < 32 ? g1 - j : 32) * osz;
      for (size_t b = 0; b < n; ++b) o[j * osz + b] = tmp[b];
    }
  }
}
// Columns from 0 through T tables of 16 entries (T = 1 for f32), 32 a step (group size a multiple
// of 32, or one group); returns the columns done: all, or 0 where the group size does not fit (the
// caller's two-pass path). Steps whose loads would pass the row's bytes (its last one or two) read
// a zero-padded stack copy of the bytes left, and the row's last step of fewer than 32 columns
// writes through a stack buffer.
template <Kind N, Kind O, bool ZP, bool NT, unsigned T>
size_t packed_groups(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp, size_t gs,
                     void* out) {
  static_assert(T == 1 || (O != kF32 && T == 2));
  if (gs == 0 || (gs % 32 != 0 && gs < cols)) return 0;
  auto* o = static_cast<unsigned char*>(out);
  if (kPackedWords<N, O> && bits == 2) packed_groups_run<N, O, ZP, NT, T, 2>(words, bits, cols, scale, zp, gs, o);
  else if (bits <= 3) packed_groups_run<N, O, ZP, NT, T, 1>(words, bits, cols, scale, zp, gs, o);
  else packed_groups_run<N, O, ZP, NT, T, 0>(words, bits, cols, scale, zp, gs, o);
  return cols;
}

// ---------------------------------------------------------------- fused packed int6-8 -> bf16
//
// int8_chunk16_split's arithmetic on codes of b = 5..8 bits taken straight from their stream, 16
// columns (2b bytes) a step. Dword i of a step holds codes 2i and 2i + 1, stream bits [2bi, 2bi + 2b):
// vpshufb puts the three bytes from floor(2bi / 8) in its low bytes (the top one zero; 8 bits: byte_e),
// so with r = 2bi % 8 code 2i is its bits [r, r + b) and code 2i + 1 its bits [r + b, r + 2b), below
// bit 21. Masked in place they are u 2^r and u' 2^(r + b), exact as int32 and as f32. A lane's 8
// codes are whole bytes (8b bits), so r, the masks and the powers of two are the same every step.
// A code's value is u - 2^(b-1): with c = 2^(b-1) + zp, (u 2^k - c 2^k) (s 2^-k) is the same real
// number as (q - zp) s (one rounding to f32, then bf16_pairs), while c is an integer -- zero points
// that are integers of magnitude <= 2^20: c 2^k and the difference, an integer below 2^24, are
// exact -- and s 2^-k is exact: exponent field >= 15 (k <= 6 + 7 = 13), or a zero. Other groups return
// to the caller's two-pass path (unpack_int8, then the 8-bit kernel). With the FMA form (below)
// 16 vector operations per 16 columns against that path's 27 (6 and 7 bits). 8-bit codes are whole
// bytes: two vpshufb put them in place with zeros around them (byte_e, byte_o), 15 operations,
// 3-4 % faster than the shuffle and two masks, which measured the same as the 8-bit kernel with
// their top bit flipped. 5-bit codes stay on their tables (packed_groups), which measured faster.
struct SplitCtl {
  __m256i shuf, even, odd;  // the dwords' bytes; codes 2i and 2i + 1 in place
  __m256i byte_e, byte_o;   // 8 bits: codes 2i and 2i + 1 straight to their places, zeros around them
  __m256 down_e, down_o;    // 2^-r, 2^-(r + b)
  __m256 up_e, up_o;        // 2^r, 2^(r + b)
};
inline SplitCtl make_split_ctl(unsigned bits) {
  alignas(32) uint8_t shuf[32], byte_e[32], byte_o[32];
  alignas(32) int32_t even[8], odd[8];
  alignas(32) float down_e[8], down_o[8], up_e[8], up_o[8];
  for (unsigned i = 0; i < 8; ++i) {
    const unsigned bit = 2 * bits * i, r = bit % 8;  // lane 1's bytes: 8..15 of the broadcast
    for (unsigned k = 0; k < 4; ++k)                 // b <= 7: bytes up to 2b * 7 / 8 + 2 <= 14
      shuf[4 * i + k] = static_cast<uint8_t>(k < 3 ? bit / 8 + k : 0x80);
    for (unsigned k = 0; k < 4; ++k) {  // bits == 8: r = 0, code 2i in byte 0, code 2i + 1 in byte 1
      byte_e[4 * i + k] = static_cast<uint8_t>(k == 0 ? 2 * i : 0x80);
      byte_o[4 * i + k] = static_cast<uint8_t>(k == 1 ? 2 * i + 1 : 0x80);
    }
    even[i] = static_cast<int32_t>(((1u << bits) - 1) << r);
    odd[i] = even[i] << bits;
    up_e[i] = static_cast<float>(1u << r);
    up_o[i] = static_cast<float>(1u << (r + bits));
    down_e[i] = 1.f / up_e[i];
    down_o[i] = 1.f / up_o[i];
  }
  const auto ld = [](const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); };
  return {ld(shuf),
          ld(even),
          ld(odd),
          ld(byte_e),
          ld(byte_o),
          _mm256_load_ps(down_e),
          _mm256_load_ps(down_o),
          _mm256_load_ps(up_e),
          _mm256_load_ps(up_o)};
}
// Built once per bit width: a build costs about 5 % of a 4096-column row's decode.
inline const SplitCtl& split_ctl(unsigned bits) {
  struct All {
    SplitCtl c[4];
  };
  static const All all = []() noexcept {
    All a{};
    for (unsigned b = 5; b <= 8; ++b) a.c[b - 5] = make_split_ctl(b);
    return a;
  }();
  return all.c[bits - 5];
}
// Whether every nonzero product (u - c) s of a group's codes u < 2^bits, c = 2^(bits-1) + zp (an
// integer, packed_split_scan), rounded to bf16, is an f16 normal: |s| >= 2^-14 (|u - c| >= 1) and
// max |u - c| |s| <= 65280, the largest bf16 below f16's overflow (both exact in double).
inline bool split_f16_normal(unsigned bits, float scale, float zp) {
  const double c = static_cast<double>(1u << (bits - 1)) + zp, s = scale < 0 ? -scale : scale;
  const double q = c > (1u << bits) - 1 - c ? c : (1u << bits) - 1 - c;
  return scale == 0.f || (s >= 0x1p-14 && (q < 0 ? -q : q) * s <= 65280.0);
}
// The 16 outputs of even-column products pe and odd-column ones po (finite factors), interleaved at
// o: bf16 (of a bf16 or f32 product) by bf16_pairs. f16 of a bf16 product where every nonzero
// product's bf16 is an f16 normal (split_f16_normal): the bf16 words of the products times 2^-112
// (exact, as f32 and through the rounding: each such product is >= 2^-14, its image >= 2^-126 stays
// normal; zeros keep their sign), whose bits s 000 eeeee mmmmmmm hold the f16 exponent field,
// shifted up 3 with the sign put back: the f16 bits of the same value (8 significant bits fit f16's
// 11). Against two vcvtps2ph of each product's bf16 image, 5-7 % faster on int6 rows (in which
// form the kernel measured no faster than the two-pass path).
template <Kind N, Kind O, bool NT>
[[gnu::always_inline]] inline void split_out(__m256 pe, __m256 po, void* o) {
  if constexpr (O == kBF16) {
    static_assert(N != kF16, "bf16 of an f16 product: the two-pass path");
    bf16_pairs<NT>(pe, po, o);
  } else {
    static_assert(O == kF16 && N == kBF16);
    const __m256 down = _mm256_set1_ps(0x1p-112f);
    const __m256i w = bf16_pair_words(_mm256_mul_ps(pe, down), _mm256_mul_ps(po, down));
    put256<NT>(o, _mm256_or_si256(_mm256_slli_epi16(w, 3),
                                  _mm256_and_si256(w, _mm256_set1_epi16(static_cast<short>(0x8000)))));
  }
}
// The outputs packed_split_run gives (f16 for 6 and 7 bits: 8-bit codes' byte_run measured faster).
template <Kind N, Kind O>
constexpr bool kSplitOut = (O == kBF16 && N != kF16) || (O == kF16 && N == kBF16);
// 16 columns at o from the 16 bytes at p (the step's 2b and what follows). Fma: the products as
// u 2^k (s 2^-k) - c s in one rounding, the same real number, for groups where c s is exact and s
// positive (an exact zero sum is +0, as is 0 * s only for s > 0); else (u 2^k - c 2^k) (s 2^-k),
// ce and co being c 2^k and cs unused.
template <Kind N, Kind O, bool Fma, bool Bytes, bool NT>
[[gnu::always_inline]] inline void packed_split16(__m128i bytes, const SplitCtl& k, __m256 se, __m256 so, __m256 ce,
                                                  __m256 co, __m256 cs, void* o) {
  const __m256i b = _mm256_broadcastsi128_si256(bytes);
  __m256 e, d;
  if constexpr (Bytes) {  // two shuffles in place of a shuffle and two masks
    e = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, k.byte_e));
    d = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, k.byte_o));
  } else {
    const __m256i w = _mm256_shuffle_epi8(b, k.shuf);
    e = _mm256_cvtepi32_ps(_mm256_and_si256(w, k.even));
    d = _mm256_cvtepi32_ps(_mm256_and_si256(w, k.odd));
  }
  if constexpr (Fma) split_out<N, O, NT>(_mm256_fmsub_ps(e, se, cs), _mm256_fmsub_ps(d, so, cs), o);
  else split_out<N, O, NT>(_mm256_mul_ps(_mm256_sub_ps(e, ce), se), _mm256_mul_ps(_mm256_sub_ps(d, co), so), o);
}
// The 16 bytes from p, those at or past end zero: the 16 bytes before end (which must lie in the
// row: end - 16 >= the row's first byte), moved down by one vpshufb, for p in (end - 16, end).
inline __m128i load_before(const uint8_t* p, const uint8_t* end) {
  alignas(16) static constexpr int8_t kSlide[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  const size_t sh = 16 - static_cast<size_t>(end - p);
  return _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(end - 16)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(kSlide + sh)));
}
// The groups of columns [0, cols) in one form; nbytes: the whole row's. Steps whose 16-byte load
// would pass the row's bytes (the row's last one or two) take their bytes from the row's last 16
// (load_before), and a step of fewer columns reads a zero-padded stack copy and writes through a
// stack buffer. (A stack copy for every such step, byte by byte, measured 3-5 % slower on int6 and
// int7 rows of 4096 columns, whose last step is one.)
template <Kind N, Kind O, bool ZP, bool NT, bool Fma, bool Bytes>
void packed_split_groups(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                         size_t gs, uint64_t nbytes, void* out) {
  const SplitCtl& k = split_ctl(bits);
  const uint64_t step = 2ull * bits;
  // steps 0 .. m load inside the row's bytes: m step + 16 <= nbytes
  const size_t fit = nbytes < 16 ? 0 : static_cast<size_t>((nbytes - 16) / step + 1) * 16;
  const float half = static_cast<float>(1u << (bits - 1));
  auto* o = static_cast<uint16_t*>(out);
  for (size_t g = 0, j = 0; j < cols; ++g) {
    const size_t g1 = cols - j > gs ? j + gs : cols, whole = g1 < fit ? g1 : fit;
    const float sc = scale[g], c = half + (ZP ? zp[g] : 0.f);
    const __m256 s = _mm256_set1_ps(sc), se = _mm256_mul_ps(s, k.down_e), so = _mm256_mul_ps(s, k.down_o);
    __m256 ce = _mm256_setzero_ps(), co = ce, ncs = ce;
    if constexpr (Fma) {
      ncs = _mm256_set1_ps(c * sc);
    } else {
      ce = _mm256_mul_ps(_mm256_set1_ps(c), k.up_e);
      co = _mm256_mul_ps(_mm256_set1_ps(c), k.up_o);
    }
    for (const uint8_t* p = words + j / 8 * bits; j + 16 <= whole; j += 16, p += step)
      packed_split16<N, O, Fma, Bytes, NT>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), k, se, so, ce, co, ncs,
                                           o + j);
    for (; j < g1; j += 16) {
      const uint64_t at = j / 8 * bits;
      if (j + 16 <= g1 && nbytes >= 16) {  // a whole step: its bytes from a load that ends with the row's
        packed_split16<N, O, Fma, Bytes, NT>(load_before(words + at, words + nbytes), k, se, so, ce, co, ncs, o + j);
        continue;
      }
      alignas(16) uint8_t in[16] = {};
      alignas(32) uint16_t tmp[16];
      for (uint64_t b = 0; b < sizeof in && at + b < nbytes; ++b) in[b] = words[at + b];
      packed_split16<N, O, Fma, Bytes, false>(_mm_load_si128(reinterpret_cast<const __m128i*>(in)), k, se, so, ce, co,
                                              ncs, tmp);
      for (size_t m = 0; m < 16 && j + m < g1; ++m) o[j + m] = tmp[m];  // by a loop, as packed_groups_run
    }
    j = g1;
  }
}
// The first n groups' checks, 8 scales a step (checked one group at a time, the rows ran 6-11 %
// slower): returns how many groups from the first the split takes exactly (above: s's exponent
// field 15 .. 254 or a zero, zp an integer of magnitude <= 2^20), and clears fma unless each of
// those allows the FMA form: s > 0 and c s exact (no residue, so also finite; s normal with |c| >= 1,
// or c = 0, keeps it above the subnormals), c = 2^(b-1) + zp. Masked loads read no scale past n.
template <bool ZP>
inline size_t packed_split_scan(const float* scale, const float* zp, size_t n, unsigned bits, bool& fma) {
  const __m256 half = _mm256_set1_ps(static_cast<float>(1u << (bits - 1))), zero = _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), field = _mm256_set1_epi32(0xFF);
  for (size_t i = 0; i < n; i += 8) {
    const unsigned m = n - i < 8 ? static_cast<unsigned>(n - i) : 8u, live = (1u << m) - 1;
    const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m)), lane);
    const __m256 sc = _mm256_maskload_ps(scale + i, valid);
    const __m256 z = ZP ? _mm256_maskload_ps(zp + i, valid) : zero;
    const __m256i sb = _mm256_castps_si256(sc), se = _mm256_and_si256(_mm256_srli_epi32(sb, 23), field);
    // exponent field 15 .. 254, or a zero; zp an integer of magnitude <= 2^20
    __m256 ok = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_andnot_si256(_mm256_cmpeq_epi32(se, field), _mm256_cmpgt_epi32(se, _mm256_set1_epi32(14))),
        _mm256_cmpeq_epi32(_mm256_and_si256(sb, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_setzero_si256())));
    if constexpr (ZP) {
      ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(z, _mm256_set1_ps(-0x1p20f), _CMP_GE_OQ),
                                           _mm256_cmp_ps(z, _mm256_set1_ps(0x1p20f), _CMP_LE_OQ)));
      ok = _mm256_and_ps(ok, _mm256_cmp_ps(_mm256_round_ps(z, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), z, _CMP_EQ_OQ));
    }
    const unsigned bad = ~static_cast<unsigned>(_mm256_movemask_ps(ok)) & live;
    const unsigned take = bad ? static_cast<unsigned>(__builtin_ctz(bad)) : m;  // lanes [0, take) admitted
    const __m256 c = _mm256_add_ps(half, z), cs = _mm256_mul_ps(c, sc);
    // c s exact: its residue c s - fl(c s) is 0 (an infinite fl(c s) leaves an infinite residue,
    // a NaN scale a NaN one, so no finiteness test is needed beside it)
    const __m256 good =
        _mm256_and_ps(_mm256_cmp_ps(sc, zero, _CMP_GT_OQ), _mm256_cmp_ps(_mm256_fmsub_ps(c, sc, cs), zero, _CMP_EQ_OQ));
    if (~static_cast<unsigned>(_mm256_movemask_ps(good)) & ((1u << take) - 1)) fma = false;
    if (take < m) return i + take;
  }
  return n;
}
// Whole groups from column 0 while the split is exact (packed_split_scan), and for f16 outputs
// split_f16_normal (group sizes that keep a step's 16 columns in one group and its codes on a byte:
// multiples of 16, or one group); returns the columns done, a group's first column. The groups are
// checked first, so that one form (FMA where every group allows it) runs the row without a choice
// per group.
template <Kind N, Kind O, bool ZP, bool NT>
size_t packed_split_run(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                        size_t gs, void* out) {
  if (gs == 0 || (gs % 16 != 0 && gs < cols)) return 0;
  bool fma = true;
  size_t groups = packed_split_scan<ZP>(scale, zp, (cols + gs - 1) / gs, bits, fma);
  if constexpr (O == kF16) {
    for (size_t g = 0; g < groups; ++g)
      if (!split_f16_normal(bits, scale[g], ZP ? zp[g] : 0.f)) groups = g;
  }
  const size_t done = groups * gs < cols ? groups * gs : cols;
  if (done == 0) return 0;
  // the whole row's bytes: the padded row ends must not read past them, nor before them
  const uint64_t nbytes = (cols * bits + 7) / 8;
  simd::with_flag(fma, [&](auto f) {
    simd::with_flag(bits == 8, [&](auto by) {
      packed_split_groups<N, O, ZP, NT, decltype(f)::value, decltype(by)::value>(words, bits, done, scale, zp, gs,
                                                                                 nbytes, out);
    });
  });
  return done;
}

}  // namespace

size_t bitmask_expand_1(const uint8_t* m, const void* v, size_t c, void* o, bool stream) noexcept {
  return stream ? expand_row<Step1, true>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o))
                : expand_row<Step1, false>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_2(const uint8_t* m, const void* v, size_t c, void* o, bool stream) noexcept {
  return stream ? expand_row<Step2, true>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o))
                : expand_row<Step2, false>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_4(const uint8_t* m, const void* v, size_t c, void* o, bool stream) noexcept {
  return stream ? expand_row<Step4, true>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o))
                : expand_row<Step4, false>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}

void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* out) noexcept {
  const size_t gs = static_cast<size_t>(spec.group_size);
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      simd::with_flag(spec.stream, [&](auto nt) {
        constexpr Kind N = decltype(n)::value, O = decltype(o)::value;
        constexpr bool Z = decltype(z)::value, NT = decltype(nt)::value;
        size_t j = 0, g = 0;  // columns and groups done by the E2M1 tables
        // f16 of a bf16 product: the bf16 words rounded (e2m1_pair_table); of an f32 or f16 one,
        // no bf16 word holds the product
        if constexpr (((O == kBF16 && N != kF16) || (O != kBF16 && N == kBF16)) && !Z) {
          if ((gs == 16 || gs == 32) && is_e2m1_lut(lut)) {
            j = e2m1_groups<O, NT>(packed, cols, scale, gs, out);
            g = j / gs;
          }
        }
        // The rest from a group's first column (j is a whole number of groups, so even).
        if (j < cols)
          dequant_run<N, O, Z, NT>(packed + j / 2, cols - j, lut, scale + g, Z ? zp + g : zp, gs,
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
// 32 codes a step (4 * bits bytes, read as two 16-byte loads that reach at most byte 2 * bits + 16
// of the step) while the row's bytes cover those loads; the rest from a zero-padded stack copy of
// the remaining bytes, written through a stack buffer. 8-bit codes are their bytes, offset by 128.
void unpack_int8(const uint8_t* words, unsigned bits, size_t cols, int8_t* out) noexcept {
  if (bits == 8) {
    size_t i = 0;
    for (; i + 32 <= cols; i += 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + i)),
                                           _mm256_set1_epi8(static_cast<char>(0x80))));
    for (; i < cols; ++i) out[i] = static_cast<int8_t>(words[i] ^ 0x80);
    return;
  }
  const UnpackCtl ctl = unpack_ctl(bits);  // codes of 1-7 bits: 16 of them in 14 bytes
  const uint64_t nbytes = (cols * bits + 7) / 8, step = 4ull * bits, reach = 2ull * bits + 16;
  const __m256i half = _mm256_set1_epi8(static_cast<char>(1u << (bits - 1)));
  const auto run = [&](const uint8_t* p, int8_t* o) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_sub_epi8(unpack32(p, bits, ctl), half));
  };
  size_t i = 0;
  uint64_t at = 0;
  for (; i + 32 <= cols && at + reach <= nbytes; i += 32, at += step) run(words + at, out + i);
  if (i < cols) {
    alignas(32) uint8_t in[4 * 8 + 16 + 32] = {};  // the rest: < 32 codes (or the last full steps' reach)
    alignas(32) int8_t tmp[32];
    for (; i < cols; i += 32, at += step) {
      const uint64_t have = nbytes - at < step ? nbytes - at : step;
      for (uint64_t k = 0; k < sizeof in; ++k) in[k] = k < have ? words[at + k] : 0;
      run(in, tmp);
      for (size_t k = 0; k < 32 && i + k < cols; ++k) out[i + k] = tmp[k];
    }
  }
}
// Codes of 1-4 bits (1-5 for 16-bit outputs): whole groups through per-group tables
// (packed_groups); 6-8 bits to bf16 of a bf16 or f32 product (6-7 bits also to f16 of a bf16 one):
// packed_split_run. 8-bit codes are whole bytes: the rest through the 8-bit kernel with the top bit
// flipped; other widths' rest unpacked into an int8 row first (dequant_packed_two_pass), from the
// first group the fused path left: a group starts on a byte.
void dequant_packed(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept {
  const size_t gs = static_cast<size_t>(spec.group_size);
  size_t done = 0;
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      simd::with_flag(spec.stream, [&](auto nt) {
        constexpr Kind N = decltype(n)::value, O = decltype(o)::value;
        constexpr bool Z = decltype(z)::value, NT = decltype(nt)::value;
        if (bits == 8) {
          if constexpr (O == kBF16 && N != kF16)
            done = packed_split_run<N, O, Z, NT>(words, bits, cols, scale, zp, gs, out);
          if (done < cols) {
            const size_t g = done / (gs ? gs : 1);
            byte_run<N, O, Z, false, NT, 0x80>(words + done, cols - done, scale + g, Z ? zp + g : zp, gs, memo,
                                               static_cast<unsigned char*>(out) + done * (O == kF32 ? 4 : 2));
          }
          done = cols;
        } else if (bits <= 4) {
          done = packed_groups<N, O, Z, NT, 1>(words, bits, cols, scale, zp, gs, out);
        } else if constexpr (O != kF32) {
          if (bits == 5) done = packed_groups<N, O, Z, NT, 2>(words, bits, cols, scale, zp, gs, out);
          else if constexpr (kSplitOut<N, O>)
            done = packed_split_run<N, O, Z, NT>(words, bits, cols, scale, zp, gs, out);
        }
      });
    });
  });
  if (done == cols) return;
  const size_t g = done == 0 ? 0 : done / gs, esz = spec.out == DType::F32 ? 4 : 2;
  ::ctstream::codecs::dequant_packed_two_pass(unpack_int8, dequant_byte, words + done / 8 * bits, bits, cols - done,
                                              scale + g, zp ? zp + g : nullptr, spec, memo,
                                              static_cast<unsigned char*>(out) + done * esz);
}
}  // namespace ctstream::codecs::avx2
