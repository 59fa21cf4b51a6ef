// codecs — the encoders: f32 values and quantized codes to the stored bytes of each format, the
// inverse of the decoders beside them (element.hpp, bitmask.hpp, dequant.hpp). Pure byte-level
// kernels: spans in, spans out, no files, no format table; the writer (src/writer/) decides what
// to encode and calls these.
//
// Each one reproduces, bit for bit, what the Python reference computes:
//   f32_to_e4m3   c10/util/Float8_e4m3fn.h `fp8e4m3fn_from_fp32_value` (torch `.to(float8_e4m3fn)`)
//   f32_to_e2m1   ct20: quantization/utils/fp4_utils.py `cast_to_fp4` (CPU path) + the index
//                 mapping of compressors/nvfp4/helpers.py `pack_fp4_to_uint8`
//   packing       ct20: compressors/pack_quantized/helpers.py `pack_to_int32`,
//                 compressors/nvfp4/helpers.py `pack_fp4_to_uint8`
//   sparsity      ct12 (0.12.2): compressors/sparse_compressors/sparse_bitmask.py `bitmask_compress`,
//                 sparse_24_bitmask.py `get_24_bytemasks` / `sparse24_bitmask_compress`,
//                 utils/helpers.py `pack_bitmasks` (the layout codecs/bitmask.hpp expands)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctstream/dtype.hpp"

namespace ctstream::codecs {

// ---- floats ----------------------------------------------------------------------------------------

/// float8_e4m3fn encoding of x, round-to-nearest-even: no saturation (|x| >= 464 gives the NaN
/// code 0x7F|sign). Inverse of e4m3_to_f32 on every finite e4m3 value.
uint8_t f32_to_e4m3(float x) noexcept;

/// FP4 E2M1 nibble (sign << 3 | magnitude index) of x: magnitude thresholds with ties to the even
/// E2M1 value; the sign bit is set for every negative input, including those that round to zero
/// (torch.sign(x) * 0.0 = -0.0, and the packer reads torch.signbit). x is already clamped.
uint8_t f32_to_e2m1(float x) noexcept;

/// f32 values (exact in d) -> the stored little-endian bytes of dtype d (F32, F16 or BF16; F16 and
/// BF16 through one round-to-nearest-even step, codecs/element.hpp).
void store_floats(const float* v, uint64_t n, DType d, std::byte* out) noexcept;

// ---- packing -----------------------------------------------------------------------------------------

/// `pack_to_int32(q, bits)` (packed_dim=1): each row a little-endian bit stream of
/// u = q + 2^(bits-1), element i at bits [i*bits, (i+1)*bits); [rows, ceil(cols*bits/32)] words.
/// The dense 0.18+ layout that int_code() reads.
std::vector<int32_t> pack_int32_rows(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits);
/// `pack_to_int32(zp, bits, packed_dim=0)`: each column of [rows, cols] packed along the rows;
/// result [ceil(rows*bits/32), cols].
std::vector<int32_t> pack_int32_cols(const int8_t* q, uint64_t rows, uint64_t cols, unsigned bits);
/// `pack_fp4_to_uint8`: byte k = nibble[2k] | nibble[2k+1] << 4 (n even).
void pack_fp4(const uint8_t* nibbles, uint64_t n, uint8_t* out) noexcept;

// ---- sparsity; `data` holds elements of dtype d (F32, F16 or BF16) -----------------------------------

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

}  // namespace ctstream::codecs
