// writer — the quantizers of `ctstream compress` (no file I/O): observers, scales, codes. The
// byte-level encoders they feed (fp8 / fp4 codes, int32 packing, bitmask sparsity) are codecs
// (codecs/encode.hpp), beside the decoders they invert.
//
// Every function reproduces, bit for bit, what the Python reference computes for the same input:
//   qparams   llm-compressor's min-max observer (amin/amax over the strategy's reduction, in the
//             weight's dtype; observers/helpers.py `flatten_for_calibration`, min_max.py) followed
//             by compressed-tensors 0.20.0 `calculate_qparams` / `generate_gparam`
//             (ct20: quantization/utils/helpers.py)
//   quantize  ct20: quantization/lifecycle/forward.py `_quantize` (CPU path), reached from the
//             compressors' `compress` classmethods
//
// Arithmetic model (checked against torch 2.15 CPU, see tests/python/test_writer_crosscheck.py):
// a torch op on bf16/fp16 tensors computes in fp32 and rounds the result to the tensor dtype
// (round-to-nearest-even) — so every intermediate below is rounded to the weight dtype `D` after
// each op, exactly where torch materialises a D tensor. Mixed ops promote to fp32 (nvfp4 scales).
// Weight values are passed as f32 (every BF16 / F16 value is exact in f32).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "ctstream/dtype.hpp"
#include "ctstream/tensor.hpp"

namespace ctstream::writer {

/// x rounded to dtype d (F32, F16 or BF16; RNE, as torch's `.to(d)`), returned as f32
/// (codecs::round_to on f32 values).
float round_to(DType d, float x) noexcept;

/// The weights' quantization arguments are the public QuantArgs (the scheme a checkpoint's
/// config declares): type, bits, strategy, symmetry, group / block size. Besides them the format
/// decides how scales are stored:
enum class ScaleForm {
  dtype,        ///< in the weight's dtype
  e4m3_global,  ///< nvfp4: float8 e4m3 values under an fp32 global scale (`scale_dtype = torch.float8_e4m3fn`)
  e8m0,         ///< mxfp4 / mxfp8: E8M0 exponents, uint8 127 + log2(scale) (`scale_dtype = torch.uint8`)
};
ScaleForm scale_form(Format f) noexcept;

/// Shape of weight_scale (and of an unpacked zero point) for a [rows, cols] weight:
/// tensor [1], channel [rows, 1], group [rows, cols/gs], block [ceil(rows/bh), ceil(cols/bw)].
Shape scale_shape(const QuantArgs& a, uint64_t rows, uint64_t cols);
/// Index of the scale that element (r, c) uses.
uint64_t scale_index(const QuantArgs& a, uint64_t cols, uint64_t r, uint64_t c) noexcept;
/// Representable range of the quantized type [q_min, q_max] (ct20 `calculate_range`).
std::pair<float, float> quant_range(const QuantArgs& a) noexcept;

struct QParams {
  Shape shape;                    ///< scale_shape()
  std::vector<float> scale;       ///< values exact in D (nvfp4: exact float8 e4m3 values)
  std::vector<float> zero_point;  ///< asymmetric only: integers in the quantized range
  float global_scale = 0.f;       ///< tensor_group (nvfp4) only, fp32
  ScaleForm form = ScaleForm::dtype;
};

/// {min, max} of n values (plain comparisons; the caller rejects NaN beforehand).
std::pair<float, float> min_max(const float* w, uint64_t n) noexcept;

/// compressed-tensors `generate_gparam(min, max)` for nvfp4 in dtype d: 448*6 / max(|min|,|max|),
/// computed as torch does `python_scalar / tensor` (reciprocal, then multiply, each rounded to d),
/// tiny-clamped, NaN/Inf -> 1.0, returned as fp32.
float nvfp4_global_scale(float tensor_min, float tensor_max, DType d) noexcept;

/// Min-max observer + `calculate_qparams` for a row-major [rows, cols] weight of dtype d.
/// `global_scale` is required for tensor_group. Throws nothing; the caller validates shapes.
/// e8m0: ct20 mxfp_utils.py `generate_mx_scales` (a power of two from the group's largest
/// magnitude) in d, then the uint8 round trip and the zero-scale replacement of calculate_qparams.
QParams compute_qparams(const float* w, uint64_t rows, uint64_t cols, DType d, const QuantArgs& a, ScaleForm form,
                        std::optional<float> global_scale = std::nullopt);
/// The E8M0 byte of an e8m0 QParams scale (a power of two): 127 + log2(scale).
uint8_t e8m0_byte(float scale) noexcept;

/// `_quantize` of every element, one code per element in `out`:
///   INT      int8 value in [q_min, q_max] (two's complement byte)
///   FLOAT 8  float8_e4m3fn byte
///   FLOAT 4  E2M1 nibble (sign << 3 | magnitude index), as `pack_fp4_to_uint8` maps it
void quantize(const float* w, uint64_t rows, uint64_t cols, DType d, const QuantArgs& a, const QParams& p,
              uint8_t* out);

/// dtype the library's decompression returns: D, except nvfp4 and the MX formats -> BF16.
DType dequantized_dtype(ScaleForm form, DType d) noexcept;
/// The library's decompression of `codes` (ct20 `_dequantize`; nvfp4 as NVFP4PackedCompressor.
/// decompress, MX with the bf16 scales decompress_mx_scale gives): out[i] is exact in
/// dequantized_dtype().
void dequantize(const uint8_t* codes, uint64_t rows, uint64_t cols, DType d, const QuantArgs& a, const QParams& p,
                float* out);

}  // namespace ctstream::writer
