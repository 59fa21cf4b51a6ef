#include "format/format_table.hpp"

#include <array>
#include <stdexcept>

#include "core/checked.hpp"
#include "core/packing.hpp"

namespace ctstream::format {
namespace {

using D = DType;
using R = Role;
using S = ShapeRule;

constexpr DTypeSet kFloat = dtypes({D::F16, D::BF16, D::F32});
constexpr DTypeSet kShapeInts = dtypes({D::I64, D::I32});
// E8M0 scales as the library writes them by default: the biased exponent in a uint8 (mx_utils.py
// compress_mx_scale). Not F8_E8M0 (`scale_dtype: float8_e8m0fnu`): grouping.cpp says why.
constexpr DTypeSet kE8M0 = dtypes({D::U8});
// Zero points of unpacked formats: int8 for INT weights, fp8 for FLOAT ones (quant_args.py
// `pytorch_dtype`), or the scale's dtype as some older writers stored them.
constexpr DTypeSet kZeroPoint = dtypes({D::I8, D::F8_E4M3, D::F16, D::BF16, D::F32});
// Sparse values: anything the expand kernels move (1, 2 or 4 bytes per element).
constexpr DTypeSet kSparseValues = dtypes({D::BOOL, D::U8, D::I8, D::F8_E5M2, D::F8_E4M3, D::F8_E8M0, D::F8_E4M3FNUZ,
                                           D::F8_E5M2FNUZ, D::I16, D::U16, D::F16, D::BF16, D::I32, D::U32, D::F32});

// Each table lists the parts in the order the library writes them.
// clang-format off
constexpr PartRule kPack[] = {
    {R::weight_packed, true, dtypes({D::I32}), S::packed_rows},
    {R::weight_scale, true, kFloat, S::scale},
    {R::weight_shape, true, kShapeInts, S::shape_vector},
    {R::weight_zero_point, false, dtypes({D::I32, D::I8}), S::zero_point},
    {R::weight_g_idx, false, dtypes({D::I32}), S::cols_vector},
};
constexpr PartRule kNaive[] = {
    {R::weight, true, dtypes({D::I8, D::F8_E4M3}), S::logical},
    {R::weight_scale, true, kFloat, S::scale},
    {R::weight_zero_point, false, kZeroPoint, S::zero_point},
    // No weight_global_scale: the naive compressor's decompress never reads one (0.20
    // naive_quantized/base.py passes none to dequantize; 0.12 refuses to write one), so a stored
    // one stays a plain tensor, as the library leaves it, instead of dividing the scales.
    // 0.12 act-order: NaiveQuantizationCompressor lists it among its compression params and its
    // decompress_weight hands it to dequantize (0.12.2 quantized_compressors/naive_quantized.py).
    {R::weight_g_idx, false, dtypes({D::I32}), S::cols_vector},
};
constexpr PartRule kMxfp8[] = {
    {R::weight, true, dtypes({D::F8_E4M3}), S::logical},
    {R::weight_scale, true, kE8M0, S::scale},
};
// NVFP4PackedCompressor.decompress (nvfp4/base.py): scale.to(bf16), divided by the global scale
// when one is stored (forward_helpers.py `_dequantize`). F8_E4M3 (the default) and BF16
// (`scale_dtype: bfloat16`) scales reach bf16 exactly; F16 / F32 ones would be rounded first
// (grouping.cpp refuses them). The global scale is required by the config's strategy
// (tensor_group), not by the format: grouping.cpp.
constexpr PartRule kNvfp4[] = {
    {R::weight_packed, true, dtypes({D::U8}), S::packed_rows},
    {R::weight_scale, true, dtypes({D::F8_E4M3, D::BF16}), S::scale},
    {R::weight_global_scale, false, dtypes({D::F32}), S::scalar},
};
// MXFP4PackedCompressor inherits NVFP4's decompress: a stored global scale (FP4 tensor_group with
// groups of 32, which the library stores as mxfp4) divides its scales too.
constexpr PartRule kMxfp4[] = {
    {R::weight_packed, true, dtypes({D::U8}), S::packed_rows},
    {R::weight_scale, true, kE8M0, S::scale},
    {R::weight_global_scale, false, dtypes({D::F32}), S::scalar},
};
// MXFP6PackedCompressor.decompress passes no global scale: a stored one stays a plain tensor.
constexpr PartRule kMxPacked[] = {
    {R::weight_packed, true, dtypes({D::U8}), S::packed_rows},
    {R::weight_scale, true, kE8M0, S::scale},
};
// Sparse parts; weight_scale / weight_zero_point make it sparse-on-quantized (0.12 stacking).
constexpr PartRule kBitmask[] = {
    {R::shape, true, kShapeInts, S::shape_vector},
    {R::compressed, true, kSparseValues, S::sparse_values},
    {R::bitmask, true, dtypes({D::U8}), S::bitmask},
    {R::row_offsets, false, dtypes({D::I64}), S::rows_vector},
    {R::weight_scale, false, kFloat, S::scale},
    {R::weight_zero_point, false, kZeroPoint, S::zero_point},
};
constexpr PartRule kSparse24[] = {
    {R::shape, true, kShapeInts, S::shape_vector},
    {R::compressed, true, kSparseValues, S::half_cols},
    {R::bitmask, true, dtypes({D::U8}), S::bitmask},
    {R::weight_scale, false, kFloat, S::scale},
    {R::weight_zero_point, false, kZeroPoint, S::zero_point},
};
constexpr PartRule kMarlin24[] = {
    {R::weight_packed, true, dtypes({D::I32}), S::marlin_packed},
    {R::scale_packed, true, dtypes({D::F16}), S::marlin_scale},
    {R::meta, true, dtypes({D::I16}), S::marlin_meta},
    {R::weight_shape, false, kShapeInts, S::shape_vector},
};
// clang-format on

uint64_t ceil_div(uint64_t a, uint64_t b) noexcept { return a / b + (a % b != 0); }

using SF = ShapeFrom;
using N = NaturalDType;
using C = Codes;
using QT = QuantType;
using QS = QuantStrategy;
constexpr auto kAny = std::nullopt;
// One row per format: parts, main part, codes, shape source (values per bytes), natural dtype,
// ranks [min, max] (max 0: any), INT 1..8 bits only, fixed arguments. Pack-quantized takes any
// leading dims (MoE experts [E, R, C]: pack_quantized/base.py), naive any rank >= 1 (quantized
// embeddings, 3-D experts: naive_quantized/base.py); the rest are 2-D.
// clang-format off
constexpr FormatFacts kFactsDense   {{},        R::weight,        C::none,       SF::stored,       1, 1, N::stored,          0, 0, false, kAny};
constexpr FormatFacts kFactsBitmask {kBitmask,  R::compressed,    C::sparse,     SF::shape_part,   1, 1, N::scale_or_values, 2, 2, false, kAny};
constexpr FormatFacts kFactsSparse24{kSparse24, R::compressed,    C::sparse,     SF::shape_part,   1, 1, N::scale_or_values, 2, 2, false, kAny};
constexpr FormatFacts kFactsPack    {kPack,     R::weight_packed, C::packed_int, SF::weight_shape, 1, 1, N::scale,           2, 0, true,  kAny};
constexpr FormatFacts kFactsNaive   {kNaive,    R::weight,        C::byte,       SF::main_part,    1, 1, N::scale,           1, 0, false, kAny};
constexpr FormatFacts kFactsNvfp4   {kNvfp4,    R::weight_packed, C::e2m1,       SF::packed_bytes, 2, 1, N::bf16,            2, 2, false, FixedArgs{4, QT::float_, QS::tensor_group, 16}};
constexpr FormatFacts kFactsMxfp4   {kMxfp4,    R::weight_packed, C::e2m1,       SF::packed_bytes, 2, 1, N::bf16,            2, 2, false, FixedArgs{4, QT::float_, QS::group, 32}};
constexpr FormatFacts kFactsMxfp6   {kMxPacked, R::weight_packed, C::e2m3,       SF::packed_bytes, 4, 3, N::bf16,            2, 2, false, FixedArgs{6, QT::float_, QS::group, 32}};
constexpr FormatFacts kFactsMxfp8   {kMxfp8,    R::weight,        C::byte,       SF::main_part,    1, 1, N::bf16,            2, 2, false, FixedArgs{8, QT::float_, QS::group, 32}};
constexpr FormatFacts kFactsMarlin  {kMarlin24, R::weight_packed, C::marlin,     SF::marlin_tiles, 1, 1, N::f16,             2, 2, true,  kAny};
// Its parts are its factors', checked by their own formats.
constexpr FormatFacts kFactsLowRank {{},        R::weight,        C::none,       SF::stored,       1, 1, N::stored,          2, 2, false, kAny};
// clang-format on

}  // namespace

std::string_view role_name(Role r) noexcept {
  switch (r) {
    case Role::weight: return "weight";
    case Role::weight_packed: return "weight_packed";
    case Role::weight_scale: return "weight_scale";
    case Role::weight_zero_point: return "weight_zero_point";
    case Role::weight_global_scale: return "weight_global_scale";
    case Role::weight_g_idx: return "weight_g_idx";
    case Role::weight_shape: return "weight_shape";
    case Role::compressed: return "compressed";
    case Role::bitmask: return "bitmask";
    case Role::shape: return "shape";
    case Role::row_offsets: return "row_offsets";
    case Role::scale_packed: return "scale_packed";
    case Role::meta: return "meta";
  }
  return "?";
}

std::optional<Role> role_from_name(std::string_view name) noexcept {
  for (Role r : kAllRoles)
    if (role_name(r) == name) return r;
  return std::nullopt;
}

std::string dtype_list(DTypeSet s) {
  std::vector<std::string> names;
  for (unsigned i = 0; i <= static_cast<unsigned>(DType::U64); ++i)
    if (contains(s, static_cast<DType>(i))) names.emplace_back(dtype_name(static_cast<DType>(i)));
  std::string r;
  for (size_t i = 0; i < names.size(); ++i) r += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return r;
}

const FormatFacts& facts(Format f) noexcept {
  switch (f) {
    case Format::dense: return kFactsDense;
    case Format::sparse_bitmask: return kFactsBitmask;
    case Format::sparse_24_bitmask: return kFactsSparse24;
    case Format::pack_quantized: return kFactsPack;
    case Format::naive_quantized:
    case Format::int_quantized:
    case Format::float_quantized: return kFactsNaive;
    case Format::nvfp4_pack_quantized: return kFactsNvfp4;
    case Format::mxfp4_pack_quantized: return kFactsMxfp4;
    case Format::mxfp6_pack_quantized: return kFactsMxfp6;
    case Format::mxfp8_quantized: return kFactsMxfp8;
    case Format::marlin_24: return kFactsMarlin;
    case Format::low_rank: return kFactsLowRank;
  }
  return kFactsDense;
}

std::span<const PartRule> part_rules(Format f) noexcept { return facts(f).parts; }

const PartRule* part_rule(Format f, Role role) noexcept {
  for (const PartRule& r : part_rules(f))
    if (r.role == role) return &r;
  return nullptr;
}

std::optional<Geometry> geometry(Format f, const Shape& shape, const QuantArgs* q, Why& why) {
  Geometry g;
  g.format = f;
  g.shape = shape;
  const auto numel = detail::checked_numel(shape);
  if (!numel || !detail::checked_mul(*numel, 64)) {
    why = "logical shape " + shape_str(shape) + " overflows 64-bit sizes";
    return std::nullopt;
  }
  g.numel = *numel;
  g.cols = shape.empty() ? 1 : shape.back();
  // rows can exceed numel when the last dim is 0: check it (and cols) on its own, with the same
  // headroom, so every size derived below stays far from overflow.
  const auto rows = detail::checked_numel(std::span<const uint64_t>(shape).first(shape.empty() ? 0 : shape.size() - 1));
  if (!rows || !detail::checked_mul(*rows, 64) || !detail::checked_mul(g.cols, 64)) {
    why = "logical shape " + shape_str(shape) + " overflows 64-bit sizes";
    return std::nullopt;
  }
  g.rows = *rows;
  if (f == Format::dense) return g;
  const FormatFacts& ff = facts(f);
  if (shape.size() < ff.min_rank || (ff.max_rank != 0 && shape.size() > ff.max_rank)) {
    why = std::string(format_name(f)) + " cannot hold a " + std::to_string(shape.size()) + "-d tensor (shape " +
          shape_str(shape) + ")";
    return std::nullopt;
  }
  if (f == Format::sparse_24_bitmask && g.cols % 4 != 0) {
    why = "2:4 sparsity needs the column count to be a multiple of 4, the shape is " + shape_str(shape);
    return std::nullopt;
  }
  if (!q) {
    if (f != Format::sparse_bitmask && f != Format::sparse_24_bitmask) {
      why = std::string(format_name(f)) + " needs quantization arguments";
      return std::nullopt;
    }
    return g;
  }
  g.quantized = true;
  g.quant = *q;
  QuantArgs& a = g.quant;
  if (ff.fixed) {  // fixed layouts of the float formats, whatever the config says
    a.num_bits = ff.fixed->num_bits, a.type = ff.fixed->type, a.strategy = ff.fixed->strategy;
    a.group_size = ff.fixed->group_size, a.symmetric = true;
  }
  if (ff.int_codes) {
    if (a.type != QuantType::int_ || a.num_bits < 1 || a.num_bits > 8) {
      why = std::string(format_name(f)) + " needs INT weights of 1..8 bits, the config says " +
            (a.type == QuantType::int_ ? "int" : "float") + std::to_string(a.num_bits);
      return std::nullopt;
    }
    if (f == Format::marlin_24 && a.num_bits != 4 && a.num_bits != 8) {
      why = "marlin-24 stores 4- or 8-bit weights, the config says " + std::to_string(a.num_bits);
      return std::nullopt;
    }
  }
  ScaleGeometry& s = g.scale;
  switch (a.strategy) {
    case QuantStrategy::tensor:
      s.rows = 1, s.cols = 1, s.row_div = std::max<uint64_t>(g.rows, 1), s.group_size = std::max<uint64_t>(g.cols, 1);
      break;
    case QuantStrategy::channel:
      s.rows = g.rows, s.cols = 1, s.row_div = 1, s.group_size = std::max<uint64_t>(g.cols, 1);
      break;
    case QuantStrategy::group:
    case QuantStrategy::tensor_group:
      if (a.group_size == 0 || g.cols % a.group_size != 0) {
        why = "group size " + std::to_string(a.group_size) + " does not divide the " + std::to_string(g.cols) +
              " columns of shape " + shape_str(shape);
        return std::nullopt;
      }
      s.rows = g.rows, s.cols = g.cols / a.group_size, s.row_div = 1, s.group_size = a.group_size;
      break;
    case QuantStrategy::block:
      if (shape.size() != 2 || a.block_rows == 0 || a.block_cols == 0) {
        why = "block strategy needs a 2-D weight and positive block sizes";
        return std::nullopt;
      }
      s.rows = ceil_div(g.rows, a.block_rows), s.cols = ceil_div(g.cols, a.block_cols);
      s.row_div = a.block_rows, s.group_size = a.block_cols;
      break;
    default:
      why = "strategy '" + std::string(strategy_name(a.strategy)) + "' is not a layout of stored weights";
      return std::nullopt;
  }
  if (ff.shape_from == ShapeFrom::packed_bytes) g.row_units = g.row_bytes = g.cols / ff.pack_num * ff.pack_den;
  switch (f) {
    case Format::pack_quantized:
      g.row_units = detail::packed_words(g.cols, a.num_bits, !a.legacy_packing);
      g.row_bytes = g.row_units * 4;
      if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::channel) {
        // One packed slice per 2-D slice of the weight (ZeroPointPacking); scale rows = rows here.
        g.zp.slice_rows = std::max<uint64_t>(shape[shape.size() - 2], 1);
        g.zp.words = detail::packed_words(shape[shape.size() - 2], a.num_bits, !a.legacy_packing);
      }
      break;
    case Format::marlin_24:
      if (g.cols % 32 != 0 || a.strategy == QuantStrategy::block || a.strategy == QuantStrategy::tensor) {
        why = "marlin-24 needs columns in multiples of 32 and channel or group scales";
        return std::nullopt;
      }
      break;
    default: break;
  }
  return g;
}

Geometry geometry(const TensorInfo& t) {
  Why why;
  auto g = geometry(t.format, t.shape, t.quantized ? &t.quant : nullptr, why);
  // The format layer refused every tensor for which this fails; reaching here is a bug.
  if (!g) throw std::logic_error("ctstream: geometry of accepted tensor '" + t.name + "' failed: " + why);
  return *g;
}

std::optional<Shape> exact_shape(ShapeRule rule, DType dtype, const Geometry& g) {
  const unsigned b = g.quant.num_bits;
  switch (rule) {
    case ShapeRule::logical: return g.shape;
    case ShapeRule::packed_rows: {
      Shape s = g.shape;
      s.back() = g.row_units;
      return s;
    }
    case ShapeRule::zero_point:
      if (dtype == DType::I32) {
        Shape s(g.shape.begin(), g.shape.end() - 2);  // check_part: >= 2 dims, group / channel
        s.push_back(g.zp.words);
        s.push_back(g.scale.cols);
        return s;
      }
      return std::nullopt;
    case ShapeRule::cols_vector: return Shape{g.cols};
    case ShapeRule::rows_vector: return Shape{g.rows};
    case ShapeRule::bitmask: return Shape{g.rows, ceil_div(g.cols, 8)};
    case ShapeRule::half_cols: return Shape{g.rows, g.cols / 2};
    case ShapeRule::marlin_packed: return Shape{g.cols / 32, g.rows * b / 2};
    case ShapeRule::marlin_scale: return Shape{g.scale.cols, g.rows};
    case ShapeRule::marlin_meta: return Shape{g.cols / 32, 2 * g.rows};
    case ShapeRule::scale:
    case ShapeRule::scalar:
    case ShapeRule::shape_vector:
    case ShapeRule::sparse_values: return std::nullopt;
  }
  return std::nullopt;
}

Why check_part(const PartRule& rule, DType dtype, const Shape& shape, const Geometry& g) {
  const std::string role(role_name(rule.role));
  if (!contains(rule.dtypes, dtype))
    return role + " must be " + dtype_list(rule.dtypes) + ", not " + std::string(dtype_name(dtype));
  const uint64_t n = detail::checked_numel(shape).value_or(UINT64_MAX);
  if (rule.shape == ShapeRule::zero_point && dtype == DType::I32) {
    // 0.20 packs only group / channel zero points (pack_quantized/base.py:103 PACK_ZP_STRATS).
    if (g.format != Format::pack_quantized || g.shape.size() < 2 ||
        (g.quant.strategy != QuantStrategy::group && g.quant.strategy != QuantStrategy::channel))
      return "a packed (I32) weight_zero_point needs a pack-quantized weight with group or channel scales";
  }
  if (auto want = exact_shape(rule.shape, dtype, g)) {
    if (shape != *want)
      return role + " shape " + shape_str(shape) + " is not the " + shape_str(*want) + " the layout needs";
    return {};
  }
  switch (rule.shape) {
    case ShapeRule::scale:
    case ShapeRule::zero_point: {
      const uint64_t want = g.scale.entries();
      // More than one entry of a 2-D (or higher) weight: 2-D, as the library writes them. A 1-D
      // [R] channel scale would be broadcast by torch along the LAST dim (per column, or an
      // error), not per row: refused rather than read either way.
      if (want > 1 && g.shape.size() >= 2 && shape.size() < 2)
        return role + " shape " + shape_str(shape) + " must be 2-D for " +
               std::string(strategy_name(g.quant.strategy)) + " scales [" + std::to_string(g.scale.rows) + ", " +
               std::to_string(g.scale.cols) + "]";
      if (n != want || (shape.size() >= 2 && shape.back() != g.scale.cols))
        return role + " shape " + shape_str(shape) + " does not match " + std::string(strategy_name(g.quant.strategy)) +
               " scales [" + std::to_string(g.scale.rows) + ", " + std::to_string(g.scale.cols) + "]";
      return {};
    }
    case ShapeRule::scalar:
      // [1] as the library writes it; 0-d would change torch's arithmetic (a 0-d f32 divisor
      // keeps a bf16 quotient in bf16), so it is refused rather than decoded another way.
      if (n != 1 || shape.empty()) return role + " must hold one value as shape [1], shape is " + shape_str(shape);
      return {};
    case ShapeRule::shape_vector: {
      const uint64_t nd = g.shape.size();
      if (!(shape == Shape{nd} || shape == Shape{nd, 1}))
        return role + " must hold the " + std::to_string(nd) + " dims of the weight, shape is " + shape_str(shape);
      return {};
    }
    case ShapeRule::sparse_values:
      if (shape.size() != 1 || shape[0] > g.numel)
        return role + " must be 1-D with at most " + std::to_string(g.numel) + " values, shape is " + shape_str(shape);
      return {};
    default: return {};
  }
}

std::vector<PlannedPart> plan_parts(const Geometry& g, DType values, uint64_t nnz) {
  const QuantArgs& a = g.quant;
  const uint64_t R = g.rows, C = g.cols;
  auto scale_shape = [&]() -> Shape {
    switch (a.strategy) {
      case QuantStrategy::tensor: return {1};
      case QuantStrategy::channel: return {R, 1};
      default: return {g.scale.rows, g.scale.cols};
    }
  };
  std::vector<PlannedPart> out;
  switch (g.format) {
    case Format::pack_quantized:
      out.push_back({Role::weight_packed, DType::I32, *exact_shape(ShapeRule::packed_rows, DType::I32, g)});
      out.push_back({Role::weight_scale, values, scale_shape()});
      out.push_back({Role::weight_shape, DType::I64, {g.shape.size()}});
      if (!a.symmetric) {
        if (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::channel)
          out.push_back({Role::weight_zero_point, DType::I32, *exact_shape(ShapeRule::zero_point, DType::I32, g)});
        else out.push_back({Role::weight_zero_point, DType::I8, scale_shape()});
      }
      break;
    case Format::int_quantized:
    case Format::float_quantized:
    case Format::naive_quantized:
      out.push_back({Role::weight, a.type == QuantType::int_ ? DType::I8 : DType::F8_E4M3, g.shape});
      out.push_back({Role::weight_scale, values, scale_shape()});
      if (!a.symmetric) out.push_back({Role::weight_zero_point, DType::I8, scale_shape()});
      break;
    case Format::nvfp4_pack_quantized:
      out.push_back({Role::weight_packed, DType::U8, *exact_shape(ShapeRule::packed_rows, DType::U8, g)});
      out.push_back({Role::weight_scale, DType::F8_E4M3, scale_shape()});
      out.push_back({Role::weight_global_scale, DType::F32, {1}});
      break;
    case Format::mxfp4_pack_quantized:  // E8M0 scales as uint8 (mx_utils.py compress_mx_scale)
      out.push_back({Role::weight_packed, DType::U8, *exact_shape(ShapeRule::packed_rows, DType::U8, g)});
      out.push_back({Role::weight_scale, DType::U8, scale_shape()});
      break;
    case Format::mxfp8_quantized:
      out.push_back({Role::weight, DType::F8_E4M3, g.shape});
      out.push_back({Role::weight_scale, DType::U8, scale_shape()});
      break;
    case Format::sparse_bitmask:
      out.push_back({Role::shape, DType::I64, {2}});
      out.push_back({Role::compressed, values, {nnz}});
      out.push_back({Role::bitmask, DType::U8, *exact_shape(ShapeRule::bitmask, DType::U8, g)});
      out.push_back({Role::row_offsets, DType::I64, {R}});
      break;
    case Format::sparse_24_bitmask:
      out.push_back({Role::shape, DType::I64, {2, 1}});
      out.push_back({Role::compressed, values, {R, C / 2}});
      out.push_back({Role::bitmask, DType::U8, *exact_shape(ShapeRule::bitmask, DType::U8, g)});
      break;
    default: break;
  }
  return out;
}

}  // namespace ctstream::format
