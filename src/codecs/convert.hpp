// codecs — element conversion among F32, F16 and BF16, dispatched to the active ISA.
#pragma once
#include <cstddef>

#include "codecs/dispatch.hpp"
#include "ctstream/dtype.hpp"

namespace ctstream::codecs {

/// Signature of every conversion kernel: n elements from `in` to `out` (no overlap). stream: a large
/// output written past the caches, as DequantSpec::stream (x86: non-temporal stores where aligned;
/// the caller calls store_fence() after its last call, before another thread reads `out`).
using ConvertFn = void (*)(const void* in, void* out, size_t n, bool stream);

/// Kernel converting `src` to `dst` (both F32/F16/BF16, src != dst) for `isa`.
ConvertFn convert_kernel(DType src, DType dst, Isa isa) noexcept;

/// Converts n elements; src == dst copies. Both must be float outputs (is_float_output).
void convert(DType src, const void* in, DType dst, void* out, size_t n, Isa isa = active_isa()) noexcept;

/// The other floating dtypes of safetensors (F64, the F8 variants, F4) read as f32: elements
/// [first, first + n) of `in`, which holds the tensor from element 0 (F4: two per byte, element
/// 2k in the low nibble, as torch's float4_e2m1fn_x2 and every FP4 producer pack them). F64 is
/// rounded to f32 (torch converts F64 to F16 / BF16 through F32 too). Returns false for a dtype
/// it cannot read (F6: safetensors defines no element order for it; non-float dtypes).
bool widen_to_f32(DType src, const void* in, uint64_t first, uint64_t n, float* out) noexcept;

/// n stored scalars of a scale / zero-point part as f32: element i is stored_to_f32(d, in + i * size,
/// e8m0) (codecs/element.hpp), computed a row at a time (F16 / BF16 through the conversion
/// kernels). One-byte dtypes take 256 values: a caller converting many rows looks them up in a
/// table of stored_to_f32 instead.
void stored_row_to_f32(DType d, const void* in, size_t n, bool e8m0, float* out) noexcept;

}  // namespace ctstream::codecs
