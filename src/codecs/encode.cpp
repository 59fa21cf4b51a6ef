#include "codecs/encode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "codecs/element.hpp"
#include "core/fork.hpp"

namespace ctstream::codecs {
namespace {

// Row loops run multi-threaded above this many elements (results do not depend on it).
constexpr uint64_t kParallelMin = 1u << 16;

/// Raw element bits of a F32 / F16 / BF16 element with the sign bit cleared ("is this zero").
inline uint32_t mag_bits(const void* data, uint64_t i, DType d) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  return d == DType::F32 ? load_le32(p + 4 * i) & 0x7FFFFFFFu : load_le16(p + 2 * i) & 0x7FFFu;
}
inline unsigned elem_bytes(DType d) noexcept { return d == DType::F32 ? 4 : 2; }

}  // namespace

// c10/util/Float8_e4m3fn.h `fp8e4m3fn_from_fp32_value`.
uint8_t f32_to_e4m3(float x) noexcept {
  uint32_t f = f32_bits(x);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  constexpr uint32_t fp8_max = UINT32_C(1087) << 20;     // 480.0f: at or above -> NaN
  constexpr uint32_t denorm_mask = UINT32_C(141) << 23;  // 2^14
  uint8_t r;
  if (f >= fp8_max) {
    r = 0x7F;
  } else if (f < (UINT32_C(121) << 23)) {  // below 2^-6: subnormal, RNE through an fp32 add
    const uint32_t s = f32_bits(f32_from_bits(f) + f32_from_bits(denorm_mask));
    r = static_cast<uint8_t>(s - denorm_mask);
  } else {
    const uint32_t mant_odd = (f >> 20) & 1u;
    f += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu;
    f += mant_odd;
    r = static_cast<uint8_t>(f >> 20);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

uint8_t f32_to_e2m1(float v) noexcept {
  const float a = std::fabs(v);
  uint8_t idx;
  if (a <= 0.25f) idx = 0;
  else if (a < 0.75f) idx = 1;
  else if (a <= 1.25f) idx = 2;
  else if (a < 1.75f) idx = 3;
  else if (a <= 2.5f) idx = 4;
  else if (a < 3.5f) idx = 5;
  else if (a <= 5.0f) idx = 6;
  else idx = 7;
  return static_cast<uint8_t>(idx | (v < 0.f ? 8u : 0u));
}

void store_floats(const float* v, uint64_t n, DType d, std::byte* out) noexcept {
  if (d == DType::F32) {
    if (n) std::memcpy(out, v, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    const auto h = static_cast<uint16_t>(narrow_f32(f32_bits(v[i]), d));
    std::memcpy(out + 2 * i, &h, 2);
  }
}

std::vector<int32_t> pack_int32_rows(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits) {
  const uint64_t words = (cols * bits + 31) / 32;
  std::vector<uint32_t> out(rows * words, 0u);
  const uint32_t offset = 1u << (bits - 1), mask = (bits == 32 ? ~0u : (1u << bits) - 1u);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team(core::team_size())))
  for (int64_t rr = 0; rr < static_cast<int64_t>(rows); ++rr) {
    const uint64_t r = static_cast<uint64_t>(rr);
    uint32_t* row = out.data() + r * words;
    for (uint64_t i = 0; i < cols; ++i) {
      const uint32_t u =
          (static_cast<uint32_t>(static_cast<int32_t>(q[r * cols + i]) + static_cast<int32_t>(offset))) & mask;
      const uint64_t bit = i * bits;
      const uint64_t wd = bit / 32;
      const unsigned sh = static_cast<unsigned>(bit % 32);
      row[wd] |= u << sh;
      if (sh + bits > 32) row[wd + 1] |= u >> (32 - sh);
    }
  }
  std::vector<int32_t> res(out.size());
  if (!out.empty()) std::memcpy(res.data(), out.data(), out.size() * 4);
  return res;
}

std::vector<int32_t> pack_int32_cols(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits) {
  std::vector<int8_t> t(rows * cols);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) t[c * rows + r] = q[r * cols + c];
  const auto packed = pack_int32_rows(t.data(), cols, rows, bits);  // [cols, words]
  const uint64_t words = (rows * bits + 31) / 32;
  std::vector<int32_t> out(words * cols);
  for (uint64_t c = 0; c < cols; ++c)
    for (uint64_t k = 0; k < words; ++k) out[k * cols + c] = packed[c * words + k];
  return out;
}

void pack_fp4(const uint8_t* nibbles, uint64_t n, uint8_t* out) noexcept {
  for (uint64_t k = 0; k < n / 2; ++k)
    out[k] = static_cast<uint8_t>((nibbles[2 * k] & 0xF) | ((nibbles[2 * k + 1] & 0xF) << 4));
}

uint64_t count_nonzero(const void* data, uint64_t n, DType d) noexcept {
  uint64_t k = 0;
  for (uint64_t i = 0; i < n; ++i) k += mag_bits(data, i, d) != 0;
  return k;
}

namespace {
// The elements kept(i) says, row-major into `values`, one LSB-first mask bit each (the layout both
// sparse formats store); row_offsets, when given, gets each row's first value index.
template <class Kept>
void gather_kept(const void* data, uint64_t rows, uint64_t cols, DType d, Kept kept, void* values, uint8_t* bitmask,
                 int64_t* row_offsets) {
  const unsigned eb = elem_bytes(d);
  const uint64_t mb = (cols + 7) / 8;
  std::memset(bitmask, 0, rows * mb);
  auto* dst = static_cast<std::byte*>(values);
  const auto* src = static_cast<const std::byte*>(data);
  int64_t off = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    if (row_offsets) row_offsets[r] = off;
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = r * cols + c;
      if (!kept(i)) continue;
      bitmask[r * mb + c / 8] |= static_cast<uint8_t>(1u << (c % 8));
      std::memcpy(dst, src + i * eb, eb);
      dst += eb;
      ++off;
    }
  }
}
}  // namespace

void bitmask_compress(const void* data, uint64_t rows, uint64_t cols, DType d, void* values, uint8_t* bitmask,
                      int64_t* row_offsets) {
  gather_kept(
      data, rows, cols, d, [&](uint64_t i) { return mag_bits(data, i, d) != 0; }, values, bitmask, row_offsets);
}

uint64_t mask_24(const void* data, uint64_t n, DType d, uint8_t* keep) {
  // aten/src/ATen/native/TopKImpl.h `topk_impl_loop`: k*64 > 4, so nth_element(begin, begin+k-1)
  // on (value, index) pairs with "NaN is largest, else >"; the kept set is the first k pairs.
  using elem_t = std::pair<double, int64_t>;
  auto comp = [](const elem_t& x, const elem_t& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  const auto* base = static_cast<const uint8_t*>(data);
  uint64_t dropped = 0;
  std::vector<elem_t> queue(4);
  for (uint64_t g = 0; g < n / 4; ++g) {
    for (int j = 0; j < 4; ++j) {
      const float v = widen_element(d, base, 4 * g + static_cast<uint64_t>(j));
      queue[static_cast<size_t>(j)] = {static_cast<double>(std::fabs(v)), j};
    }
    std::nth_element(queue.begin(), queue.begin() + 1, queue.end(), comp);
    uint8_t* k = keep + 4 * g;
    k[0] = k[1] = k[2] = k[3] = 0;
    k[queue[0].second] = 1;
    k[queue[1].second] = 1;
    bool lost = false;
    for (int j = 0; j < 4; ++j)
      if (!k[j] && mag_bits(data, 4 * g + static_cast<uint64_t>(j), d) != 0) lost = true;
    dropped += lost;
  }
  return dropped;
}

void sparse24_compress(const void* data, uint64_t rows, uint64_t cols, DType d, const uint8_t* keep, void* values,
                       uint8_t* bitmask) {
  gather_kept(
      data, rows, cols, d, [keep](uint64_t i) { return keep[i] != 0; }, values, bitmask, nullptr);
}

}  // namespace ctstream::codecs
