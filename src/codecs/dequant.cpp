#include "codecs/dequant.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "codecs/convert.hpp"

#include "codecs/half.hpp"
#include "codecs/isa_kernels.hpp"
#include "codecs/kernels.hpp"
#include "codecs/minifloat.hpp"

namespace ctstream::codecs {

namespace {
// Rounds f32 bits to S and returns the f32 image of the S value.
inline uint32_t round_to(uint32_t v, DType s) noexcept {
  if (s == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (s == DType::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}
}  // namespace

void store_dequant(float v, const DequantSpec& spec, void* out, size_t j) noexcept {
  const uint32_t r = round_to(f32_bits(v), spec.natural);  // exact image of the S value
  if (spec.out == DType::F32) {
    std::memcpy(static_cast<char*>(out) + 4 * j, &r, 4);
  } else {
    // S -> D: from the exact f32 image, one RNE step (S == D gives back the same bits).
    const uint16_t h = spec.out == DType::BF16 ? f32_to_bf16(r) : f32_to_f16(r);
    std::memcpy(static_cast<char*>(out) + 2 * j, &h, 2);
  }
}

namespace {
// Rounds f32 products to S, then converts to D, with the dispatched conversion kernels (the
// same bits as store_dequant: one RNE step into S, one from the exact S value into D).
void finish_row(const float* p, size_t n, const DequantSpec& spec, Isa isa, void* out) noexcept {
  if (spec.natural == DType::F32 || spec.natural == spec.out) {
    convert(DType::F32, p, spec.out, out, n, isa);
    return;
  }
  thread_local std::vector<uint16_t> mid;
  mid.resize(n);
  convert(DType::F32, p, spec.natural, mid.data(), n, isa);
  convert(spec.natural, mid.data(), spec.out, out, n, isa);
}
}  // namespace

void dequant_f32_row(const float* x, size_t cols, const float* scale, const float* zp, const int32_t* gidx,
                     const DequantSpec& spec, Isa isa, void* out) noexcept {
  if (!zp || spec.int_values) {  // the subtraction is exact: products in f32, then round + convert
    thread_local std::vector<float> p;
    p.resize(cols);
    if (gidx) {
      for (size_t j = 0; j < cols; ++j) {
        const size_t g = static_cast<size_t>(gidx[j]);
        p[j] = (zp ? x[j] - zp[g] : x[j]) * scale[g];
      }
    } else {
      for (size_t j0 = 0; j0 < cols; j0 += spec.group_size) {
        const size_t g = j0 / spec.group_size, j1 = std::min(cols, j0 + spec.group_size);
        const float s = scale[g];
        if (zp) {
          const float z = zp[g];
          for (size_t j = j0; j < j1; ++j) p[j] = (x[j] - z) * s;
        } else {
          for (size_t j = j0; j < j1; ++j) p[j] = x[j] * s;
        }
      }
    }
    finish_row(p.data(), cols, spec, isa, out);
    return;
  }
  for (size_t j = 0; j < cols; ++j) {
    const size_t g = gidx ? static_cast<size_t>(gidx[j]) : j / spec.group_size;
    float d = x[j];
    if (zp) d = f32_from_bits(round_to(f32_bits(d - zp[g]), spec.natural));
    store_dequant(d * scale[g], spec, out, j);
  }
}

namespace scalar {
void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const DequantSpec& spec, void* out) noexcept {
  for (size_t j = 0; j < cols; ++j) {
    const size_t g = j / spec.group_size;
    const uint8_t code = (packed[j >> 1] >> ((j & 1) * 4)) & 0xF;
    const float d = zp ? lut[code] - zp[g] : lut[code];
    store_dequant(d * scale[g], spec, out, j);
  }
}
void dequant_byte(const uint8_t* codes, size_t cols, ByteCode code, const float* scale, const float* zp,
                  const DequantSpec& spec, void* /*memo*/, void* out) noexcept {
  for (size_t j = 0; j < cols; ++j) {
    const size_t g = j / spec.group_size;
    const float x = code == ByteCode::i8 ? static_cast<float>(static_cast<int8_t>(codes[j])) : e4m3_to_f32(codes[j]);
    const float d = zp ? x - zp[g] : x;  // exact: integer codes and zero points
    store_dequant(d * scale[g], spec, out, j);
  }
}
}  // namespace scalar

void unpack_int_row(const uint8_t* words, unsigned bits, bool dense, size_t cols, float* out) noexcept {
  const uint32_t mask = (1u << bits) - 1;
  const float offset = static_cast<float>(1u << (bits - 1));
  auto word = [words](size_t i) {
    uint32_t w;
    std::memcpy(&w, words + 4 * i, 4);
    return w;
  };
  if (dense) {
    for (size_t i = 0; i < cols; ++i) {
      const uint64_t bit = static_cast<uint64_t>(i) * bits;
      const size_t w = static_cast<size_t>(bit >> 5);
      const unsigned sh = static_cast<unsigned>(bit & 31);
      uint64_t v = word(w) >> sh;
      if (sh + bits > 32) v |= static_cast<uint64_t>(word(w + 1)) << (32 - sh);
      out[i] = static_cast<float>(static_cast<uint32_t>(v) & mask) - offset;
    }
  } else {
    const size_t pf = 32 / bits;
    for (size_t i = 0; i < cols; ++i) out[i] = static_cast<float>((word(i / pf) >> (bits * (i % pf))) & mask) - offset;
  }
}

}  // namespace ctstream::codecs
