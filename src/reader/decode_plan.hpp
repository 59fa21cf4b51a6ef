// reader — the decode plan: everything about decoding one tensor that follows from its
// description alone (no bytes read), worked out once and read by every decoder. The CPU row
// decoders (decode_compressed.cpp), the dense path (decode_dense.cpp), chunked decodes and the
// CUDA path (cuda/api.cpp) all take their geometry, main part, dequantization arguments and dtype
// refusals from here; none of them re-derives any of it. A checkpoint builds the plans of its
// tensors at open (Checkpoint::Impl::plan); a TensorInfo from elsewhere gets one built on use.
//
// What depends on the stored bytes (a sparse mask's popcounts, unpacked zero points, act-order
// indices) is not here: a decoder loads it once when it is built (make_decoder), and chunked
// decodes keep one decoder for all their chunks.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "codecs/dequant.hpp"
#include "ctstream/checkpoint.hpp"
#include "format/format_table.hpp"

namespace ctstream::reader {

struct DecodePlan {
  const TensorInfo* t = nullptr;
  format::Geometry geo;  ///< compressed formats: shape, quantization arguments, scale / zero-point layout
  format::Codes codes = format::Codes::none;
  const TensorPart* main = nullptr;  ///< the values (parts[0]); nullptr for a tensor without parts

  // Dequantization (quantized tensors; the arithmetic is codecs::DequantSpec's).
  bool e8m0_scale = false;          ///< scales are E8M0 exponents (U8 storage)
  bool int_values = false;          ///< integer codes minus integer zero points: exact subtraction
  bool rows_repeat_scales = false;  ///< block scales: each scale row serves block_rows rows

  /// The stored part of `role`, or nullptr.
  const TensorPart* part(format::Role role) const noexcept { return by_role[static_cast<size_t>(role)]; }
  /// The dequantization arguments of an output of `out` (the scale dtype S is TensorInfo::dtype);
  /// whether a row streams is the caller's, per row (RowDecoder::row).
  codecs::DequantSpec dequant(DType out) const { return {t->dtype, out, geo.scale.group_size, int_values, false}; }
  /// Why decoding into `out` (a slice of it when `sliced`) is refused; empty when it is not. The
  /// one statement of every dtype rule, for the CPU and the CUDA path alike.
  std::string refusal(DType out, bool sliced) const;

  std::array<const TensorPart*, std::size(format::kAllRoles)> by_role{};
};

/// The plan of `t` (no I/O). Throws std::logic_error for a compressed tensor the format layer
/// would not have accepted (TensorInfo built by hand).
DecodePlan make_plan(const TensorInfo& t);

/// The act-order column -> scale column map of a quantized tensor (0.12 `weight_g_idx`): empty
/// for plain order, which a -1 anywhere also means (0.12 forward.py `_process_quantization`).
/// Every other entry must index a scale column (Error{corrupt_tensor} otherwise).
std::vector<int32_t> load_act_order(const Checkpoint::Impl& ck, const DecodePlan& plan);

}  // namespace ctstream::reader
