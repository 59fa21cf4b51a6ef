// Packed-integer layout arithmetic shared by the format layer (shape checks) and the codecs.
#pragma once
#include <cstdint>

namespace ctstream::detail {

/// int32 words one row of `cols` b-bit codes occupies: dense = compressed-tensors 0.18+
/// (`ceil(cols*b/32)`, codes straddle words), else <= 0.17 (`ceil(cols / (32/b))`).
constexpr uint64_t packed_words(uint64_t cols, unsigned bits, bool dense) noexcept {
  return dense ? (cols * bits + 31) / 32 : (cols + (32 / bits) - 1) / (32 / bits);
}

}  // namespace ctstream::detail
