// cuda — what the host side (api.cpp) hands the decode kernels (kernels.cu): device pointers to
// the staged stored parts and the geometry the format table gave, as plain structs (no CUDA
// types, so the C++ side needs no CUDA headers for them). Every kernel writes output element o of
// the (possibly sliced) tensor; SliceMap turns o into the logical element it decodes.
#pragma once
#include <cstdint>

#include "ctstream/dtype.hpp"
#include "format/codes.hpp"

namespace ctstream::cuda::detail {

/// The output, viewed as [outer, len, inner], is the slice [start, start + len) of dimension
/// `dim` of the logical tensor viewed as [outer, dim, inner] (reader::SliceGeom).
struct SliceMap {
  uint64_t outer = 1, dim = 1, inner = 1, start = 0, len = 1;
  uint64_t out_elems() const { return outer * len * inner; }
};

/// A dense tensor: element copy (src == out) or conversion of a float dtype to F32 / F16 / BF16.
struct DenseJob {
  const uint8_t* in = nullptr;  ///< the stored tensor, from element 0
  DType src = DType::F32, out = DType::F32;
  SliceMap map;
};

/// How a quantized / sparse tensor's values are stored (the CPU decoder of each in
/// reader/decode_compressed.cpp).
/// How the values are stored: the format table's Codes (packed_int, byte, e2m1, e2m3, sparse).
using ValueKind = format::Codes;

struct QuantJob {
  ValueKind kind = ValueKind::byte;
  uint64_t rows = 1, cols = 1;  ///< the logical tensor as [rows, cols]
  const uint8_t* values = nullptr;
  DType value_dtype = DType::I8;  ///< byte / sparse kinds
  uint64_t row_bytes = 0;         ///< packed_int: bytes per row
  unsigned bits = 4;              ///< packed_int
  bool dense_pack = true;         ///< packed_int: the 0.18+ layout (else <= 0.17)

  // sparse: the mask ([rows, ceil(cols/8)]) and per-row starts of the values (filled on device)
  const uint8_t* mask = nullptr;
  uint64_t* row_start = nullptr;    ///< rows + 1 entries (device scratch)
  uint32_t* byte_offset = nullptr;  ///< rows * ceil(cols/8) entries (device scratch)

  // quantization (quantized = false: sparse values copied / converted as stored)
  bool quantized = false;
  const uint8_t* scale = nullptr;
  DType scale_dtype = DType::BF16;
  bool e8m0 = false;  ///< U8 / F8_E8M0 scales are E8M0 exponents
  uint64_t scale_cols = 1, group_size = 1, row_div = 1;
  const uint8_t* global_scale = nullptr;     ///< one F32 divisor of every scale (nvfp4), or null
  const uint8_t* zp = nullptr;               ///< zero points or null
  DType zp_dtype = DType::I32;               ///< I32 = packed along rows, else one per scale entry
  uint64_t zp_slice_rows = 1, zp_words = 0;  ///< I32: format::ZeroPointPacking (per-slice packing)
  const int32_t* gidx = nullptr;             ///< act-order scale column per weight column, or null
  DType natural = DType::BF16;               ///< S
  bool exact_sub = false;                    ///< integer codes and zero points

  DType out = DType::BF16;  ///< D
  SliceMap map;
};

/// Launch on `stream` (a cudaStream_t); return a CUDA error code (0 = cudaSuccess) and the
/// failing call in `what`.
int launch_dense(const DenseJob& job, void* out, void* stream, const char** what) noexcept;
int launch_quant(const QuantJob& job, void* out, void* stream, const char** what) noexcept;

}  // namespace ctstream::cuda::detail
