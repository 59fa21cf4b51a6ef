// codecs — element conversion among F32, F16 and BF16, dispatched to the active ISA.
#pragma once
#include <cstddef>

#include "codecs/dispatch.hpp"
#include "ctstream/dtype.hpp"

namespace ctstream::codecs {

/// Signature of every conversion kernel: n elements from `in` to `out` (no overlap).
using ConvertFn = void (*)(const void* in, void* out, size_t n);

/// Kernel converting `src` to `dst` (both F32/F16/BF16, src != dst) for `isa`.
ConvertFn convert_kernel(DType src, DType dst, Isa isa) noexcept;

/// Converts n elements; src == dst copies. Both must be float outputs (is_float_output).
void convert(DType src, const void* in, DType dst, void* out, size_t n, Isa isa = active_isa()) noexcept;

}  // namespace ctstream::codecs
