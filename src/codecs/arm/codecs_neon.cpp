// NEON bitmask expansion and fused 4-bit / 8-bit dequantization (codecs/bitmask.hpp,
// codecs/dequant.hpp), bit for bit the scalar kernels. Reads stay inside the row's mask, values
// and codes (partial steps go through zero-padded stack copies); writes inside its output.
#include <cstring>

#include "codecs/arm/neon_common.hpp"
#include "codecs/dequant.hpp"
#include "codecs/isa_kernels.hpp"
#include "codecs/minifloat.hpp"
#include "codecs/simd_dispatch.hpp"

namespace ctstream::codecs::neon {
namespace {

using simd::kBF16;
using simd::kF16;
using simd::kF32;
using simd::Kind;

// ---------------------------------------------------------------- bitmask expand
//
// Per mask byte (8 columns) a TBL gathers the row's next values into place: index tables give,
// for each output byte, which byte of the next values it takes (0xFF: none, TBL writes 0).
// 4-byte elements go one mask nibble (16 output bytes) at a time.

struct ExpandTables {
  uint8_t e1[256][8];
  uint8_t e2[256][16];
  uint8_t e4[16][16];
};
constexpr ExpandTables make_tables() {
  ExpandTables t{};
  for (unsigned m = 0; m < 256; ++m) {
    unsigned k = 0;
    for (unsigned i = 0; i < 8; ++i) {
      const bool set = (m >> i) & 1;
      t.e1[m][i] = set ? static_cast<uint8_t>(k) : 0xFF;
      t.e2[m][2 * i] = set ? static_cast<uint8_t>(2 * k) : 0xFF;
      t.e2[m][2 * i + 1] = set ? static_cast<uint8_t>(2 * k + 1) : 0xFF;
      k += set;
    }
  }
  for (unsigned m = 0; m < 16; ++m) {
    unsigned k = 0;
    for (unsigned i = 0; i < 4; ++i) {
      const bool set = (m >> i) & 1;
      for (unsigned b = 0; b < 4; ++b) t.e4[m][4 * i + b] = set ? static_cast<uint8_t>(4 * k + b) : 0xFF;
      k += set;
    }
  }
  return t;
}
alignas(64) constexpr ExpandTables kTables = make_tables();

template <unsigned E>
size_t expand_row(const uint8_t* mask, const uint8_t* v, size_t cols, uint8_t* o) {
  size_t total = 0;  // values of the row: bounds every read of v
  for (size_t j = 0; j < cols; j += 8) {
    const size_t n = cols - j < 8 ? cols - j : 8;
    total += static_cast<size_t>(__builtin_popcount(mask[j / 8] & ((1u << n) - 1)));
  }
  size_t k = 0;  // values consumed
  for (size_t j = 0; j < cols; j += 8) {
    const size_t n = cols - j < 8 ? cols - j : 8;
    const unsigned m = mask[j / 8] & ((1u << n) - 1);
    const unsigned c = static_cast<unsigned>(__builtin_popcount(m));
    alignas(16) uint8_t in[32], tmp[32];
    const uint8_t* src = v + k * E;
    if ((total - k) * E < 8 * E) {  // fewer than a whole step of values left: a padded copy
      std::memset(in, 0, sizeof in);
      std::memcpy(in, src, c * E);
      src = in;
    }
    uint8_t* dst = n == 8 ? o + j * E : tmp;
    if constexpr (E == 1) {
      vst1_u8(dst, vtbl1_u8(vld1_u8(src), vld1_u8(kTables.e1[m])));
    } else if constexpr (E == 2) {
      vst1q_u8(dst, vqtbl1q_u8(vld1q_u8(src), vld1q_u8(kTables.e2[m])));
    } else {
      const unsigned lo = m & 15, hi = m >> 4;
      vst1q_u8(dst, vqtbl1q_u8(vld1q_u8(src), vld1q_u8(kTables.e4[lo])));
      vst1q_u8(dst + 16, vqtbl1q_u8(vld1q_u8(src + 4 * __builtin_popcount(lo)), vld1q_u8(kTables.e4[hi])));
    }
    if (n < 8) std::memcpy(o + j * E, tmp, n * E);
    k += c;
  }
  return k;
}

// ---------------------------------------------------------------- dequant
//
// 16 columns of one group per step: codes -> exact f32 values, minus the zero point, times the
// scale (IEEE f32 ops, as the scalar kernel), then store_dequant's two rounding steps on 4 lanes
// at a time. Columns outside whole steps (group edges, odd starts, row tails) take the scalar
// arithmetic of the same kernel.

// Rounds 4 products to the natural dtype N (exact f32 image) and stores them as O at out[j..j+3].
template <Kind N, Kind O>
inline void store4(float32x4_t p, void* out, size_t j) {
  float32x4_t r = p;
  if constexpr (N == kBF16) r = f32_of_bf16(bf16_of(p));
  if constexpr (N == kF16) r = f32_of_f16(f16_of(p));
  if constexpr (O == kF32) vst1q_f32(static_cast<float*>(out) + j, r);
  else if constexpr (O == kBF16) vst1_u16(static_cast<uint16_t*>(out) + j, bf16_of(r));
  else vst1_u16(static_cast<uint16_t*>(out) + j, f16_of(r));
}

// Byte offsets {0,1,2,3} per lane and, for lane group q, the code index each byte lane reads.
alignas(16) constexpr uint8_t kByteOff[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
alignas(16) constexpr uint8_t kRep[4][16] = {{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
                                             {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
                                             {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
                                             {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};

template <Kind N, Kind O, bool ZP>
void nibble_run(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                const DequantSpec& spec, void* out) {
  const size_t gs = static_cast<size_t>(spec.group_size);
  const uint8x16x4_t lutb = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(lut));  // 16 f32
  const uint8x16_t off = vld1q_u8(kByteOff);
  auto one = [&](size_t j, size_t g) {
    const uint8_t code = (packed[j >> 1] >> ((j & 1) * 4)) & 0xF;
    const float d = ZP ? lut[code] - zp[g] : lut[code];
    store_dequant(d * scale[g], spec, out, j);
  };
  for (size_t j0 = 0, g = 0; j0 < cols; j0 += gs, ++g) {
    const size_t j1 = cols - j0 > gs ? j0 + gs : cols;
    const float32x4_t s = vdupq_n_f32(scale[g]);
    const float32x4_t z = vdupq_n_f32(ZP ? zp[g] : 0.f);
    size_t j = j0;
    if (j & 1) one(j++, g);
    for (; j + 16 <= j1; j += 16) {
      const uint8x8_t b = vld1_u8(packed + j / 2);
      const uint8x8x2_t cz = vzip_u8(vand_u8(b, vdup_n_u8(0xF)), vshr_n_u8(b, 4));
      const uint8x16_t c4 = vshlq_n_u8(vcombine_u8(cz.val[0], cz.val[1]), 2);  // 4 * code, column order
      for (unsigned q = 0; q < 4; ++q) {
        const uint8x16_t idx = vaddq_u8(vqtbl1q_u8(c4, vld1q_u8(kRep[q])), off);
        float32x4_t x = vreinterpretq_f32_u8(vqtbl4q_u8(lutb, idx));
        if constexpr (ZP) x = vsubq_f32(x, z);
        store4<N, O>(vmulq_f32(x, s), out, j + 4 * q);
      }
    }
    for (; j < j1; ++j) one(j, g);
  }
}

// 4 x 4 f32 values of 16 8-bit codes: int8, or fp8 E4M3 through f16 (the E4M3 bits placed in an
// f16 and scaled by 2^8 is exact, subnormals included; S.1111.111 is NaN).
template <bool E4M3>
inline void byte_values(uint8x16_t c, float32x4_t x[4]) {
  if constexpr (!E4M3) {
    const int8x16_t sc = vreinterpretq_s8_u8(c);
    const int16x8_t lo = vmovl_s8(vget_low_s8(sc)), hi = vmovl_high_s8(sc);
    x[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    x[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    x[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    x[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
  } else {
    const uint16x8_t w[2] = {vmovl_u8(vget_low_u8(c)), vmovl_high_u8(c)};
    for (unsigned h = 0; h < 2; ++h) {
      const uint16x8_t mag = vandq_u16(w[h], vdupq_n_u16(0x7F));
      const uint16x8_t f16 = vorrq_u16(vshlq_n_u16(vandq_u16(w[h], vdupq_n_u16(0x80)), 8), vshlq_n_u16(mag, 7));
      const uint16x8_t nan = vceqq_u16(mag, vdupq_n_u16(0x7F));
      for (unsigned k = 0; k < 2; ++k) {
        const uint16x4_t f = k ? vget_high_u16(f16) : vget_low_u16(f16);
        const float32x4_t v = vmulq_f32(f32_of_f16(f), vdupq_n_f32(256.f));
        const uint32x4_t isnan = vmovl_u16(k ? vget_high_u16(nan) : vget_low_u16(nan));
        const uint32x4_t isn = vorrq_u32(isnan, vshlq_n_u32(isnan, 16));  // 0xFFFF -> 0xFFFFFFFF
        const uint32x4_t q =
            vorrq_u32(vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x80000000u)), vdupq_n_u32(0x7FC00000u));
        x[2 * h + k] = vreinterpretq_f32_u32(vbslq_u32(isn, q, vreinterpretq_u32_f32(v)));
      }
    }
  }
}

// Flip = 0x80: offset-binary codes (u, value u - 128: pack-quantized 8-bit), int8 codes with the top
// bit flipped, which one XOR per load makes them.
template <Kind N, Kind O, bool ZP, bool E4M3, uint8_t Flip = 0>
void byte_run(const uint8_t* codes, size_t cols, const float* scale, const float* zp, const DequantSpec& spec,
              void* out) {
  const size_t gs = static_cast<size_t>(spec.group_size);
  const uint8x16_t flip = vdupq_n_u8(Flip);
  auto one = [&](size_t j, size_t g) {
    const uint8_t c = static_cast<uint8_t>(codes[j] ^ Flip);
    const float x = E4M3 ? e4m3_to_f32(c) : static_cast<float>(static_cast<int8_t>(c));
    const float d = ZP ? x - zp[g] : x;
    store_dequant(d * scale[g], spec, out, j);
  };
  for (size_t j0 = 0, g = 0; j0 < cols; j0 += gs, ++g) {
    const size_t j1 = cols - j0 > gs ? j0 + gs : cols;
    const float32x4_t s = vdupq_n_f32(scale[g]);
    const float32x4_t z = vdupq_n_f32(ZP ? zp[g] : 0.f);
    size_t j = j0;
    for (; j + 16 <= j1; j += 16) {
      float32x4_t x[4];
      byte_values<E4M3>(veorq_u8(vld1q_u8(codes + j), flip), x);
      for (unsigned q = 0; q < 4; ++q) {
        if constexpr (ZP) x[q] = vsubq_f32(x[q], z);
        store4<N, O>(vmulq_f32(x[q], s), out, j + 4 * q);
      }
    }
    for (; j < j1; ++j) one(j, g);
  }
}

}  // namespace

size_t bitmask_expand_1(const uint8_t* m, const void* v, size_t c, void* o, bool /*stream*/) noexcept {
  return expand_row<1>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_2(const uint8_t* m, const void* v, size_t c, void* o, bool /*stream*/) noexcept {
  return expand_row<2>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}
size_t bitmask_expand_4(const uint8_t* m, const void* v, size_t c, void* o, bool /*stream*/) noexcept {
  return expand_row<4>(m, static_cast<const uint8_t*>(v), c, static_cast<uint8_t*>(o));
}

void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const DequantSpec& spec, void* out) noexcept {
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      nibble_run<decltype(n)::value, decltype(o)::value, decltype(z)::value>(packed, cols, lut, scale, zp, spec, out);
    });
  });
}

void dequant_byte(const uint8_t* codes, size_t cols, ByteCode code, const float* scale, const float* zp,
                  const DequantSpec& spec, void* /*memo*/, void* out) noexcept {
  simd::with_kinds(spec, [&](auto n, auto o) {
    simd::with_flag(zp != nullptr, [&](auto z) {
      simd::with_flag(code == ByteCode::e4m3, [&](auto e4m3) {
        byte_run<decltype(n)::value, decltype(o)::value, decltype(z)::value, decltype(e4m3)::value>(codes, cols, scale,
                                                                                                    zp, spec, out);
      });
    });
  });
}

// Dense pack-quantized codes (code i at stream bits [i*b, i*b+b) of little-endian bytes:
// compressed_tensors/compressors/pack_quantized/helpers.py `unpack_from_int32`), 16 a step, as two
// halves of 8 codes (b bytes each): TBL makes each code's 16-bit window (bytes floor(c*b/8) and the
// next), USHL by -(c*b % 8) moves the code to bit 0, AND keeps its b bits, XTN narrows to bytes, a
// byte subtraction gives u - 2^(b-1). Whole steps while the row's bytes cover their loads (b + 16
// bytes from the step); the rest from a zero-padded stack copy, written through a stack buffer.
void unpack_int8(const uint8_t* words, unsigned bits, size_t cols, int8_t* out) noexcept {
  uint8_t idx[16];
  int16_t sh[8];
  for (unsigned c = 0; c < 8; ++c) {
    idx[2 * c] = static_cast<uint8_t>(c * bits / 8);
    idx[2 * c + 1] = static_cast<uint8_t>(c * bits / 8 + 1);  // <= 8: inside the 16 bytes loaded
    sh[c] = static_cast<int16_t>(-static_cast<int>(c * bits % 8));
  }
  const uint8x16_t vidx = vld1q_u8(idx);
  const int16x8_t vsh = vld1q_s16(sh);
  const uint16x8_t mask = vdupq_n_u16(static_cast<uint16_t>((1u << bits) - 1));
  const int8x16_t half = vdupq_n_s8(static_cast<int8_t>(1u << (bits - 1)));
  const auto half8 = [&](const uint8_t* p) {
    const uint16x8_t w = vreinterpretq_u16_u8(vqtbl1q_u8(vld1q_u8(p), vidx));
    return vmovn_u16(vandq_u16(vshlq_u16(w, vsh), mask));
  };
  const auto run = [&](const uint8_t* p, int8_t* o) {
    vst1q_s8(o, vsubq_s8(vreinterpretq_s8_u8(vcombine_u8(half8(p), half8(p + bits))), half));
  };
  const uint64_t nbytes = (cols * static_cast<uint64_t>(bits) + 7) / 8, step = 2ull * bits, reach = bits + 16ull;
  size_t i = 0;
  uint64_t at = 0;
  for (; i + 16 <= cols && at + reach <= nbytes; i += 16, at += step) run(words + at, out + i);
  if (i < cols) {
    uint8_t in[32];
    int8_t tmp[16];
    for (; i < cols; i += 16, at += step) {
      const uint64_t have = nbytes - at < step ? nbytes - at : step;
      std::memset(in, 0, sizeof in);
      std::memcpy(in, words + at, have);
      run(in, tmp);
      std::memcpy(out + i, tmp, cols - i < 16 ? cols - i : 16);
    }
  }
}
// 8-bit codes are whole bytes: the 8-bit kernel with the top bit flipped; narrower ones unpacked
// into an int8 row first (dequant_packed_two_pass).
void dequant_packed(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept {
  if (bits == 8)
    return simd::with_kinds(spec, [&](auto n, auto o) {
      simd::with_flag(zp != nullptr, [&](auto z) {
        byte_run<decltype(n)::value, decltype(o)::value, decltype(z)::value, false, 0x80>(words, cols, scale, zp, spec,
                                                                                          out);
      });
    });
  ::ctstream::codecs::dequant_packed_two_pass(unpack_int8, dequant_byte, words, bits, cols, scale, zp, spec, memo, out);
}

}  // namespace ctstream::codecs::neon
