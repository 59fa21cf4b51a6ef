// avx512 bitmask-expand and fused 4-bit dequant kernels. Placeholder: forwards to the scalar
// reference until the SIMD versions land; tests compare every ISA against scalar.
#include "codecs/x86/kernels.hpp"

namespace ctstream::codecs::avx512 {

size_t bitmask_expand_1(const uint8_t* m, const void* v, size_t c, void* o) noexcept { return scalar::bitmask_expand_1(m, v, c, o); }
size_t bitmask_expand_2(const uint8_t* m, const void* v, size_t c, void* o) noexcept { return scalar::bitmask_expand_2(m, v, c, o); }
size_t bitmask_expand_4(const uint8_t* m, const void* v, size_t c, void* o) noexcept { return scalar::bitmask_expand_4(m, v, c, o); }
void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const ::ctstream::codecs::DequantSpec& spec, void* out) noexcept {
  scalar::dequant_nibble(packed, cols, lut, scale, zp, spec, out);
}

}  // namespace ctstream::codecs::avx512
