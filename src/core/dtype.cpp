#include "ctstream/dtype.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace ctstream {
namespace {
struct DTypeRow {
  DType type;
  std::string_view name;
  unsigned bits;
};
// Names and bit sizes: safetensors/src/tensor.rs (`enum Dtype`, `Dtype::bitsize`, Display).
constexpr std::array<DTypeRow, 22> kRows{{
    {DType::BOOL, "BOOL", 8},
    {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},
    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::I16, "I16", 16},
    {DType::U16, "U16", 16},
    {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},
    {DType::I32, "I32", 32},
    {DType::U32, "U32", 32},
    {DType::F32, "F32", 32},
    {DType::C64, "C64", 64},
    {DType::F64, "F64", 64},
    {DType::I64, "I64", 64},
    {DType::U64, "U64", 64},
}};
const DTypeRow& row(DType t) noexcept { return kRows[static_cast<size_t>(t)]; }
}  // namespace

unsigned dtype_bits(DType t) noexcept { return row(t).bits; }
std::string_view dtype_name(DType t) noexcept { return row(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& r : kRows)
    if (r.name == name) return r.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_user(std::string_view name) noexcept {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  static constexpr std::pair<std::string_view, DType> aliases[] = {
      {"bf16", DType::BF16},   {"bfloat16", DType::BF16}, {"fp16", DType::F16}, {"f16", DType::F16},
      {"float16", DType::F16}, {"half", DType::F16},      {"fp32", DType::F32}, {"f32", DType::F32},
      {"float32", DType::F32}, {"float", DType::F32},
  };
  for (const auto& [alias, t] : aliases)
    if (s == alias) return t;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return dtype_from_name(s);
}

}  // namespace ctstream
