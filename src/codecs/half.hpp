// codecs — scalar bit-exact conversions among F32, F16 and BF16 (round-to-nearest-even).
// These are the reference every SIMD kernel is tested against. NaNs stay NaN (quietened, sign
// and leading payload bits kept, as x86 F16C does); Inf stays Inf; subnormals are rounded, not
// flushed.
#pragma once
#include <bit>
#include <cstdint>

namespace ctstream::codecs {

inline uint32_t f32_bits(float f) noexcept { return std::bit_cast<uint32_t>(f); }
inline float f32_from_bits(uint32_t u) noexcept { return std::bit_cast<float>(u); }

inline uint16_t f32_to_bf16(uint32_t x) noexcept {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
inline uint32_t bf16_to_f32(uint16_t h) noexcept { return static_cast<uint32_t>(h) << 16; }

inline uint16_t f32_to_f16(uint32_t x) noexcept {
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

inline uint32_t f16_to_f32(uint16_t h) noexcept {
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

}  // namespace ctstream::codecs
