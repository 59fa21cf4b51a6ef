// writer — pure quantize / sparsify / pack kernels of `ctstream compress` (no file I/O).
//
// Every function reproduces, bit for bit, what the Python reference computes for the same input:
//   qparams   llm-compressor's min-max observer (amin/amax over the strategy's reduction, in the
//             weight's dtype; observers/helpers.py `flatten_for_calibration`, min_max.py) followed
//             by compressed-tensors 0.20.0 `calculate_qparams` / `generate_gparam`
//             (ct20: quantization/utils/helpers.py)
//   quantize  ct20: quantization/lifecycle/forward.py `_quantize` (CPU path), reached from the
//             compressors' `compress` classmethods
//   packing   ct20: compressors/pack_quantized/helpers.py `pack_to_int32`,
//             compressors/nvfp4/helpers.py `pack_fp4_to_uint8`
//   sparsity  ct12 (0.12.2): compressors/sparse_compressors/sparse_bitmask.py `bitmask_compress`,
//             sparse_24_bitmask.py `get_24_bytemasks` / `sparse24_bitmask_compress`,
//             utils/helpers.py `pack_bitmasks`
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

/// x rounded to dtype d (F32, F16 or BF16; RNE, as torch's `.to(d)`), returned as f32.
float round_to(DType d, float x) noexcept;

/// float8_e4m3fn encoding of x, round-to-nearest-even, as c10 `fp8e4m3fn_from_fp32_value`
/// (torch `.to(torch.float8_e4m3fn)`): no saturation (|x| >= 464 gives the NaN code 0x7F|sign).
uint8_t f32_to_e4m3(float x) noexcept;

/// The weight quantization arguments (compressed-tensors `QuantizationArgs` of a scheme).
struct WeightArgs {
  QuantType type = QuantType::int_;
  unsigned num_bits = 4;
  QuantStrategy strategy = QuantStrategy::group;  ///< tensor, channel, group, block, tensor_group
  bool symmetric = true;
  uint64_t group_size = 128;                    ///< group / tensor_group
  uint64_t block_rows = 128, block_cols = 128;  ///< block
  /// FLOAT 4-bit with a float8 scale (nvfp4): `scale_dtype = torch.float8_e4m3fn`.
  bool fp8_scale = false;
};

/// Shape of weight_scale (and of an unpacked zero point) for a [rows, cols] weight:
/// tensor [1], channel [rows, 1], group [rows, cols/gs], block [ceil(rows/bh), ceil(cols/bw)].
Shape scale_shape(const WeightArgs& a, uint64_t rows, uint64_t cols);
/// Index of the scale that element (r, c) uses.
uint64_t scale_index(const WeightArgs& a, uint64_t cols, uint64_t r, uint64_t c) noexcept;
/// Representable range of the quantized type [q_min, q_max] (ct20 `calculate_range`).
std::pair<float, float> quant_range(const WeightArgs& a) noexcept;

struct QParams {
  Shape shape;                    ///< scale_shape()
  std::vector<float> scale;       ///< values exact in D (nvfp4: exact float8 e4m3 values)
  std::vector<float> zero_point;  ///< asymmetric only: integers in the quantized range
  float global_scale = 0.f;       ///< tensor_group (nvfp4) only, fp32
};

/// {min, max} of n values (plain comparisons; the caller rejects NaN beforehand).
std::pair<float, float> min_max(const float* w, uint64_t n) noexcept;

/// compressed-tensors `generate_gparam(min, max)` for nvfp4 in dtype d: 448*6 / max(|min|,|max|),
/// computed as torch does `python_scalar / tensor` (reciprocal, then multiply, each rounded to d),
/// tiny-clamped, NaN/Inf -> 1.0, returned as fp32.
float nvfp4_global_scale(float tensor_min, float tensor_max, DType d) noexcept;

/// Min-max observer + `calculate_qparams` for a row-major [rows, cols] weight of dtype d.
/// `global_scale` is required for tensor_group. Throws nothing; the caller validates shapes.
QParams compute_qparams(const float* w, uint64_t rows, uint64_t cols, DType d, const WeightArgs& a,
                        std::optional<float> global_scale = std::nullopt);

/// `_quantize` of every element, one code per element in `out`:
///   INT      int8 value in [q_min, q_max] (two's complement byte)
///   FLOAT 8  float8_e4m3fn byte
///   FLOAT 4  E2M1 nibble (sign << 3 | magnitude index), as `pack_fp4_to_uint8` maps it
void quantize(const float* w, uint64_t rows, uint64_t cols, DType d, const WeightArgs& a, const QParams& p,
              uint8_t* out);

/// dtype the library's decompression returns: D, except nvfp4 -> BF16.
DType dequantized_dtype(const WeightArgs& a, DType d) noexcept;
/// The library's decompression of `codes` (ct20 `_dequantize`; nvfp4 as NVFP4PackedCompressor.
/// decompress): out[i] is exact in dequantized_dtype().
void dequantize(const uint8_t* codes, uint64_t rows, uint64_t cols, DType d, const WeightArgs& a, const QParams& p,
                float* out);

/// `pack_to_int32(q, bits)` (packed_dim=1): each row a little-endian bit stream of
/// u = q + 2^(bits-1), element i at bits [i*bits, (i+1)*bits); [rows, ceil(cols*bits/32)] words.
std::vector<int32_t> pack_int32_rows(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits);
/// `pack_to_int32(zp, bits, packed_dim=0)`: each column of [rows, cols] packed along the rows;
/// result [ceil(rows*bits/32), cols].
std::vector<int32_t> pack_int32_cols(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits);
/// `pack_fp4_to_uint8`: byte k = nibble[2k] | nibble[2k+1] << 4 (n even).
void pack_fp4(const uint8_t* nibbles, uint64_t n, uint8_t* out) noexcept;

// ---- sparsity (0.12.2 compressors); `data` holds elements of dtype d (F32, F16 or BF16) ----

/// Elements that `tensor != 0` keeps (NaN counts, -0.0 does not), over n elements.
uint64_t count_nonzero(const void* data, uint64_t n, DType d) noexcept;
/// sparse-bitmask: `values` receives the non-zero elements in row-major order (nnz * elem bytes),
/// `bitmask` [rows, ceil(cols/8)] LSB-first, `row_offsets` [rows] the exclusive prefix sum.
void bitmask_compress(const void* data, uint64_t rows, uint64_t cols, DType d, void* values, uint8_t* bitmask,
                      int64_t* row_offsets);
/// `get_24_bytemasks`: keep[i] for every element, the top 2 of |x| in each consecutive group of 4
/// of the flattened tensor, ties broken as torch's CPU topk does (std::nth_element on
/// (|x|, index) pairs with its comparator). n % 4 == 0. @return number of groups in which a
/// non-zero element was dropped (0 when the tensor already is 2:4 sparse).
uint64_t mask_24(const void* data, uint64_t n, DType d, uint8_t* keep);
/// sparse-24-bitmask from a mask: `values` [rows, cols/2] (flattened kept elements),
/// `bitmask` [rows, ceil(cols/8)].
void sparse24_compress(const void* data, uint64_t rows, uint64_t cols, DType d, const uint8_t* keep, void* values,
                       uint8_t* bitmask);

}  // namespace ctstream::writer
