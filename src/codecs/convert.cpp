#include "codecs/convert.hpp"

#include <cstring>

#include "codecs/minifloat.hpp"

#include <cstdint>
#include <cstring>

#include "codecs/half.hpp"
#include "codecs/x86/kernels.hpp"

namespace ctstream::codecs {

namespace scalar {
#define CTSTREAM_SCALAR_LOOP(NAME, IN_T, OUT_T, EXPR)                    \
  void NAME(const void* in, void* out, size_t n) noexcept {              \
    const IN_T* s = static_cast<const IN_T*>(in);                        \
    OUT_T* d = static_cast<OUT_T*>(out);                                 \
    for (size_t i = 0; i < n; ++i) {                                     \
      IN_T v;                                                            \
      std::memcpy(&v, s + i, sizeof v);                                  \
      OUT_T r = EXPR;                                                    \
      std::memcpy(d + i, &r, sizeof r);                                  \
    }                                                                    \
  }
CTSTREAM_SCALAR_LOOP(f32_to_bf16, uint32_t, uint16_t, codecs::f32_to_bf16(v))
CTSTREAM_SCALAR_LOOP(f32_to_f16, uint32_t, uint16_t, codecs::f32_to_f16(v))
CTSTREAM_SCALAR_LOOP(bf16_to_f32, uint16_t, uint32_t, codecs::bf16_to_f32(v))
CTSTREAM_SCALAR_LOOP(f16_to_f32, uint16_t, uint32_t, codecs::f16_to_f32(v))
CTSTREAM_SCALAR_LOOP(bf16_to_f16, uint16_t, uint16_t, codecs::f32_to_f16(codecs::bf16_to_f32(v)))
CTSTREAM_SCALAR_LOOP(f16_to_bf16, uint16_t, uint16_t, codecs::f32_to_bf16(codecs::f16_to_f32(v)))
#undef CTSTREAM_SCALAR_LOOP
}  // namespace scalar

namespace {
template <class K>
ConvertFn pick(DType src, DType dst) noexcept {
  using D = DType;
  if (src == D::F32 && dst == D::BF16) return K::f32_to_bf16;
  if (src == D::F32 && dst == D::F16) return K::f32_to_f16;
  if (src == D::BF16 && dst == D::F32) return K::bf16_to_f32;
  if (src == D::F16 && dst == D::F32) return K::f16_to_f32;
  if (src == D::BF16 && dst == D::F16) return K::bf16_to_f16;
  if (src == D::F16 && dst == D::BF16) return K::f16_to_bf16;
  return nullptr;
}
#define CTSTREAM_KERNEL_SET(NS)                                                                            \
  struct NS##_set {                                                                                       \
    static constexpr ConvertFn f32_to_bf16 = NS::f32_to_bf16, f32_to_f16 = NS::f32_to_f16,                \
                               bf16_to_f32 = NS::bf16_to_f32, f16_to_f32 = NS::f16_to_f32,                \
                               bf16_to_f16 = NS::bf16_to_f16, f16_to_bf16 = NS::f16_to_bf16;              \
  };
CTSTREAM_KERNEL_SET(scalar)
CTSTREAM_KERNEL_SET(avx2)
CTSTREAM_KERNEL_SET(avx512)
#undef CTSTREAM_KERNEL_SET
}  // namespace

ConvertFn convert_kernel(DType src, DType dst, Isa isa) noexcept {
  switch (isa) {
    case Isa::avx512: return pick<avx512_set>(src, dst);
    case Isa::avx2: return pick<avx2_set>(src, dst);
    case Isa::scalar: break;
  }
  return pick<scalar_set>(src, dst);
}

void convert(DType src, const void* in, DType dst, void* out, size_t n, Isa isa) noexcept {
  if (src == dst) {
    std::memcpy(out, in, n * (dtype_bits(src) / 8));
    return;
  }
  convert_kernel(src, dst, isa)(in, out, n);
}

bool widen_to_f32(DType src, const void* in, uint64_t first, uint64_t n, float* out) noexcept {
  const auto* b = static_cast<const uint8_t*>(in);
  switch (src) {
    case DType::F64:
      for (uint64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, b + 8 * (first + i), 8);
        out[i] = static_cast<float>(d);
      }
      return true;
    case DType::F8_E4M3: for (uint64_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(b[first + i]); return true;
    case DType::F8_E5M2: for (uint64_t i = 0; i < n; ++i) out[i] = e5m2_to_f32(b[first + i]); return true;
    case DType::F8_E4M3FNUZ: for (uint64_t i = 0; i < n; ++i) out[i] = e4m3fnuz_to_f32(b[first + i]); return true;
    case DType::F8_E5M2FNUZ: for (uint64_t i = 0; i < n; ++i) out[i] = e5m2fnuz_to_f32(b[first + i]); return true;
    case DType::F8_E8M0: for (uint64_t i = 0; i < n; ++i) out[i] = e8m0fnu_to_f32(b[first + i]); return true;
    case DType::F4:
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t k = first + i;
        out[i] = e2m1_to_f32(static_cast<uint8_t>(k % 2 ? b[k / 2] >> 4 : b[k / 2] & 0xF));
      }
      return true;
    default: return false;
  }
}

}  // namespace ctstream::codecs
