// codecs — shared by the SIMD kernel files (x86/, arm/): the mapping from a DequantSpec's runtime
// fields to the template arguments every ISA's fused kernels are instantiated over (natural dtype
// N, output dtype O, zero points, code type). Included only by ISA files: plain templates, no
// library code.
#pragma once
#include "codecs/dequant.hpp"

namespace ctstream::codecs::simd {

enum Kind { kBF16, kF16, kF32 };
template <Kind K>
struct KindT {
  static constexpr Kind value = K;
};
template <bool B>
struct FlagT {
  static constexpr bool value = B;
};

/// f(KindT<N>{}, KindT<O>{}) for the spec's natural and output dtypes, with store_dequant's
/// mapping: natural BF16 / F16 / else F32; output F32 / BF16 / else F16.
template <class F>
inline void with_kinds(const DequantSpec& spec, F&& f) {
  auto on_out = [&](auto n) {
    if (spec.out == DType::F32) f(n, KindT<kF32>{});
    else if (spec.out == DType::BF16) f(n, KindT<kBF16>{});
    else f(n, KindT<kF16>{});
  };
  if (spec.natural == DType::BF16) on_out(KindT<kBF16>{});
  else if (spec.natural == DType::F16) on_out(KindT<kF16>{});
  else on_out(KindT<kF32>{});
}

/// f(FlagT<b>{}) for a runtime flag.
template <class F>
inline void with_flag(bool b, F&& f) {
  if (b) f(FlagT<true>{});
  else f(FlagT<false>{});
}

}  // namespace ctstream::codecs::simd
