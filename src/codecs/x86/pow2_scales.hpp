// E4M3 rows whose group scales are all positive powers of two 2^k (mxfp8's E8M0 scales), shared by
// the x86 ISA files: an E4M3 value x has at most 4 significant bits, so x 2^k is exact in f32 and
// in bf16 while it stays normal and finite, and its bf16 bits are bf16(x)'s plus k << 7 (for every
// code but the zeros and NaNs, which 2^k leaves as they are). The kernels decode such rows through
// their scale-1 tables plus each group's exponent. The nonzero codes are 2^-9 <= |x| <= 448, so
// exponent fields kPow2FieldMin..kPow2FieldMax (k in [-111, 113]) keep every result normal and
// below 2^122; a row with any other scale (off a power of two, negative, out of that range) takes
// the general path. Each file checks this with its own vectors.
//
// Internal linkage, as stores.hpp.
#pragma once
#include <stdint.h>

namespace ctstream::codecs::x86 {
namespace {

inline constexpr uint32_t kPow2FieldMin = 16, kPow2FieldMax = 240;
// Sign and mantissa bits of an f32 that is a positive power of two: all clear.
inline constexpr uint32_t kPow2Clear = 0x807FFFFFu;

}  // namespace
}  // namespace ctstream::codecs::x86
