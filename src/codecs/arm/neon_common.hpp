// NEON helpers shared by the AArch64 kernel files: conversions of 4 lanes among F32, F16 and BF16,
// bit for bit codecs/half.hpp. F16 goes through FCVTN / FCVTL (IEEE round-to-nearest-even with
// FPCR's defaults on Linux: no flush-to-zero, no default NaN, so NaNs are quietened keeping their
// leading payload bits, as half.hpp does); BF16 uses integer round-to-nearest-even (BFCVT is
// ARMv8.6, not baseline).
#pragma once
#include <arm_neon.h>

namespace ctstream::codecs::neon {

// f32 lanes -> bf16 bits (RNE; NaN -> quietened).
inline uint16x4_t bf16_of(float32x4_t v) {
  const uint32x4_t x = vreinterpretq_u32_f32(v);
  const uint32x4_t nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7FFFFFFFu)), vdupq_n_u32(0x7F800000u));
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
  const uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7FFFu)), lsb), 16);
  const uint32x4_t q = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40u));
  return vmovn_u32(vbslq_u32(nan, q, r));
}
inline float32x4_t f32_of_bf16(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }
inline uint16x4_t f16_of(float32x4_t v) { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }
inline float32x4_t f32_of_f16(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }

}  // namespace ctstream::codecs::neon
