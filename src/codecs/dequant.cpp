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
// Stores D bits (element.hpp `dequant_element` / `dequant_finish`) at out[j].
inline void store_bits(uint32_t bits, DType out_dtype, void* out, size_t j) noexcept {
  if (out_dtype == DType::F32) {
    std::memcpy(static_cast<char*>(out) + 4 * j, &bits, 4);
  } else {
    const auto h = static_cast<uint16_t>(bits);
    std::memcpy(static_cast<char*>(out) + 2 * j, &h, 2);
  }
}
}  // namespace

void store_dequant(float v, const DequantSpec& spec, void* out, size_t j) noexcept {
  store_bits(dequant_finish(v, spec.natural, spec.out), spec.out, out, j);
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
  for (size_t j = 0; j < cols; ++j) {  // zero points whose subtraction rounds (fp8 ones)
    const size_t g = gidx ? static_cast<size_t>(gidx[j]) : j / spec.group_size;
    store_bits(dequant_element(x[j], scale[g], true, zp[g], false, spec.natural, spec.out), spec.out, out, j);
  }
}

namespace scalar {
void dequant_nibble(const uint8_t* packed, size_t cols, const float* lut, const float* scale, const float* zp,
                    const DequantSpec& spec, void* out) noexcept {
  for (size_t j = 0; j < cols; ++j) {
    const size_t g = j / spec.group_size;
    const uint8_t code = (packed[j >> 1] >> ((j & 1) * 4)) & 0xF;
    // exact subtraction: int4 codes and integer zero points (fp4 has none)
    store_bits(dequant_element(lut[code], scale[g], zp != nullptr, zp ? zp[g] : 0.f, true, spec.natural, spec.out),
               spec.out, out, j);
  }
}
void dequant_byte(const uint8_t* codes, size_t cols, ByteCode code, const float* scale, const float* zp,
                  const DequantSpec& spec, void* /*memo*/, void* out) noexcept {
  for (size_t j = 0; j < cols; ++j) {
    const size_t g = j / spec.group_size;
    const float x = stored_to_f32(code == ByteCode::i8 ? DType::I8 : DType::F8_E4M3, codes + j, false);
    // exact: integer codes and zero points
    store_bits(dequant_element(x, scale[g], zp != nullptr, zp ? zp[g] : 0.f, true, spec.natural, spec.out), spec.out,
               out, j);
  }
}
void unpack_int8(const uint8_t* words, unsigned bits, size_t cols, int8_t* out) noexcept {
  const int32_t half = 1 << (bits - 1);
  const uint64_t mask = (1u << bits) - 1, nbytes = (cols * bits + 7) / 8;
  size_t i = 0;
  // A 64-bit little-endian window at the code's byte while 8 bytes of the row remain there (the
  // stream is little-endian words, so its bits are little-endian bytes), then the last codes below.
  for (; i < cols && (i * bits) / 8 + 8 <= nbytes; ++i) {
    const uint64_t bit = i * bits;
    out[i] = static_cast<int8_t>(static_cast<int32_t>((load_le64(words + bit / 8) >> (bit % 8)) & mask) - half);
  }
  // The last codes byte by byte (a code spans at most two bytes), never past the row's bytes:
  // int_code() would load whole int32 words, and a row window (the reader's) may start mid-word.
  for (; i < cols; ++i) {
    const uint64_t bit = i * bits, k = bit / 8;
    const uint32_t v = words[k] | (k + 1 < nbytes ? static_cast<uint32_t>(words[k + 1]) << 8 : 0u);
    out[i] = static_cast<int8_t>(static_cast<int32_t>((v >> (bit % 8)) & mask) - half);
  }
}
void dequant_packed(const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                    const DequantSpec& spec, void* memo, void* out) noexcept {
  dequant_packed_two_pass(unpack_int8, dequant_byte, words, bits, cols, scale, zp, spec, memo, out);
}
}  // namespace scalar

void dequant_packed_two_pass(void (*unpack)(const uint8_t*, unsigned, size_t, int8_t*) noexcept,
                             void (*byte)(const uint8_t*, size_t, ByteCode, const float*, const float*,
                                          const DequantSpec&, void*, void*) noexcept,
                             const uint8_t* words, unsigned bits, size_t cols, const float* scale, const float* zp,
                             const DequantSpec& spec, void* memo, void* out) noexcept {
  thread_local std::vector<int8_t> codes;
  codes.resize(cols);
  unpack(words, bits, cols, codes.data());
  byte(reinterpret_cast<const uint8_t*>(codes.data()), cols, ByteCode::i8, scale, zp, spec, memo, out);
}

void unpack_int_row(const uint8_t* words, unsigned bits, bool dense, size_t cols, float* out) noexcept {
  for (size_t i = 0; i < cols; ++i) out[i] = int_code_value(int_code(words, 4, bits, dense, i), bits);
}

}  // namespace ctstream::codecs
