// ctstream — metadata of one logical tensor, as the iterator yields it.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/dtype.hpp"

namespace ctstream {

using Shape = std::vector<uint64_t>;
/// A shape as messages and listings print it: "[4096, 11008]" ("[]" for a scalar).
std::string shape_str(const Shape& s);

/// How a logical tensor is stored (compressed-tensors `CompressionFormat` names).
enum class Format : uint8_t {
  dense,                 ///< stored as is, one safetensors entry
  sparse_bitmask,        ///< values + LSB-first bitmask + shape + row_offsets (0.12 line)
  sparse_24_bitmask,     ///< 2:4 structured sparsity, values + bitmask + shape (0.12 line)
  pack_quantized,        ///< int1..8 packed into int32 + scales (+ packed zero points)
  naive_quantized,       ///< int8 / fp8 values unpacked + scales
  int_quantized,         ///< same layout as naive_quantized (int weights with activations)
  float_quantized,       ///< same layout as naive_quantized (fp8 weights with activations)
  nvfp4_pack_quantized,  ///< fp4 E2M1 nibbles + fp8 group-16 scales + fp32 global scale
  mxfp4_pack_quantized,  ///< fp4 E2M1 nibbles + E8M0 (uint8) group-32 scales
  mxfp6_pack_quantized,  ///< fp6 E2M3 codes (4 per 3 bytes) + E8M0 (uint8) group-32 scales
  mxfp8_quantized,       ///< fp8 E4M3 values + E8M0 group-32 scales
  marlin_24,             ///< Marlin 2:4 tiles: recognised and passed through packed only
  /// Not a compressed-tensors format: a module decomposed by ptdeco into two factors
  /// (format/low_rank.hpp), presented as the original weight B @ A; TensorInfo::factors holds them.
  low_rank,
};
/// compressed-tensors spelling ("pack-quantized", ...); "low-rank" for Format::low_rank.
std::string_view format_name(Format f) noexcept;
/// Parses a format name in any spelling the library's registry accepts ('_', ' ' or '-', any
/// case; "dense_sparsity" = dense); nullopt for an unknown one or "mixed-precision".
std::optional<Format> format_from_name(std::string_view name) noexcept;

enum class QuantType : uint8_t { int_, float_ };
enum class QuantStrategy : uint8_t { tensor, channel, group, block, tensor_group, token, attn_head };
std::string_view strategy_name(QuantStrategy s) noexcept;
/// Parses a strategy spelling ("group", "tensor_group", ...); nullopt for an unknown one.
std::optional<QuantStrategy> strategy_from_name(std::string_view name) noexcept;

/// Weight quantization arguments of a scheme (compressed-tensors `QuantizationArgs`).
struct QuantArgs {
  unsigned num_bits = 8;
  QuantType type = QuantType::int_;
  QuantStrategy strategy = QuantStrategy::tensor;
  bool symmetric = true;
  uint64_t group_size = 0;                  ///< group / tensor_group strategies
  uint64_t block_rows = 0, block_cols = 0;  ///< block strategy
  bool actorder = false;                    ///< weight_g_idx present (0.12 line, group act-order)
  /// The scheme's `actorder` is group act-order ("group", its alias "dynamic", or 0.12's `true`):
  /// the only one for which compressed-tensors stores a weight_g_idx.
  bool actorder_group = false;
  /// pack-quantized 3/5/6/7-bit codes use the compressed-tensors <= 0.17 layout (32/b codes per
  /// int32 word, high bits unused) instead of the dense 0.18+ layout.
  bool legacy_packing = false;

  friend bool operator==(const QuantArgs&, const QuantArgs&) = default;
};

/// One safetensors entry that is part of a logical tensor.
struct TensorPart {
  std::string role;  ///< local name: "weight", "weight_packed", "weight_scale", "bitmask", ...
  std::string key;   ///< full key in the file
  DType dtype = DType::U8;
  Shape shape;
  uint32_t file = 0;    ///< index into Checkpoint::files()
  uint64_t offset = 0;  ///< absolute byte offset of the data in that file
  uint64_t nbytes = 0;

  friend bool operator==(const TensorPart&, const TensorPart&) = default;
};

/// Metadata of one logical tensor: cheap to copy around, holds no data.
struct TensorInfo {
  std::string name;          ///< logical name, e.g. "model.layers.0.mlp.down_proj.weight"
  Shape shape;               ///< logical (decoded) shape
  DType dtype = DType::F32;  ///< dtype of the decoded tensor as the reference library returns it
  Format format = Format::dense;
  bool quantized = false;  ///< `quant` is meaningful
  QuantArgs quant;
  std::vector<TensorPart> parts;  ///< stored entries, parts[0] is the main payload
  /// Format::low_rank only: the stored factors {A = `m.0.weight` [r, in(, kh, kw)],
  /// B = `m.1.weight` [out, r(, 1, 1)]}, each dense or compressed; `parts` is theirs concatenated.
  std::vector<TensorInfo> factors;

  /// Number of elements of the logical tensor (checked at open, never overflows).
  uint64_t numel() const noexcept;
  /// Bytes that decode_into writes for this tensor in `out` dtype (sub-byte dtypes round up).
  uint64_t decoded_bytes(DType out) const noexcept;
  /// Bytes stored on disk over all parts.
  uint64_t stored_bytes() const noexcept;
  /// The part with this role, or nullptr.
  const TensorPart* part(std::string_view role) const noexcept;

  /// Field by field. A Checkpoint decodes a copy of one of its tensors only while the copy equals
  /// it: an edited copy, or one of another checkpoint, is Error{invalid_argument}.
  friend bool operator==(const TensorInfo&, const TensorInfo&) = default;
};

/// The dtype a tensor decodes to when `requested` is asked for: compressed tensors and every
/// floating tensor convert to it; integer and bool tensors always come back as stored;
/// nullopt gives the natural dtype (TensorInfo::dtype). The rule decompress --dtype, Stream and
/// Python dtype= apply. Checkpoint::decode_into and the C ABI take an explicit output dtype and
/// refuse (Error{unsupported}) an integer or bool tensor asked for in another dtype: call
/// output_dtype() first.
DType output_dtype(const TensorInfo& t, std::optional<DType> requested) noexcept;

/// A half-open range [start, stop) along one dimension, for tensor-parallel shards.
struct Slice {
  unsigned dim = 0;
  uint64_t start = 0;
  uint64_t stop = std::numeric_limits<uint64_t>::max();  ///< clamped to the dimension size
};

}  // namespace ctstream
