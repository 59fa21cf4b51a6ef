// Per-ISA kernel entry points. The .cpp files of each ISA are compiled with that ISA's flags and
// include nothing but intrinsics and C headers, so no inline C++ library code is emitted with
// wider instructions (which the linker could then pick for the scalar path).
#pragma once
#include <cstddef>
#include <cstdint>

#define CTSTREAM_DECLARE_CONVERT_KERNELS                            \
  void f32_to_bf16(const void* in, void* out, size_t n) noexcept;   \
  void f32_to_f16(const void* in, void* out, size_t n) noexcept;    \
  void bf16_to_f32(const void* in, void* out, size_t n) noexcept;   \
  void f16_to_f32(const void* in, void* out, size_t n) noexcept;    \
  void bf16_to_f16(const void* in, void* out, size_t n) noexcept;   \
  void f16_to_bf16(const void* in, void* out, size_t n) noexcept;

// Bitmask expansion (codecs/bitmask.hpp) and fused 4-bit and 8-bit dequant (codecs/dequant.hpp). The
// DequantSpec is only forward-declared here; the ISA files include codecs/dequant.hpp for its
// fields (plain enums and integers: checked with nm that no weak library symbols are emitted).
#define CTSTREAM_DECLARE_CODEC_KERNELS                                                                    \
  size_t bitmask_expand_1(const uint8_t* mask, const void* values, size_t cols, void* out) noexcept;     \
  size_t bitmask_expand_2(const uint8_t* mask, const void* values, size_t cols, void* out) noexcept;     \
  size_t bitmask_expand_4(const uint8_t* mask, const void* values, size_t cols, void* out) noexcept;     \
  void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale,          \
                      const float* zp, const ::ctstream::codecs::DequantSpec& spec, void* out) noexcept;   \
  void dequant_byte(const uint8_t* codes, size_t cols, ::ctstream::codecs::ByteCode code, const float* scale, \
                    const float* zp, const ::ctstream::codecs::DequantSpec& spec, void* memo, void* out) noexcept;

namespace ctstream::codecs {
struct DequantSpec;
enum class ByteCode : uint8_t;
}
namespace ctstream::codecs::scalar { CTSTREAM_DECLARE_CONVERT_KERNELS CTSTREAM_DECLARE_CODEC_KERNELS }
namespace ctstream::codecs::avx2 { CTSTREAM_DECLARE_CONVERT_KERNELS CTSTREAM_DECLARE_CODEC_KERNELS }
namespace ctstream::codecs::avx512 { CTSTREAM_DECLARE_CONVERT_KERNELS CTSTREAM_DECLARE_CODEC_KERNELS }
