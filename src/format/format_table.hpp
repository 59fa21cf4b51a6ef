// format — the one description of each compressed-tensors format's stored layout: the parts
// (roles) a logical tensor is made of, the dtypes each may have, and each part's shape as a
// function of the logical shape and the quantization arguments (scale / zero-point / g_idx
// geometry included).
//
// Everyone reads it, nobody re-derives it:
//   * grouping (grouping.cpp) validates every part of every tensor against it at open, so a
//     decoder only ever sees parts whose byte sizes agree with the logical shape;
//   * the decoders (reader/decode_compressed.cpp) take their geometry from `geometry()`;
//   * the writer (src/writer/) plans its output through `plan_parts()` (names, dtypes, shapes,
//     order) and checks the plan with the reader's own validation before writing a byte.
// Adding a format = one table in format_table.cpp + one kernel.
//
// Sources (compressed-tensors 0.20.0 unless marked 0.12.2): compressors/pack_quantized/base.py
// (`compression_param_info`), compressors/naive_quantized/base.py, compressors/nvfp4/base.py,
// compressors/mx_utils.py, quantization/lifecycle/initialize.py (`initialize_qparams`: scale
// shapes); 0.12.2 compressors/sparse_compressors/{sparse_bitmask,sparse_24_bitmask}.py and
// compressors/sparse_quantized_compressors/marlin_24.py. Layout notes with line-level citations:
// tests/fixtures/gen/DECODE_NOTES.md.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/dtype.hpp"
#include "ctstream/tensor.hpp"
#include "format/codes.hpp"

namespace ctstream::format {

/// The local names of stored parts (the key is `<module>.<role>`).
enum class Role : uint8_t {
  weight,         ///< naive / int / float / mxfp8 values (I8, F8_E4M3)
  weight_packed,  ///< pack-quantized I32 words; fp4 / fp6 bytes; marlin-24 tiles
  weight_scale,
  weight_zero_point,
  weight_global_scale,  ///< nvfp4 (a divisor of the scale)
  weight_g_idx,         ///< 0.12 act-order: scale column of each weight column
  weight_shape,         ///< pack-quantized / marlin-24 logical shape (I64 / I32 vector)
  compressed,           ///< sparse values
  bitmask,              ///< sparse mask, LSB-first packbits per row
  shape,                ///< sparse logical shape
  row_offsets,          ///< sparse-bitmask per-row start of the values
  scale_packed,         ///< marlin-24 scales
  meta,                 ///< marlin-24 2:4 metadata
};
inline constexpr Role kAllRoles[] = {
    Role::weight,       Role::weight_packed, Role::weight_scale, Role::weight_zero_point, Role::weight_global_scale,
    Role::weight_g_idx, Role::weight_shape,  Role::compressed,   Role::bitmask,           Role::shape,
    Role::row_offsets,  Role::scale_packed,  Role::meta};
std::string_view role_name(Role r) noexcept;
std::optional<Role> role_from_name(std::string_view name) noexcept;

/// A set of dtypes (bit i = DType i).
using DTypeSet = uint32_t;
constexpr DTypeSet dtypes(std::initializer_list<DType> ds) {
  DTypeSet s = 0;
  for (DType d : ds) s |= DTypeSet{1} << static_cast<unsigned>(d);
  return s;
}
constexpr bool contains(DTypeSet s, DType d) { return (s >> static_cast<unsigned>(d)) & 1u; }
/// "F16, BF16 or F32"
std::string dtype_list(DTypeSet s);

/// How a part's shape follows from the tensor's geometry.
enum class ShapeRule : uint8_t {
  logical,        ///< exactly the logical shape
  packed_rows,    ///< the logical shape with the last dim replaced by Geometry::row_units
  scale,          ///< Geometry::scale.entries() elements; with >= 2 dims, the last is scale.cols
  zero_point,     ///< I32 (group / channel): packed along rows one 2-D slice at a time,
                  ///< [*shape[:-2], zp.words, scale.cols] (Geometry::zp); any other dtype: as `scale`
  scalar,         ///< one element
  shape_vector,   ///< ndim integers ([ndim], or [ndim, 1] as sparse-24 writes it)
  cols_vector,    ///< [cols]
  rows_vector,    ///< [rows]
  bitmask,        ///< [rows, ceil(cols / 8)]
  sparse_values,  ///< 1-D, at most rows * cols values (the exact count is the mask's popcount)
  half_cols,      ///< [rows, cols / 2] (2:4 values)
  marlin_packed,  ///< [cols / 32, rows * bits / 2] (Marlin 16x16 tiles, 32/bits codes per word)
  marlin_scale,   ///< [scale.cols, rows]
  marlin_meta,    ///< [cols / 32, 2 * rows]
};

/// One row of a format's table. Rows are listed in the order the library writes the parts.
struct PartRule {
  Role role;
  bool required;
  DTypeSet dtypes;
  ShapeRule shape;
};

/// Where a tensor's logical shape comes from (grouping reads it; the writer stores it so).
enum class ShapeFrom : uint8_t {
  stored,        ///< dense / low-rank: the entry's own shape
  main_part,     ///< the main part's shape (naive / int / float / mxfp8)
  weight_shape,  ///< the weight_shape part (pack-quantized)
  shape_part,    ///< the `shape` part (sparse)
  packed_bytes,  ///< main part [R, W]: [R, W / pack_den * pack_num] (fp4: 2 per byte; fp6: 4 per 3 bytes)
  marlin_tiles,  ///< Marlin tiles [C / 32, R * b / 2] (a weight_shape, when present, must agree)
};

/// The dtype the library's decompression returns (TensorInfo::dtype, the scale dtype S of the
/// dequantization arithmetic).
enum class NaturalDType : uint8_t {
  stored,           ///< dense: as stored
  scale,            ///< the weight_scale's dtype (pack / naive / int / float)
  scale_or_values,  ///< sparse: the scale's when quantized, else the values'
  bf16,             ///< nvfp4/base.py and mx_utils.py decompress to bfloat16
  f16,              ///< marlin-24 scales are fp16
};

/// Quantization arguments a format fixes whatever the config says (nvfp4: group 16, mx: group 32).
struct FixedArgs {
  unsigned num_bits;
  QuantType type;
  QuantStrategy strategy;
  uint64_t group_size;
};

/// Everything a format fixes, in one row: adding a format is one row here and one kernel.
struct FormatFacts {
  std::span<const PartRule> parts;  ///< its stored parts, in the order the library writes them
  Role main;                        ///< the part holding the values (TensorInfo::parts[0])
  Codes codes;                      ///< how the main part holds them
  ShapeFrom shape_from;
  uint8_t pack_num, pack_den;  ///< ShapeFrom::packed_bytes: values per pack_den bytes
  NaturalDType natural;
  uint8_t min_rank, max_rank;  ///< dims a tensor of the format may have (max 0: any)
  bool int_codes;              ///< INT weights of 1..8 bits only (pack-quantized, marlin-24)
  std::optional<FixedArgs> fixed;
};
const FormatFacts& facts(Format f) noexcept;

/// Where the elements of a quantized tensor, viewed as [rows, cols], find their scale entries.
struct ScaleGeometry {
  uint64_t rows = 1;        ///< scale rows
  uint64_t cols = 1;        ///< scale entries per scale row (G)
  uint64_t row_div = 1;     ///< weight rows per scale row (tensor: all of them; block: block rows)
  uint64_t group_size = 1;  ///< weight columns per scale entry (>= 1)
  uint64_t entries() const noexcept { return rows * cols; }
};

/// Where a packed (I32) zero point keeps the zero point of scale row `sr` and column `g`
/// (pack-quantized, group / channel). The library packs it along rows with
/// `pack_to_int32(zp, bits, packed_dim=0)`, which for a weight of more than 2 dims (MoE experts
/// [E, R, C], zero points [E, R, G]) packs each 2-D slice on its own and stacks them
/// (compressed-tensors 0.20.0 compressors/pack_quantized/base.py:105, helpers.py:45-52; unpacked
/// the same way, helpers.py:133-139). So scale row sr lies in slice sr / slice_rows, at code
/// sr % slice_rows of the column stream made of that slice's `words` words of column g, each
/// scale.cols words apart.
struct ZeroPointPacking {
  uint64_t slice_rows = 1;  ///< scale rows per slice (the weight's shape[-2]; rows for 2-D)
  uint64_t words = 0;       ///< I32 words per column of one slice (packed_words(slice_rows))
  /// Byte offset of the first word of column g's stream for scale row sr, and sr's index in it.
  uint64_t column_byte(uint64_t sr, uint64_t g, uint64_t scale_cols) const noexcept {
    return ((sr / slice_rows) * words * scale_cols + g) * 4;
  }
  uint64_t code_index(uint64_t sr) const noexcept { return sr % slice_rows; }
};

/// Everything about a tensor's stored layout that follows from its format, logical shape and
/// quantization arguments. Every product here was overflow-checked when it was built.
struct Geometry {
  Format format = Format::dense;
  Shape shape;        ///< logical shape
  QuantArgs quant;    ///< quantization arguments (quantized formats; fixed ones filled in)
  uint64_t rows = 1;  ///< product of all dims but the last (1 for a 1-D or 0-d tensor)
  uint64_t cols = 1;  ///< last dim (1 for a 0-d tensor)
  uint64_t numel = 1;
  bool quantized = false;
  ScaleGeometry scale;     ///< quantized formats
  uint64_t row_units = 0;  ///< packed formats: last dim of the main part (words or bytes per row)
  uint64_t row_bytes = 0;  ///< packed formats: bytes of one row of the main part
  ZeroPointPacking zp;     ///< pack-quantized group / channel: the packed (I32) zero point
};

/// A reason a layout is refused; empty = fine.
using Why = std::string;

/// The table of a format (empty for `dense`).
std::span<const PartRule> part_rules(Format f) noexcept;
/// The table row of `role` in format `f`, or nullptr when the format has no such part.
const PartRule* part_rule(Format f, Role role) noexcept;

/// Geometry of a tensor of format `f` with logical `shape`, quantized with `q` (nullptr: not
/// quantized, which only sparse formats may be).
/// Refuses (returns nullopt, `why` set) whatever the format cannot hold: group sizes that do not
/// divide the columns, 2:4 on columns not divisible by 4, sizes that overflow, ...
std::optional<Geometry> geometry(Format f, const Shape& shape, const QuantArgs* q, Why& why);

/// The geometry of a tensor the format layer has accepted (never fails for one).
Geometry geometry(const TensorInfo& t);

/// The shape `rule` requires for a part of `dtype`; nullopt when the rule constrains only the
/// element count or the rank (check_part() tells).
std::optional<Shape> exact_shape(ShapeRule rule, DType dtype, const Geometry& g);

/// Checks one stored part (dtype + shape) against its table row.
Why check_part(const PartRule& rule, DType dtype, const Shape& shape, const Geometry& g);

/// One entry the writer emits for a compressed tensor.
struct PlannedPart {
  Role role;
  DType dtype;
  Shape shape;
};
/// What the writer stores for a weight of geometry `g`: parts, dtypes, shapes, in the library's
/// order. `values` = dtype of the scales (quantized formats) or of the sparse values; `nnz` =
/// non-zero count (sparse-bitmask); an asymmetric `g.quant` adds the zero point. Only the formats the writer
/// produces: pack-quantized, int-/float-quantized, nvfp4, sparse-bitmask, sparse-24-bitmask.
std::vector<PlannedPart> plan_parts(const Geometry& g, DType values, uint64_t nnz);

}  // namespace ctstream::format
