#include "codecs/convert.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codecs/element.hpp"
#include "codecs/half.hpp"
#include "codecs/isa_kernels.hpp"
#include "codecs/kernels.hpp"
#include "codecs/minifloat.hpp"

namespace ctstream::codecs {

namespace scalar {
template <class In, class Out, Out (*F)(In) noexcept>
void loop(const void* in, void* out, size_t n) noexcept {
  const auto* s = static_cast<const std::byte*>(in);
  auto* d = static_cast<std::byte*>(out);
  for (size_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, s + i * sizeof(In), sizeof v);
    const Out r = F(v);
    std::memcpy(d + i * sizeof(Out), &r, sizeof r);
  }
}
uint16_t bf16_to_f16_bits(uint16_t v) noexcept { return codecs::f32_to_f16(codecs::bf16_to_f32(v)); }
uint16_t f16_to_bf16_bits(uint16_t v) noexcept { return codecs::f32_to_bf16(codecs::f16_to_f32(v)); }

void f32_to_bf16(const void* in, void* out, size_t n, bool) noexcept {
  loop<uint32_t, uint16_t, codecs::f32_to_bf16>(in, out, n);
}
void f32_to_f16(const void* in, void* out, size_t n, bool) noexcept {
  loop<uint32_t, uint16_t, codecs::f32_to_f16>(in, out, n);
}
void bf16_to_f32(const void* in, void* out, size_t n, bool) noexcept {
  loop<uint16_t, uint32_t, codecs::bf16_to_f32>(in, out, n);
}
void f16_to_f32(const void* in, void* out, size_t n, bool) noexcept {
  loop<uint16_t, uint32_t, codecs::f16_to_f32>(in, out, n);
}
void bf16_to_f16(const void* in, void* out, size_t n, bool) noexcept {
  loop<uint16_t, uint16_t, bf16_to_f16_bits>(in, out, n);
}
void f16_to_bf16(const void* in, void* out, size_t n, bool) noexcept {
  loop<uint16_t, uint16_t, f16_to_bf16_bits>(in, out, n);
}
}  // namespace scalar

void convert(DType src, const void* in, DType dst, void* out, size_t n, Isa isa) noexcept {
  if (src == dst) {
    std::memcpy(out, in, n * (dtype_bits(src) / 8));
    return;
  }
  kernels(isa).convert(src, dst)(in, out, n, false);
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
    case DType::F8_E4M3:
      for (uint64_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(b[first + i]);
      return true;
    case DType::F8_E5M2:
      for (uint64_t i = 0; i < n; ++i) out[i] = e5m2_to_f32(b[first + i]);
      return true;
    case DType::F8_E4M3FNUZ:
      for (uint64_t i = 0; i < n; ++i) out[i] = e4m3fnuz_to_f32(b[first + i]);
      return true;
    case DType::F8_E5M2FNUZ:
      for (uint64_t i = 0; i < n; ++i) out[i] = e5m2fnuz_to_f32(b[first + i]);
      return true;
    case DType::F8_E8M0:
      for (uint64_t i = 0; i < n; ++i) out[i] = e8m0fnu_to_f32(b[first + i]);
      return true;
    case DType::F4:
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t k = first + i;
        out[i] = e2m1_to_f32(static_cast<uint8_t>(k % 2 ? b[k / 2] >> 4 : b[k / 2] & 0xF));
      }
      return true;
    default: return false;
  }
}

void stored_row_to_f32(DType d, const void* in, size_t n, bool e8m0, float* out) noexcept {
  const auto* b = static_cast<const uint8_t*>(in);
  switch (d) {
    case DType::F32:
      for (size_t i = 0; i < n; ++i) out[i] = f32_from_bits(load_le32(b + 4 * i));
      return;
    case DType::BF16:
    case DType::F16: return convert(d, in, DType::F32, out, n);
    default: break;
  }
  const size_t sz = dtype_bits(d) / 8;
  for (size_t i = 0; i < n; ++i) out[i] = stored_to_f32(d, b + i * sz, e8m0);
}

}  // namespace ctstream::codecs
