#include "codecs/kernels.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/dequant.hpp"
#include "codecs/isa_kernels.hpp"

namespace ctstream::codecs {
namespace {

#define CTSTREAM_KERNEL_TABLE(ISA)                                                                                  \
  Kernels {                                                                                                         \
    Isa::ISA, ISA::f32_to_bf16, ISA::f32_to_f16, ISA::bf16_to_f32, ISA::f16_to_f32, ISA::bf16_to_f16,               \
        ISA::f16_to_bf16, ISA::bitmask_expand_1, ISA::bitmask_expand_2, ISA::bitmask_expand_4, ISA::dequant_nibble, \
        ISA::dequant_byte, ISA::unpack_int8, ISA::dequant_packed                                                    \
  }
constexpr Kernels kScalar = CTSTREAM_KERNEL_TABLE(scalar);
#if defined(__x86_64__)
constexpr Kernels kAvx2 = CTSTREAM_KERNEL_TABLE(avx2);
constexpr Kernels kAvx512 = CTSTREAM_KERNEL_TABLE(avx512);
#endif
#if defined(__aarch64__)
constexpr Kernels kNeon = CTSTREAM_KERNEL_TABLE(neon);
#endif
#undef CTSTREAM_KERNEL_TABLE

}  // namespace

const Kernels& kernels(Isa isa) noexcept {
  if (!isa_supported(isa)) return kScalar;
  switch (isa) {
#if defined(__x86_64__)
    case Isa::avx2: return kAvx2;
    case Isa::avx512: return kAvx512;
#endif
#if defined(__aarch64__)
    case Isa::neon: return kNeon;
#endif
    default: return kScalar;
  }
}

ConvertFn Kernels::convert(DType src, DType dst) const noexcept {
  using D = DType;
  if (src == D::F32 && dst == D::BF16) return f32_to_bf16;
  if (src == D::F32 && dst == D::F16) return f32_to_f16;
  if (src == D::BF16 && dst == D::F32) return bf16_to_f32;
  if (src == D::F16 && dst == D::F32) return f16_to_f32;
  if (src == D::BF16 && dst == D::F16) return bf16_to_f16;
  if (src == D::F16 && dst == D::BF16) return f16_to_bf16;
  return nullptr;
}

BitmaskExpandFn Kernels::bitmask_expand(unsigned elem_bytes) const noexcept {
  switch (elem_bytes) {
    case 1: return bitmask_expand_1;
    case 2: return bitmask_expand_2;
    case 4: return bitmask_expand_4;
  }
  return nullptr;
}

// The per-kernel accessors of convert.hpp / bitmask.hpp / dequant.hpp, for tests and benchmarks.
ConvertFn convert_kernel(DType src, DType dst, Isa isa) noexcept { return kernels(isa).convert(src, dst); }
BitmaskExpandFn bitmask_expand_kernel(unsigned elem_bytes, Isa isa) noexcept {
  return kernels(isa).bitmask_expand(elem_bytes);
}
DequantNibbleFn dequant_nibble_kernel(Isa isa) noexcept { return kernels(isa).dequant_nibble; }
DequantByteFn dequant_byte_kernel(Isa isa) noexcept { return kernels(isa).dequant_byte; }
UnpackInt8Fn unpack_int8_kernel(Isa isa) noexcept { return kernels(isa).unpack_int8; }
DequantPackedFn dequant_packed_kernel(Isa isa) noexcept { return kernels(isa).dequant_packed; }

void store_fence() noexcept {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace ctstream::codecs
