// ctstream — element types, with the exact names safetensors writes in its header.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace ctstream {

/// Every dtype safetensors defines (safetensors/src/tensor.rs `enum Dtype`).
enum class DType : uint8_t {
  BOOL,
  F4,
  F6_E2M3,
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};

/// Size of one element in bits (4 for F4, 6 for the F6 types).
unsigned dtype_bits(DType t) noexcept;
/// The safetensors header spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t) noexcept;
/// Parses a safetensors header spelling; nullopt for an unknown one.
std::optional<DType> dtype_from_name(std::string_view name) noexcept;
/// Parses a user spelling: "bf16", "bfloat16", "fp16", "float16", "half", "fp32", "float32",
/// "float", or any safetensors name (case-insensitive).
std::optional<DType> dtype_from_user(std::string_view name) noexcept;
/// True for F16, BF16, F32 — the output dtypes decode can convert into.
constexpr bool is_float_output(DType t) noexcept { return t == DType::F16 || t == DType::BF16 || t == DType::F32; }
/// True for every floating dtype (F64, F32, F16, BF16, the F8 variants, F4, F6): what a requested
/// output dtype applies to. Decode converts all of them to F32/F16/BF16 except F6, whose element
/// order safetensors does not define (an error, never a silent copy).
constexpr bool is_float(DType t) noexcept {
  switch (t) {
    case DType::F4:
    case DType::F6_E2M3:
    case DType::F6_E3M2:
    case DType::F8_E5M2:
    case DType::F8_E4M3:
    case DType::F8_E8M0:
    case DType::F8_E4M3FNUZ:
    case DType::F8_E5M2FNUZ:
    case DType::F16:
    case DType::BF16:
    case DType::F32:
    case DType::F64: return true;
    default: return false;
  }
}

}  // namespace ctstream
