#include "reader/decode_plan.hpp"

#include <algorithm>
#include <functional>

#include "reader/internal.hpp"

namespace ctstream::reader {

DecodePlan make_plan(const TensorInfo& t) {
  DecodePlan p;
  p.t = &t;
  for (const TensorPart& part : t.parts)
    if (const auto r = format::role_from_name(part.role)) p.by_role[static_cast<size_t>(*r)] = &part;
  p.geo.format = t.format;
  if (t.format == Format::low_rank) return p;  // the product of its factors, each with a plan of its own
  if (t.format == Format::dense) {             // copied or converted as stored: a shape of any size, no table
    p.main = t.parts.empty() ? nullptr : &t.parts.front();
    return p;
  }
  p.geo = format::geometry(t);
  const format::FormatFacts& ff = format::facts(t.format);
  p.codes = ff.codes;
  p.main = p.part(ff.main);
  if (t.quantized) {
    const TensorPart* scale = p.part(format::Role::weight_scale);
    const TensorPart* zp = p.part(format::Role::weight_zero_point);
    p.e8m0_scale = scale && scale->dtype == DType::U8;  // the only E8M0 storage the format table admits
    // Integer codes (pack / naive int8) minus integer zero points: exact subtraction. A float zero
    // point (F16 / BF16 / F32) can make x - zp inexact in S: the rounding path.
    p.int_values = t.quant.type == QuantType::int_ && (!zp || zp->dtype == DType::I8 || zp->dtype == DType::I32);
    p.rows_repeat_scales = t.quant.strategy == QuantStrategy::block && t.quant.block_rows >= 2;
  }
  return p;
}

std::string DecodePlan::refusal(DType out, bool sliced) const {
  const std::string o(dtype_name(out));
  if (t->format == Format::dense) {
    if (!main) return {};
    const DType src = main->dtype;
    const std::string s(dtype_name(src));
    const bool convert = src != out, widen = convert && is_float(src) && !is_float_output(src);
    if (convert && !is_float_output(out))
      return "cannot convert " + s + " to " + o +
             " (floating tensors convert to F32, F16 or BF16; other dtypes are copied as stored)";
    if (convert && !is_float(src))
      return "cannot convert " + s + " to " + o +
             " (only floating tensors convert; integer and bool tensors are copied as stored)";
    if (widen && (src == DType::F6_E2M3 || src == DType::F6_E3M2))
      return "cannot convert " + s +
             ": safetensors defines no element order for 6-bit values (read it as stored, without a dtype)";
    if (dtype_bits(src) % 8 != 0 && sliced && !widen) return "slicing a sub-byte " + s + " tensor (as stored)";
    return {};
  }
  if ((t->quantized || t->format == Format::low_rank) && !is_float_output(out))
    return std::string(t->quantized ? "a quantized" : "a low-rank") + " weight decodes to BF16, F16 or F32, not " + o +
           "; use read_part()";
  if (codes == format::Codes::marlin)
    return "marlin-24 stores Marlin GPU tiles; compressed-tensors itself cannot decompress it. "
           "Use part_view()/read_part() to pass the packed parts to a Marlin kernel";
  if (codes == format::Codes::sparse && !t->quantized && main && main->dtype != out &&
      !(is_float_output(main->dtype) && is_float_output(out)))
    return "cannot convert " + std::string(dtype_name(main->dtype)) + " values to " + o;
  return {};
}

std::vector<int32_t> load_act_order(const Checkpoint::Impl& ck, const DecodePlan& plan) {
  const TensorPart* gi = plan.part(format::Role::weight_g_idx);
  if (!gi || !plan.t->quantized) return {};
  const uint64_t cols = plan.geo.cols;
  if (gi->nbytes != cols * 4)  // the format table admits [cols] of I32 only
    fail(ck, *plan.t, ErrorKind::corrupt_tensor, "weight_g_idx does not hold one I32 per column");
  std::vector<int32_t> idx(cols);
  ck.file_of(*gi).read_at(gi->offset, std::as_writable_bytes(std::span<int32_t>(idx)));
  if (std::find(idx.begin(), idx.end(), -1) != idx.end()) return {};
  for (int32_t v : idx)
    if (v < 0 || static_cast<uint64_t>(v) >= plan.geo.scale.cols)
      fail(ck, *plan.t, ErrorKind::corrupt_tensor, "weight_g_idx entry " + std::to_string(v) + " is not a group index");
  return idx;
}

}  // namespace ctstream::reader
