#include "codecs/bitmask.hpp"

#include <cstring>

#include "codecs/isa_kernels.hpp"

namespace ctstream::codecs {

namespace scalar {
template <class T>
size_t bitmask_expand(const uint8_t* mask, const void* values, size_t cols, void* out) noexcept {
  const auto* v = static_cast<const unsigned char*>(values);
  auto* o = static_cast<unsigned char*>(out);
  size_t k = 0;
  for (size_t j = 0; j < cols; ++j) {
    if ((mask[j >> 3] >> (j & 7)) & 1) {
      std::memcpy(o + j * sizeof(T), v + k * sizeof(T), sizeof(T));
      ++k;
    } else {
      std::memset(o + j * sizeof(T), 0, sizeof(T));
    }
  }
  return k;
}
size_t bitmask_expand_1(const uint8_t* m, const void* v, size_t c, void* o, bool /*stream*/) noexcept {
  return bitmask_expand<uint8_t>(m, v, c, o);
}
size_t bitmask_expand_2(const uint8_t* m, const void* v, size_t c, void* o, bool /*stream*/) noexcept {
  return bitmask_expand<uint16_t>(m, v, c, o);
}
size_t bitmask_expand_4(const uint8_t* m, const void* v, size_t c, void* o, bool /*stream*/) noexcept {
  return bitmask_expand<uint32_t>(m, v, c, o);
}
}  // namespace scalar

uint64_t bitmask_row_popcount(const uint8_t* mask, size_t cols) noexcept {
  uint64_t n = 0;
  const size_t full = cols / 8;
  size_t i = 0;
  for (; i + 8 <= full; i += 8) {
    uint64_t w;
    std::memcpy(&w, mask + i, 8);
    n += static_cast<uint64_t>(__builtin_popcountll(w));
  }
  for (; i < full; ++i) n += static_cast<uint64_t>(__builtin_popcount(mask[i]));
  if (cols % 8) n += static_cast<uint64_t>(__builtin_popcount(mask[full] & ((1u << (cols % 8)) - 1)));
  return n;
}

bool bitmask_padding_clear(const uint8_t* mask, size_t cols) noexcept {
  return cols % 8 == 0 || (mask[cols / 8] >> (cols % 8)) == 0;
}

}  // namespace ctstream::codecs
