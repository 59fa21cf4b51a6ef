// NEON conversions among F32, F16 and BF16 (codecs/convert.hpp), 8 elements per step; the last
// 1-7 elements go through zero-padded stack buffers (no access outside [in, in + n)).
#include "codecs/arm/neon_common.hpp"
#include "codecs/isa_kernels.hpp"

namespace ctstream::codecs::neon {
namespace {

// Runs `step` (8 elements: in -> out) over n elements of IN_SZ -> OUT_SZ bytes.
template <unsigned IN_SZ, unsigned OUT_SZ, class Step>
inline void run8(const void* in, void* out, size_t n, Step step) {
  const auto* s = static_cast<const unsigned char*>(in);
  auto* d = static_cast<unsigned char*>(out);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) step(s + i * IN_SZ, d + i * OUT_SZ);
  if (i < n) {
    alignas(16) unsigned char a[8 * IN_SZ] = {}, b[8 * OUT_SZ];
    __builtin_memcpy(a, s + i * IN_SZ, (n - i) * IN_SZ);
    step(a, b);
    __builtin_memcpy(d + i * OUT_SZ, b, (n - i) * OUT_SZ);
  }
}

inline float32x4_t ld_f32(const unsigned char* p) { return vld1q_f32(reinterpret_cast<const float*>(p)); }
inline uint16x4_t ld_u16(const unsigned char* p) { return vld1_u16(reinterpret_cast<const uint16_t*>(p)); }
inline void st_u16(unsigned char* p, uint16x4_t v) { vst1_u16(reinterpret_cast<uint16_t*>(p), v); }
inline void st_f32(unsigned char* p, float32x4_t v) { vst1q_f32(reinterpret_cast<float*>(p), v); }

}  // namespace

// stream (non-temporal stores on x86): plain stores here.
void f32_to_bf16(const void* in, void* out, size_t n, bool) noexcept {
  run8<4, 2>(in, out, n, [](const unsigned char* s, unsigned char* d) {
    st_u16(d, bf16_of(ld_f32(s)));
    st_u16(d + 8, bf16_of(ld_f32(s + 16)));
  });
}
void f32_to_f16(const void* in, void* out, size_t n, bool) noexcept {
  run8<4, 2>(in, out, n, [](const unsigned char* s, unsigned char* d) {
    st_u16(d, f16_of(ld_f32(s)));
    st_u16(d + 8, f16_of(ld_f32(s + 16)));
  });
}
void bf16_to_f32(const void* in, void* out, size_t n, bool) noexcept {
  run8<2, 4>(in, out, n, [](const unsigned char* s, unsigned char* d) {
    st_f32(d, f32_of_bf16(ld_u16(s)));
    st_f32(d + 16, f32_of_bf16(ld_u16(s + 8)));
  });
}
void f16_to_f32(const void* in, void* out, size_t n, bool) noexcept {
  run8<2, 4>(in, out, n, [](const unsigned char* s, unsigned char* d) {
    st_f32(d, f32_of_f16(ld_u16(s)));
    st_f32(d + 16, f32_of_f16(ld_u16(s + 8)));
  });
}
void bf16_to_f16(const void* in, void* out, size_t n, bool) noexcept {  // exact widening, then one RNE step
  run8<2, 2>(in, out, n, [](const unsigned char* s, unsigned char* d) {
    st_u16(d, f16_of(f32_of_bf16(ld_u16(s))));
    st_u16(d + 8, f16_of(f32_of_bf16(ld_u16(s + 8))));
  });
}
void f16_to_bf16(const void* in, void* out, size_t n, bool) noexcept {
  run8<2, 2>(in, out, n, [](const unsigned char* s, unsigned char* d) {
    st_u16(d, bf16_of(f32_of_f16(ld_u16(s))));
    st_u16(d + 8, bf16_of(f32_of_f16(ld_u16(s + 8))));
  });
}

}  // namespace ctstream::codecs::neon
