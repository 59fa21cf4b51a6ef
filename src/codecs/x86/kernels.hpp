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

namespace ctstream::codecs::scalar { CTSTREAM_DECLARE_CONVERT_KERNELS }
namespace ctstream::codecs::avx2 { CTSTREAM_DECLARE_CONVERT_KERNELS }
namespace ctstream::codecs::avx512 { CTSTREAM_DECLARE_CONVERT_KERNELS }
