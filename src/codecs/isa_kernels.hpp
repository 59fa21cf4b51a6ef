// codecs — the entry points every instruction-set implementation defines, one namespace per ISA
// (scalar, avx2, avx512 on x86-64, neon on AArch64); codecs/kernels.cpp gathers them into one
// table per ISA. The files of a SIMD ISA are compiled with that ISA's flags and include nothing but
// intrinsics, C headers and the plain declarations below, so no inline C++ library code is
// emitted with wider instructions (which the linker could then pick for the scalar path).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ctstream::codecs {
struct DequantSpec;
enum class ByteCode : uint8_t;

/// dequant_packed as two passes: `unpack` (an ISA's unpack_int8) into a per-thread int8 row, then
/// `byte` (the same ISA's dequant_byte, ByteCode::i8). The entry of every ISA without a fused
/// packed kernel, so that composition lives in one place (codecs/dequant.cpp).
void dequant_packed_two_pass(void (*unpack)(const uint8_t*, unsigned, size_t, int8_t*) noexcept,
                             void (*byte)(const uint8_t*, size_t, ByteCode, const float*, const float*,
                                          const DequantSpec&, void*, void*) noexcept,
                             const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                             const DequantSpec& spec, void* memo, void* out) noexcept;
}  // namespace ctstream::codecs

#define CTSTREAM_DECLARE_ISA_KERNELS                                                                               \
  void f32_to_bf16(const void* in, void* out, size_t n, bool stream) noexcept;                                     \
  void f32_to_f16(const void* in, void* out, size_t n, bool stream) noexcept;                                      \
  void bf16_to_f32(const void* in, void* out, size_t n, bool stream) noexcept;                                     \
  void f16_to_f32(const void* in, void* out, size_t n, bool stream) noexcept;                                      \
  void bf16_to_f16(const void* in, void* out, size_t n, bool stream) noexcept;                                     \
  void f16_to_bf16(const void* in, void* out, size_t n, bool stream) noexcept;                                     \
  size_t bitmask_expand_1(const uint8_t* mask, const void* values, size_t cols, void* out, bool stream) noexcept;  \
  size_t bitmask_expand_2(const uint8_t* mask, const void* values, size_t cols, void* out, bool stream) noexcept;  \
  size_t bitmask_expand_4(const uint8_t* mask, const void* values, size_t cols, void* out, bool stream) noexcept;  \
  void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,   \
                      const ::ctstream::codecs::DequantSpec& spec, void* out) noexcept;                            \
  void dequant_byte(const uint8_t* codes, size_t cols, ::ctstream::codecs::ByteCode code, const float* scale,      \
                    const float* zp, const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept; \
  void unpack_int8(const uint8_t* words, unsigned bits, size_t cols, int8_t* out) noexcept;                        \
  void dequant_packed(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,       \
                      const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept;

namespace ctstream::codecs::scalar {
CTSTREAM_DECLARE_ISA_KERNELS
}
#if defined(__x86_64__)
namespace ctstream::codecs::avx2 {
CTSTREAM_DECLARE_ISA_KERNELS
}
namespace ctstream::codecs::avx512 {
CTSTREAM_DECLARE_ISA_KERNELS
}
#endif
#if defined(__aarch64__)
namespace ctstream::codecs::neon {
CTSTREAM_DECLARE_ISA_KERNELS
}
#endif
#undef CTSTREAM_DECLARE_ISA_KERNELS
