// Overflow-checked arithmetic on sizes read from files.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

namespace ctstream::detail {

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) noexcept {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) noexcept {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
/// Product of the dimensions, nullopt on overflow (empty shape = scalar = 1).
inline std::optional<uint64_t> checked_numel(std::span<const uint64_t> shape) noexcept {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    auto m = checked_mul(n, d);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

}  // namespace ctstream::detail
