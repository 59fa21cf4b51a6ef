#include "writer/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "codecs/half.hpp"
#include "codecs/minifloat.hpp"
#include "core/fork.hpp"

namespace ctstream::writer {
namespace {

using codecs::f32_bits;
using codecs::f32_from_bits;

// Elementwise loops run multi-threaded above this many elements (results do not depend on it).
constexpr uint64_t kParallelMin = 1u << 16;

/// torch.finfo(d).eps — the value `calculate_qparams` puts in place of a zero scale.
float dtype_eps(DType d) noexcept {
  switch (d) {
    case DType::BF16: return 0.0078125f;    // 2^-7
    case DType::F16: return 0.0009765625f;  // 2^-10
    default: return std::numeric_limits<float>::epsilon();
  }
}
/// torch.finfo(d).tiny (smallest normal), used by `generate_gparam`'s clamp.
float dtype_tiny(DType d) noexcept { return d == DType::F16 ? 6.103515625e-05f : std::numeric_limits<float>::min(); }

/// torch.clamp(x, lo, hi): NaN propagates.
float clampf(float x, float lo, float hi) noexcept {
  if (x < lo) return lo;
  if (x > hi) return hi;
  return x;
}

/// torch.round + `.to(torch.int8)` after clamping to [-128, 127] (round half to even; NaN -> 0,
/// which is what torch's cast gives on x86).
int8_t round_to_int8(float x) noexcept {
  if (std::isnan(x)) return 0;
  return static_cast<int8_t>(std::nearbyint(clampf(x, -128.f, 127.f)));
}

/// `cast_to_fp4` (ct20: quantization/utils/fp4_utils.py, CPU path) followed by the index mapping
/// of `pack_fp4_to_uint8` (ct20: compressors/nvfp4/helpers.py): magnitude thresholds with ties to
/// the even E2M1 value; the sign bit is set for every negative input, including those that round
/// to zero (torch.sign(x) * 0.0 = -0.0, and the packer reads torch.signbit).
uint8_t fp4_code(float v) noexcept {
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

uint64_t numel(const Shape& s) noexcept {
  uint64_t n = 1;
  for (auto v : s) n *= v;
  return n;
}

/// Raw element bits of a F32 / F16 / BF16 element, sign bit cleared ("is this zero" test), and
/// the element's f32 value.
inline uint32_t mag_bits(const void* data, uint64_t i, DType d) noexcept {
  if (d == DType::F32) {
    uint32_t u;
    std::memcpy(&u, static_cast<const std::byte*>(data) + 4 * i, 4);
    return u & 0x7FFFFFFFu;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const std::byte*>(data) + 2 * i, 2);
  return h & 0x7FFFu;
}
inline float value_at(const void* data, uint64_t i, DType d) noexcept {
  if (d == DType::F32) {
    float f;
    std::memcpy(&f, static_cast<const std::byte*>(data) + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const std::byte*>(data) + 2 * i, 2);
  return f32_from_bits(d == DType::BF16 ? codecs::bf16_to_f32(h) : codecs::f16_to_f32(h));
}
inline unsigned elem_bytes(DType d) noexcept { return d == DType::F32 ? 4 : 2; }

}  // namespace

float round_to(DType d, float x) noexcept {
  switch (d) {
    case DType::BF16: return f32_from_bits(codecs::bf16_to_f32(codecs::f32_to_bf16(f32_bits(x))));
    case DType::F16: return f32_from_bits(codecs::f16_to_f32(codecs::f32_to_f16(f32_bits(x))));
    default: return x;
  }
}

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

Shape scale_shape(const WeightArgs& a, uint64_t rows, uint64_t cols) {
  switch (a.strategy) {
    case QuantStrategy::tensor: return {1};
    case QuantStrategy::channel: return {rows, 1};
    case QuantStrategy::group:
    case QuantStrategy::tensor_group: return {rows, a.group_size ? cols / a.group_size : 0};
    case QuantStrategy::block:
      return {(rows + a.block_rows - 1) / a.block_rows, (cols + a.block_cols - 1) / a.block_cols};
    default: return {1};
  }
}

uint64_t scale_index(const WeightArgs& a, uint64_t cols, uint64_t r, uint64_t c) noexcept {
  switch (a.strategy) {
    case QuantStrategy::channel: return r;
    case QuantStrategy::group:
    case QuantStrategy::tensor_group: return r * (cols / a.group_size) + c / a.group_size;
    case QuantStrategy::block: {
      const uint64_t nc = (cols + a.block_cols - 1) / a.block_cols;
      return (r / a.block_rows) * nc + c / a.block_cols;
    }
    default: return 0;
  }
}

std::pair<float, float> quant_range(const WeightArgs& a) noexcept {
  if (a.type == QuantType::int_) {
    const float half = std::ldexp(1.f, static_cast<int>(a.num_bits) - 1);
    return {-half, half - 1.f};
  }
  if (a.num_bits == 4) return {-6.f, 6.f};  // FP4_E2M1_DATA
  return {-448.f, 448.f};                   // FP8_E4M3_DATA
}

std::pair<float, float> min_max(const float* w, uint64_t n) noexcept {
  float lo = 0.f, hi = 0.f;
  if (n) lo = hi = w[0];
  for (uint64_t i = 1; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  return {lo, hi};
}

// ct20: quantization/utils/helpers.py `generate_gparam` with the FP8 / FP4 defaults.
float nvfp4_global_scale(float tensor_min, float tensor_max, DType d) noexcept {
  const float lo = std::min(tensor_min, 0.f), hi = std::max(tensor_max, 0.f);
  float mvp = std::max(std::fabs(lo), std::fabs(hi));
  mvp = std::max(mvp, dtype_tiny(d));
  // `448.0 * 6.0 / max_val_pos` is Tensor.__rtruediv__: reciprocal(), then * 2688 (each in d).
  const float recip = round_to(d, 1.f / mvp);
  const float g = round_to(d, recip * 2688.f);
  return std::isfinite(g) ? g : 1.f;  // torch.nan_to_num(nan=1, posinf=1, neginf=1)
}

QParams compute_qparams(const float* w, uint64_t rows, uint64_t cols, DType d, const WeightArgs& a,
                        std::optional<float> global_scale) {
  QParams p;
  p.shape = scale_shape(a, rows, cols);
  const uint64_t n = numel(p.shape);
  // Observer: amin / amax per scale element. Starting from 0 is the same as the zero inclusion
  // `calculate_qparams` applies first (min(min_vals, 0), max(max_vals, 0)); block padding adds
  // zeros too (llm-compressor pads with maybe_pad_tensor_for_block_quant before reducing).
  std::vector<float> lo(n, 0.f), hi(n, 0.f);
  const bool per_row = a.strategy == QuantStrategy::channel || a.strategy == QuantStrategy::group ||
                       a.strategy == QuantStrategy::tensor_group;
  if (per_row) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team_size()))
    for (int64_t r = 0; r < static_cast<int64_t>(rows); ++r)
      for (uint64_t c = 0; c < cols; ++c) {
        const uint64_t i = scale_index(a, cols, static_cast<uint64_t>(r), c);
        const float v = w[static_cast<uint64_t>(r) * cols + c];
        lo[i] = std::min(lo[i], v);
        hi[i] = std::max(hi[i], v);
      }
  } else {
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c) {
        const uint64_t i = scale_index(a, cols, r, c);
        const float v = w[r * cols + c];
        lo[i] = std::min(lo[i], v);
        hi[i] = std::max(hi[i], v);
      }
  }
  const std::pair<float, float> qrange =
      quant_range(a);  // (no structured binding: clang 14 cannot capture one in OpenMP regions)
  const float qmin = qrange.first, qmax = qrange.second;
  const float range = qmax - qmin;  // bit_range.to(D): exact for every supported width
  const float half_range = range / 2.f;
  p.scale.resize(n);
  if (!a.symmetric) p.zero_point.resize(n);
  if (a.strategy == QuantStrategy::tensor_group) p.global_scale = global_scale.value_or(1.f);
  for (uint64_t i = 0; i < n; ++i) {
    float scale, zp = 0.f;
    if (a.symmetric) {
      const float mvp = std::max(std::fabs(lo[i]), std::fabs(hi[i]));
      scale = round_to(d, mvp / half_range);
    } else {
      scale = round_to(d, round_to(d, hi[i] - lo[i]) / range);
      // bit_min - min/scale: a 0-dim fp32 bit_min with a D tensor stays in D. For an all-zero
      // group min/scale is 0/0 = NaN, which the int8 cast below turns into 0.
      zp = clampf(round_to(d, qmin - round_to(d, lo[i] / scale)), qmin, qmax);
    }
    if (a.strategy == QuantStrategy::tensor_group) scale = p.global_scale * scale;  // fp32 [1] * D
    if (a.fp8_scale) scale = codecs::e4m3_to_f32(f32_to_e4m3(clampf(scale, -448.f, 448.f)));
    if (scale == 0.f) scale = a.fp8_scale ? 0.125f : dtype_eps(d);
    p.scale[i] = scale;
    if (!a.symmetric) p.zero_point[i] = static_cast<float>(round_to_int8(zp));
  }
  return p;
}

void quantize(const float* w, uint64_t rows, uint64_t cols, DType d, const WeightArgs& a, const QParams& p,
              uint8_t* out) {
  const std::pair<float, float> qrange =
      quant_range(a);  // (no structured binding: clang 14 cannot capture one in OpenMP regions)
  const float qmin = qrange.first, qmax = qrange.second;
  const bool fp4 = a.type == QuantType::float_ && a.num_bits == 4;
  const bool fp8 = a.type == QuantType::float_ && a.num_bits == 8;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team_size()))
  for (int64_t rr = 0; rr < static_cast<int64_t>(rows); ++rr) {
    const uint64_t r = static_cast<uint64_t>(rr);
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = scale_index(a, cols, r, c);
      const float x = w[r * cols + c];
      if (fp4) {
        // NVFP4PackedCompressor: quantize(x, scale_D, global_scale): scale / global_scale and
        // x / scale promote to fp32; no zero point for symmetric schemes.
        const float s = p.scale[i] / p.global_scale;
        out[r * cols + c] = fp4_code(clampf(x / s, qmin, qmax));
        continue;
      }
      // `scaled = x / scale; scaled += zero_point.to(x.dtype)`, both in D. The symmetric zero
      // point is a zeros tensor at compression time (initialize_qparams with force_zero_point),
      // so the add still happens: it turns -0.0 into +0.0 (visible in fp8).
      float v = round_to(d, x / p.scale[i]);
      v = round_to(d, v + (a.symmetric ? 0.f : p.zero_point[i]));
      v = clampf(v, qmin, qmax);
      if (fp8) out[r * cols + c] = f32_to_e4m3(v);
      else out[r * cols + c] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(v)));
    }
  }
}

DType dequantized_dtype(const WeightArgs& a, DType d) noexcept {
  return a.type == QuantType::float_ && a.num_bits == 4 ? DType::BF16 : d;
}

void dequantize(const uint8_t* codes, uint64_t rows, uint64_t cols, DType d, const WeightArgs& a, const QParams& p,
                float* out) {
  const bool fp4 = a.type == QuantType::float_ && a.num_bits == 4;
  const bool fp8 = a.type == QuantType::float_ && a.num_bits == 8;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team_size()))
  for (int64_t rr = 0; rr < static_cast<int64_t>(rows); ++rr) {
    const uint64_t r = static_cast<uint64_t>(rr);
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = scale_index(a, cols, r, c);
      const uint8_t q = codes[r * cols + c];
      if (fp4) {  // bf16(fp32(x) * (fp32(scale_bf16) / global_scale))
        out[r * cols + c] = round_to(DType::BF16, codecs::e2m1_to_f32(q) * (p.scale[i] / p.global_scale));
      } else if (fp8) {
        out[r * cols + c] = round_to(d, codecs::e4m3_to_f32(q) * p.scale[i]);
      } else {
        const float zp = a.symmetric ? 0.f : p.zero_point[i];
        out[r * cols + c] = round_to(d, round_to(d, static_cast<float>(static_cast<int8_t>(q)) - zp) * p.scale[i]);
      }
    }
  }
}

std::vector<int32_t> pack_int32_rows(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits) {
  const uint64_t words = (cols * bits + 31) / 32;
  std::vector<uint32_t> out(rows * words, 0u);
  const uint32_t offset = 1u << (bits - 1), mask = (bits == 32 ? ~0u : (1u << bits) - 1u);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team_size()))
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
  std::memcpy(res.data(), out.data(), out.size() * 4);
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

void bitmask_compress(const void* data, uint64_t rows, uint64_t cols, DType d, void* values, uint8_t* bitmask,
                      int64_t* row_offsets) {
  const unsigned eb = elem_bytes(d);
  const uint64_t mb = (cols + 7) / 8;
  std::memset(bitmask, 0, rows * mb);
  auto* dst = static_cast<std::byte*>(values);
  const auto* src = static_cast<const std::byte*>(data);
  int64_t off = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    row_offsets[r] = off;
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = r * cols + c;
      if (mag_bits(data, i, d) == 0) continue;
      bitmask[r * mb + c / 8] |= static_cast<uint8_t>(1u << (c % 8));
      std::memcpy(dst, src + i * eb, eb);
      dst += eb;
      ++off;
    }
  }
}

uint64_t mask_24(const void* data, uint64_t n, DType d, uint8_t* keep) {
  // aten/src/ATen/native/TopKImpl.h `topk_impl_loop`: k*64 > 4, so nth_element(begin, begin+k-1)
  // on (value, index) pairs with "NaN is largest, else >"; the kept set is the first k pairs.
  using elem_t = std::pair<double, int64_t>;
  auto comp = [](const elem_t& x, const elem_t& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  uint64_t dropped = 0;
  std::vector<elem_t> queue(4);
  for (uint64_t g = 0; g < n / 4; ++g) {
    for (int j = 0; j < 4; ++j) {
      const float v = value_at(data, 4 * g + static_cast<uint64_t>(j), d);
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
  const unsigned eb = elem_bytes(d);
  const uint64_t mb = (cols + 7) / 8;
  std::memset(bitmask, 0, rows * mb);
  auto* dst = static_cast<std::byte*>(values);
  const auto* src = static_cast<const std::byte*>(data);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = r * cols + c;
      if (!keep[i]) continue;
      bitmask[r * mb + c / 8] |= static_cast<uint8_t>(1u << (c % 8));
      std::memcpy(dst, src + i * eb, eb);
      dst += eb;
    }
}

}  // namespace ctstream::writer
