#include "writer/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "codecs/element.hpp"
#include "codecs/encode.hpp"
#include "core/fork.hpp"

namespace ctstream::writer {
namespace {

using codecs::f32_bits;
using codecs::f32_from_bits;
using codecs::f32_to_e4m3;

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

uint64_t numel(const Shape& s) noexcept {
  uint64_t n = 1;
  for (auto v : s) n *= v;
  return n;
}

}  // namespace

float round_to(DType d, float x) noexcept { return f32_from_bits(codecs::round_to(f32_bits(x), d)); }

ScaleForm scale_form(Format f) noexcept {
  if (f == Format::nvfp4_pack_quantized) return ScaleForm::e4m3_global;
  if (f == Format::mxfp4_pack_quantized || f == Format::mxfp8_quantized) return ScaleForm::e8m0;
  return ScaleForm::dtype;
}

uint8_t e8m0_byte(float scale) noexcept { return static_cast<uint8_t>(127 + std::ilogb(scale)); }

namespace {
// ct20 quantization/utils/mxfp_utils.py `generate_mx_scales` of a group's largest magnitude m
// (exact in d), then calculate_qparams steps 3-5 (quantization/utils/helpers.py): the uint8
// round trip (`round_to_quantized_type_dtype`: clamp to [0, 255], round), `maybe_convert_from_mx_exp`
// (2.0 ** (e - 127) in fp32, then .to(d)) and a zero scale replaced by uint8's eps, 1.
float mx_scale(float m, DType d, unsigned num_bits) noexcept {
  // round_to_power_2(m, FP4_E2M1 mantissa 1) on d's bits: + 1 << (mantissa - 2), then only the
  // sign and exponent kept (a power of two, 0 or inf). Both FP4 and FP8 use E2M1's mantissa there.
  const unsigned mant = d == DType::BF16 ? 7 : d == DType::F16 ? 10 : 23;
  uint32_t bits = codecs::narrow_f32(f32_bits(m), d);  // m is exact in d
  bits = (bits + (1u << (mant - 2))) & ~((1u << mant) - 1);
  const float p = d == DType::F32   ? f32_from_bits(bits)
                  : d == DType::F16 ? f32_from_bits(codecs::f16_to_f32(static_cast<uint16_t>(bits)))
                                    : f32_from_bits(bits << 16);
  // 127 + floor(log2(p)) - offset, offset = floor(log2(type max)): 8 (E4M3 448), 2 (E2M1 6).
  // Exact in d (integers of magnitude < 256); p = 0 gives -inf, p = inf gives inf.
  const int offset = num_bits == 8 ? 8 : 2;
  float e;
  if (p == 0.f) e = -INFINITY;
  else if (std::isinf(p)) e = INFINITY;
  else e = static_cast<float>(127 + std::ilogb(p) - offset);
  e = std::nearbyint(clampf(e, 0.f, 255.f));
  const float scale = round_to(d, std::ldexp(1.f, static_cast<int>(e) - 127));  // 2^128 -> inf
  return scale == 0.f ? 1.f : scale;
}
}  // namespace

Shape scale_shape(const QuantArgs& a, uint64_t rows, uint64_t cols) {
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

uint64_t scale_index(const QuantArgs& a, uint64_t cols, uint64_t r, uint64_t c) noexcept {
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

std::pair<float, float> quant_range(const QuantArgs& a) noexcept {
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

QParams compute_qparams(const float* w, uint64_t rows, uint64_t cols, DType d, const QuantArgs& a, ScaleForm form,
                        std::optional<float> global_scale) {
  QParams p;
  p.form = form;
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
    num_threads(static_cast <int>(core::team(core::team_size())))
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
  const bool fp8_scale = form == ScaleForm::e4m3_global;
  p.scale.resize(n);
  if (!a.symmetric) p.zero_point.resize(n);
  if (a.strategy == QuantStrategy::tensor_group) p.global_scale = global_scale.value_or(1.f);
  for (uint64_t i = 0; i < n; ++i) {
    float scale, zp = 0.f;
    if (form == ScaleForm::e8m0) {  // symmetric by construction
      scale = mx_scale(std::max(std::fabs(lo[i]), std::fabs(hi[i])), d, a.num_bits);
    } else if (a.symmetric) {
      const float mvp = std::max(std::fabs(lo[i]), std::fabs(hi[i]));
      scale = round_to(d, mvp / half_range);
    } else {
      scale = round_to(d, round_to(d, hi[i] - lo[i]) / range);
      // bit_min - min/scale: a 0-dim fp32 bit_min with a D tensor stays in D. For an all-zero
      // group min/scale is 0/0 = NaN, which the int8 cast below turns into 0.
      zp = clampf(round_to(d, qmin - round_to(d, lo[i] / scale)), qmin, qmax);
    }
    if (a.strategy == QuantStrategy::tensor_group) scale = p.global_scale * scale;  // fp32 [1] * D
    if (fp8_scale) scale = codecs::e4m3_to_f32(f32_to_e4m3(clampf(scale, -448.f, 448.f)));
    if (scale == 0.f) scale = fp8_scale ? 0.125f : dtype_eps(d);  // (e8m0: never 0, see mx_scale)
    p.scale[i] = scale;
    if (!a.symmetric) p.zero_point[i] = static_cast<float>(round_to_int8(zp));
  }
  return p;
}

void quantize(const float* w, uint64_t rows, uint64_t cols, DType d, const QuantArgs& a, const QParams& p,
              uint8_t* out) {
  const std::pair<float, float> qrange =
      quant_range(a);  // (no structured binding: clang 14 cannot capture one in OpenMP regions)
  const float qmin = qrange.first, qmax = qrange.second;
  const bool fp4 = a.type == QuantType::float_ && a.num_bits == 4;
  const bool fp8 = a.type == QuantType::float_ && a.num_bits == 8;
  const bool global = p.form == ScaleForm::e4m3_global;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team(core::team_size())))
  for (int64_t rr = 0; rr < static_cast<int64_t>(rows); ++rr) {
    const uint64_t r = static_cast<uint64_t>(rr);
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = scale_index(a, cols, r, c);
      const float x = w[r * cols + c];
      if (fp4 && !global) {
        // MXFP4PackedCompressor (an NVFP4PackedCompressor without a global scale): quantize(x,
        // scale) divides in D, no zero point.
        out[r * cols + c] = codecs::f32_to_e2m1(clampf(round_to(d, x / p.scale[i]), qmin, qmax));
        continue;
      }
      if (fp4) {
        // NVFP4PackedCompressor: quantize(x, scale_D, global_scale): scale / global_scale and
        // x / scale promote to fp32; no zero point for symmetric schemes.
        const float s = p.scale[i] / p.global_scale;
        out[r * cols + c] = codecs::f32_to_e2m1(clampf(x / s, qmin, qmax));
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

DType dequantized_dtype(ScaleForm form, DType d) noexcept { return form == ScaleForm::dtype ? d : DType::BF16; }

void dequantize(const uint8_t* codes, uint64_t rows, uint64_t cols, DType d, const QuantArgs& a, const QParams& p,
                float* out) {
  const bool fp4 = a.type == QuantType::float_ && a.num_bits == 4;
  const bool fp8 = a.type == QuantType::float_ && a.num_bits == 8;
  const auto element = [](float x, float scale, bool has_zp, float zp, DType s) {
    return f32_from_bits(codecs::dequant_element(x, scale, has_zp, zp, /*exact_sub=*/false, s, DType::F32));
  };
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin) \
    num_threads(static_cast <int>(core::team(core::team_size())))
  for (int64_t rr = 0; rr < static_cast<int64_t>(rows); ++rr) {
    const uint64_t r = static_cast<uint64_t>(rr);
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = scale_index(a, cols, r, c);
      const uint8_t q = codes[r * cols + c];
      // The decoders' arithmetic (codecs/element.hpp): the value times its scale, rounded to S;
      // INT codes subtract the zero point first, rounded to S as the library's torch op does.
      if (fp4 && p.form == ScaleForm::e4m3_global)  // bf16(fp32(x) * (fp32(scale_bf16) / global_scale))
        out[r * cols + c] = element(codecs::e2m1_to_f32(q), p.scale[i] / p.global_scale, false, 0.f, DType::BF16);
      else if (fp4)  // MX: bf16(x * 2^k), the scale decompress_mx_scale gives in bf16 (exact: a power of two)
        out[r * cols + c] = element(codecs::e2m1_to_f32(q), p.scale[i], false, 0.f, DType::BF16);
      else if (fp8)
        out[r * cols + c] =
            element(codecs::e4m3_to_f32(q), p.scale[i], false, 0.f, p.form == ScaleForm::e8m0 ? DType::BF16 : d);
      else
        out[r * cols + c] = element(static_cast<float>(static_cast<int8_t>(q)), p.scale[i], true,
                                    a.symmetric ? 0.f : p.zero_point[i], d);
    }
  }
}

}  // namespace ctstream::writer
