// codecs — small float formats to f32, exactly (every value of these formats is an f32).
// Encodings: F8_E4M3 = float8_e4m3fn (bias 7, no Inf, S.1111.111 = NaN, max 448);
// F8_E5M2 (bias 15, IEEE-like Inf/NaN); FP4 E2M1 nibble s|e1e0|m (values 0 .5 1 1.5 2 3 4 6,
// compressed_tensors/compressors/nvfp4/helpers.py `unpack_fp4_from_uint8`); FP6 E2M3 code
// s|eem m m (max 7.5, compressed_tensors/compressors/mxfp6/helpers.py); E8M0 = 2^(e-127), 255 -> +Inf
// (compressed_tensors/compressors/mx_utils.py `decompress_mx_scale` computes 2**(e-127) in bf16,
// which overflows to +Inf at e = 255).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace ctstream::codecs {

inline float e4m3_to_f32(uint8_t v) noexcept {
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 3) & 0xF, m = v & 0x7;
  if (e == 0xF && m == 0x7) return std::bit_cast<float>(s | 0x7FC00000u);
  if (e == 0)
    return std::bit_cast<float>(s | std::bit_cast<uint32_t>(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return std::bit_cast<float>(s | ((e + 120) << 23) | (m << 20));
}

inline float e5m2_to_f32(uint8_t v) noexcept {
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 2) & 0x1F, m = v & 0x3;
  if (e == 0x1F) return std::bit_cast<float>(s | 0x7F800000u | (m << 21) | (m ? 0x400000u : 0u));
  if (e == 0)
    return std::bit_cast<float>(s | std::bit_cast<uint32_t>(static_cast<float>(m) * 1.52587890625e-05f));  // m * 2^-16
  return std::bit_cast<float>(s | ((e + 112) << 23) | (m << 21));
}

/// FP4 E2M1 nibble (low 4 bits of v) -> f32; code 8 is -0.0.
inline float e2m1_to_f32(uint8_t v) noexcept {
  static constexpr float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = mag[v & 7];
  return (v & 8) ? -m : m;
}

/// FP6 E2M3 code (low 6 bits) -> f32: index m < 8 -> m/8, else (1 + (m%8)/8) * 2^(m/8 - 1).
inline float e2m3_to_f32(uint8_t v) noexcept {
  const uint32_t m = v & 0x1F;
  const float mag = m < 8 ? static_cast<float>(m) / 8.f
                          : (1.f + static_cast<float>(m % 8) / 8.f) * static_cast<float>(1u << (m / 8)) / 2.f;
  return (v & 0x20) ? -mag : mag;
}

/// E8M0 scale -> f32 (2^(e-127); e=255 -> +Inf as the reference computes it).
inline float e8m0_to_f32(uint8_t e) noexcept {
  if (e == 255) return std::bit_cast<float>(0x7F800000u);
  if (e == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, an f32 subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// ---- the dense safetensors float dtypes, as torch's `.to(torch.float32)` reads them ----------

/// float8_e4m3fnuz: bias 8, no Inf, no -0; 0x80 is the only NaN.
inline float e4m3fnuz_to_f32(uint8_t v) noexcept {
  if (v == 0x80) return std::bit_cast<float>(0x7FC00000u);
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 3) & 0xF, m = v & 0x7;
  if (e == 0)
    return std::bit_cast<float>(s | std::bit_cast<uint32_t>(static_cast<float>(m) * 0.0009765625f));  // m * 2^-10
  return std::bit_cast<float>(s | ((e + 119) << 23) | (m << 20));
}

/// float8_e5m2fnuz: bias 16, no Inf, no -0; 0x80 is the only NaN.
inline float e5m2fnuz_to_f32(uint8_t v) noexcept {
  if (v == 0x80) return std::bit_cast<float>(0x7FC00000u);
  const uint32_t s = static_cast<uint32_t>(v & 0x80) << 24;
  const uint32_t e = (v >> 2) & 0x1F, m = v & 0x3;
  if (e == 0)
    return std::bit_cast<float>(s | std::bit_cast<uint32_t>(static_cast<float>(m) * 7.62939453125e-06f));  // m * 2^-17
  return std::bit_cast<float>(s | ((e + 111) << 23) | (m << 21));
}

/// float8_e8m0fnu as torch reads it: 2^(e-127), 0xFF is NaN (the MX scale decode above gives
/// +Inf there, as compressed-tensors computes 2**(e-127) in bf16).
inline float e8m0fnu_to_f32(uint8_t e) noexcept {
  if (e == 255) return std::bit_cast<float>(0x7FC00000u);
  return e8m0_to_f32(e);
}

}  // namespace ctstream::codecs
