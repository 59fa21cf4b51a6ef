#include "ctstream/tensor.hpp"

#include <cctype>

namespace ctstream {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string_view format_name(Format f) noexcept {
  switch (f) {
    case Format::dense: return "dense";
    case Format::sparse_bitmask: return "sparse-bitmask";
    case Format::sparse_24_bitmask: return "sparse-24-bitmask";
    case Format::pack_quantized: return "pack-quantized";
    case Format::naive_quantized: return "naive-quantized";
    case Format::int_quantized: return "int-quantized";
    case Format::float_quantized: return "float-quantized";
    case Format::nvfp4_pack_quantized: return "nvfp4-pack-quantized";
    case Format::mxfp4_pack_quantized: return "mxfp4-pack-quantized";
    case Format::mxfp6_pack_quantized: return "mxfp6-pack-quantized";
    case Format::mxfp8_quantized: return "mxfp8-quantized";
    case Format::marlin_24: return "marlin-24";
    case Format::low_rank: return "low-rank";
  }
  return "unknown";
}

std::string_view strategy_name(QuantStrategy s) noexcept {
  switch (s) {
    case QuantStrategy::tensor: return "tensor";
    case QuantStrategy::channel: return "channel";
    case QuantStrategy::group: return "group";
    case QuantStrategy::block: return "block";
    case QuantStrategy::tensor_group: return "tensor_group";
    case QuantStrategy::token: return "token";
    case QuantStrategy::attn_head: return "attn_head";
  }
  return "unknown";
}

std::optional<Format> format_from_name(std::string_view name) noexcept {
  // compressed_tensors/registry/registry.py `standardize_lookup_name`: '_' and ' ' -> '-', lower.
  const auto same = [name](std::string_view canonical) {
    if (name.size() != canonical.size()) return false;
    for (size_t i = 0; i < name.size(); ++i) {
      const char c =
          name[i] == '_' || name[i] == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
      if (c != canonical[i]) return false;
    }
    return true;
  };
  if (same("dense-sparsity")) return Format::dense;  // SparseML-era name of "stored dense"
  for (int i = 0; i <= static_cast<int>(Format::low_rank); ++i)
    if (same(format_name(static_cast<Format>(i)))) return static_cast<Format>(i);
  return std::nullopt;
}

std::optional<QuantStrategy> strategy_from_name(std::string_view name) noexcept {
  for (int i = 0; i <= static_cast<int>(QuantStrategy::attn_head); ++i)
    if (strategy_name(static_cast<QuantStrategy>(i)) == name) return static_cast<QuantStrategy>(i);
  return std::nullopt;
}

uint64_t TensorInfo::numel() const noexcept {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // checked for overflow when the checkpoint was opened
  return n;
}

uint64_t TensorInfo::decoded_bytes(DType out) const noexcept { return (numel() * dtype_bits(out) + 7) / 8; }

uint64_t TensorInfo::stored_bytes() const noexcept {
  uint64_t n = 0;
  for (const auto& p : parts) n += p.nbytes;
  return n;
}

DType output_dtype(const TensorInfo& t, std::optional<DType> requested) noexcept {
  if (!requested) return t.dtype;
  if (t.format != Format::dense || is_float(t.dtype)) return *requested;
  return t.dtype;
}

const TensorPart* TensorInfo::part(std::string_view role) const noexcept {
  for (const auto& p : parts)
    if (p.role == role) return &p;
  return nullptr;
}

}  // namespace ctstream
