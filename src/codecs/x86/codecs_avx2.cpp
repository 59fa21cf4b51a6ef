// AVX2 (+F16C, BMI2) bitmask-expand and fused 4-bit dequant kernels. Bit-exact with the scalar
// references in codecs/bitmask.cpp and codecs/dequant.cpp (tests/unit/test_codecs_simd.cpp).
// Never reads a value, mask or packed byte the scalar kernel would not read (AVX2 has no
// byte-masked loads: vector loads are used only while a whole vector of the row's values
// remains, the rest goes through a scalar loop or a zero-padded stack copy), never writes past
// `cols` elements.
//
// Includes: dequant.hpp is needed for the DequantSpec / DType definitions only (an aggregate and
// an enum); nothing from the C++ library it pulls in is used here, so no inline library code is
// emitted with AVX2 instructions (nm of this object shows no weak symbols).
#include <immintrin.h>

#include "codecs/dequant.hpp"
#include "codecs/x86/kernels.hpp"

namespace ctstream::codecs::avx2 {
namespace {

// ---------------------------------------------------------------- bitmask expand
//
// Per mask byte a table entry of shuffle indices: output element i takes value number
// popcount(m & ((1 << i) - 1)) when bit i is set, else zero.

struct ExpandTables {
  uint64_t b1[256];      // pshufb bytes for 8 one-byte elements (0x80 = zero)
  uint8_t b2[256][16];   // pshufb bytes for 8 two-byte elements
  uint64_t b4[256];      // vpermd indices for 8 four-byte elements as signed bytes (-1 = zero)
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
    t.b1[m] = e1;
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

// Scalar finish from column j (value k) to cols.
template <unsigned E>
size_t expand_tail(const uint8_t* mask, const uint8_t* v, size_t j, size_t k, size_t cols, uint8_t* o) {
  for (; j < cols; ++j) {
    if ((mask[j >> 3] >> (j & 7)) & 1) {
      __builtin_memcpy(o + j * E, v + k * E, E);
      ++k;
    } else {
      __builtin_memset(o + j * E, 0, E);
    }
  }
  return k;
}

size_t expand8(const uint8_t* mask, const uint8_t* v, size_t cols, uint8_t* o) {
  const size_t total = row_popcount(mask, cols);
  size_t j = 0, k = 0;
  // 32 elements per step: 128-bit lane 0 expands mask bytes 0-1 from v + k, lane 1 bytes 2-3
  // from v + k + c01; each lane's pshufb control is two 8-byte table entries, the second offset
  // by the first byte's popcount (0x80 + c stays >= 0x80, i.e. zero).
  for (; j + 32 <= cols; j += 32) {
    const unsigned m0 = mask[j / 8], m1 = mask[j / 8 + 1], m2 = mask[j / 8 + 2], m3 = mask[j / 8 + 3];
    const unsigned c0 = pc8(m0), c1 = pc8(m1), c2 = pc8(m2), c3 = pc8(m3);
    if (k + c0 + c1 + 16 > total) break;  // lane 1 loads 16 values from k + c0 + c1
    const __m256i x = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(v + k + c0 + c1),
                                          reinterpret_cast<const __m128i*>(v + k));
    const __m256i ctl = _mm256_setr_epi64x(
        static_cast<long long>(kTables.b1[m0]), static_cast<long long>(kTables.b1[m1] + c0 * 0x0101010101010101ull),
        static_cast<long long>(kTables.b1[m2]), static_cast<long long>(kTables.b1[m3] + c2 * 0x0101010101010101ull));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + j), _mm256_shuffle_epi8(x, ctl));
    k += c0 + c1 + c2 + c3;
  }
  return expand_tail<1>(mask, v, j, k, cols, o);
}

size_t expand16(const uint8_t* mask, const uint16_t* v, size_t cols, uint16_t* o) {
  const size_t total = row_popcount(mask, cols);
  size_t j = 0, k = 0;
  for (; j + 16 <= cols; j += 16) {  // lane 0: mask byte 0 from v + k; lane 1: byte 1 from v + k + c0
    const unsigned m0 = mask[j / 8], m1 = mask[j / 8 + 1];
    const unsigned c0 = pc8(m0), c1 = pc8(m1);
    if (k + c0 + 8 > total) break;
    const __m256i x = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(v + k + c0),
                                          reinterpret_cast<const __m128i*>(v + k));
    const __m256i ctl = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(kTables.b2[m1]),
                                            reinterpret_cast<const __m128i*>(kTables.b2[m0]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + j), _mm256_shuffle_epi8(x, ctl));
    k += c0 + c1;
  }
  return expand_tail<2>(mask, reinterpret_cast<const uint8_t*>(v), j, k, cols, reinterpret_cast<uint8_t*>(o));
}

size_t expand32(const uint8_t* mask, const uint32_t* v, size_t cols, uint32_t* o) {
  const size_t total = row_popcount(mask, cols);
  size_t j = 0, k = 0;
  for (; j + 8 <= cols; j += 8) {
    const unsigned m = mask[j / 8], c = pc8(m);
    if (k + 8 > total) break;
    const __m256i idx = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kTables.b4[m])));
    const __m256i x = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + k)), idx);
    const __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(x), _mm256_setzero_ps(), _mm256_castsi256_ps(idx));
    _mm256_storeu_ps(reinterpret_cast<float*>(o + j), r);
    k += c;
  }
  return expand_tail<4>(mask, reinterpret_cast<const uint8_t*>(v), j, k, cols, reinterpret_cast<uint8_t*>(o));
}

// ---------------------------------------------------------------- fused nibble dequant
//
// A chunk is 16 columns = 8 packed bytes. Lane i of A holds the low nibble of byte p(i) (column
// 2p(i)), lane i of B its high nibble (column 2p(i)+1). For 16-bit outputs p is the identity and
// the results interleave with one 16-bit blend; for f32 output p = 0,1,4,5,2,3,6,7 so that
// unpacklo/unpackhi_ps give columns 0..7 and 8..15 directly.

enum Kind { kBF16, kF16, kF32 };
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Each lane's RNE bf16 in its high 16 bits (low 16 bits: junk); NaN -> quietened, as half.hpp.
inline __m256i bf16_round_hi(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(x, _mm256_set1_epi32(0x00400000)), nan);
}
inline __m256 bf16_image(__m256 v) {
  return _mm256_castsi256_ps(_mm256_and_si256(bf16_round_hi(v), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline __m256 f16_image(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, kRne)); }

template <Kind N>
inline __m256 natural_image(__m256 v) {
  if constexpr (N == kBF16) return bf16_image(v);
  else if constexpr (N == kF16) return f16_image(v);
  else return v;
}
template <Kind N>
inline __m256i out_bf16_hi(__m256 v) {
  if constexpr (N == kF16) return bf16_round_hi(f16_image(v));
  else return bf16_round_hi(v);
}
template <Kind N>
inline __m128i out_f16(__m256 v) {
  if constexpr (N == kBF16) return _mm256_cvtps_ph(bf16_image(v), kRne);
  else return _mm256_cvtps_ph(v, kRne);
}

struct Lanes {
  __m256 a, b;
};

template <Kind O>
inline __m256i col_a() {
  if constexpr (O == kF32) return _mm256_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14);
  else return _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
}

inline __m256 lut_lookup(__m256i idx, __m256 lo, __m256 hi) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                          _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // bit 3 selects the half
}

// 16 columns from the 8 bytes in the low half of `bytes`, written at out + j (whole chunk).
template <Kind N, Kind O, bool ZP>
inline void chunk(__m128i bytes, __m256 lut_lo, __m256 lut_hi, Lanes s, Lanes z, void* out, size_t j) {
  if constexpr (O == kF32) bytes = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
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
    const __m256i w = _mm256_blend_epi16(_mm256_srli_epi32(out_bf16_hi<N>(a), 16), out_bf16_hi<N>(b), 0xAA);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + j), w);
  } else if constexpr (O == kF16) {
    const __m128i ha = out_f16<N>(a), hb = out_f16<N>(b);
    uint16_t* o = static_cast<uint16_t*>(out) + j;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi16(ha, hb));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 8), _mm_unpackhi_epi16(ha, hb));
  } else {
    a = natural_image<N>(a);
    b = natural_image<N>(b);
    float* o = static_cast<float*>(out) + j;
    _mm256_storeu_ps(o, _mm256_unpacklo_ps(a, b));
    _mm256_storeu_ps(o + 8, _mm256_unpackhi_ps(a, b));
  }
}

// Per-lane scale (or zero point) vectors for the chunk at column j whose first column is in
// group g (ending at column nb), n valid columns; reads only entries of groups those columns use.
template <Kind O>
inline Lanes lane_values(const float* t, size_t j, size_t g, size_t nb, size_t gs, unsigned n) {
  const __m256i ca = col_a<O>(), cb = _mm256_add_epi32(ca, _mm256_set1_epi32(1));
  if (gs == 1) {  // one entry per column: gather t[j + col] for valid columns
    const __m256i lim = _mm256_set1_epi32(static_cast<int>(n));
    return {_mm256_mask_i32gather_ps(_mm256_setzero_ps(), t + j, ca, _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, ca)), 4),
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

template <Kind N, Kind O, bool ZP>
void dequant_run(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp, size_t gs,
                 void* out) {
  const __m256 lut_lo = _mm256_loadu_ps(lut), lut_hi = _mm256_loadu_ps(lut + 8);
  size_t j = 0, g = 0, nb = gs;  // nb: first column after group g
  while (j + 16 <= cols) {
    if (j + 16 <= nb) {  // whole chunks inside group g: broadcast its scale / zero point
      const Lanes s{_mm256_set1_ps(scale[g]), _mm256_set1_ps(scale[g])};
      Lanes z{s.a, s.b};
      if constexpr (ZP) z = Lanes{_mm256_set1_ps(zp[g]), _mm256_set1_ps(zp[g])};
      const size_t lim = nb < cols ? nb : cols;
      for (; j + 16 <= lim; j += 16)
        chunk<N, O, ZP>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j / 2)), lut_lo, lut_hi, s, z, out, j);
    } else {
      const Lanes s = lane_values<O>(scale, j, g, nb, gs, 16);
      Lanes z = s;
      if constexpr (ZP) z = lane_values<O>(zp, j, g, nb, gs, 16);
      chunk<N, O, ZP>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j / 2)), lut_lo, lut_hi, s, z, out, j);
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
    chunk<N, O, ZP>(_mm_cvtsi64_si128(static_cast<long long>(in)), lut_lo, lut_hi, s, z, tmp, 0);
    const size_t esz = O == kF32 ? 4 : 2;
    __builtin_memcpy(static_cast<unsigned char*>(out) + j * esz, tmp, n * esz);
  }
}

template <Kind N, Kind O>
void dequant_zp(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp, size_t gs,
                void* out) {
  if (zp) dequant_run<N, O, true>(packed, cols, lut, scale, zp, gs, out);
  else dequant_run<N, O, false>(packed, cols, lut, scale, zp, gs, out);
}

template <Kind N>
void dequant_out(Kind o, const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                 size_t gs, void* out) {
  switch (o) {
    case kBF16: return dequant_zp<N, kBF16>(packed, cols, lut, scale, zp, gs, out);
    case kF16: return dequant_zp<N, kF16>(packed, cols, lut, scale, zp, gs, out);
    case kF32: return dequant_zp<N, kF32>(packed, cols, lut, scale, zp, gs, out);
  }
}

}  // namespace

size_t bitmask_expand_1(const uint8_t* m, const void* v, size_t c, void* o) noexcept {
  return expand8(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_2(const uint8_t* m, const void* v, size_t c, void* o) noexcept {
  return expand16(m, static_cast<const uint16_t*>(v), c, static_cast<uint16_t*>(o));
}
size_t bitmask_expand_4(const uint8_t* m, const void* v, size_t c, void* o) noexcept {
  return expand32(m, static_cast<const uint32_t*>(v), c, static_cast<uint32_t*>(o));
}

void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* out) noexcept {
  // Same dtype mapping as store_dequant: natural BF16 / F16 / else F32; out F32 / BF16 / else F16.
  const Kind o = spec.out == DType::F32 ? kF32 : spec.out == DType::BF16 ? kBF16 : kF16;
  const size_t gs = static_cast<size_t>(spec.group_size);
  if (spec.natural == DType::BF16) dequant_out<kBF16>(o, packed, cols, lut, scale, zp, gs, out);
  else if (spec.natural == DType::F16) dequant_out<kF16>(o, packed, cols, lut, scale, zp, gs, out);
  else dequant_out<kF32>(o, packed, cols, lut, scale, zp, gs, out);
}

}  // namespace ctstream::codecs::avx2
