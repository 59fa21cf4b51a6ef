// codecs — the kernels of one instruction set, as one table (simdjson's "implementations"): the
// table of the active ISA is chosen once per process (codecs/dispatch.hpp); decoders take it once
// per tensor and call through it for every row.
#pragma once
#include "codecs/bitmask.hpp"
#include "codecs/convert.hpp"
#include "codecs/dequant.hpp"
#include "codecs/dispatch.hpp"
#include "ctstream/dtype.hpp"

namespace ctstream::codecs {

struct Kernels {
  Isa isa;
  ConvertFn f32_to_bf16, f32_to_f16, bf16_to_f32, f16_to_f32, bf16_to_f16, f16_to_bf16;
  BitmaskExpandFn bitmask_expand_1, bitmask_expand_2, bitmask_expand_4;
  DequantNibbleFn dequant_nibble;
  DequantByteFn dequant_byte;
  UnpackInt8Fn unpack_int8;
  DequantPackedFn dequant_packed;

  /// The conversion kernel `src` -> `dst` (both F32/F16/BF16, different); nullptr otherwise.
  ConvertFn convert(DType src, DType dst) const noexcept;
  /// Bitmask expansion for 1-, 2- or 4-byte elements; nullptr otherwise.
  BitmaskExpandFn bitmask_expand(unsigned elem_bytes) const noexcept;
};

/// The table of `isa`; the scalar table when this build or CPU has no kernels for it.
const Kernels& kernels(Isa isa) noexcept;
/// The table of the active ISA.
inline const Kernels& active_kernels() noexcept { return kernels(active_isa()); }

}  // namespace ctstream::codecs
