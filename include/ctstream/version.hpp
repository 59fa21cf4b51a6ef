#pragma once
namespace ctstream {
inline constexpr const char* version_string = "0.1.0";
/// Name of the instruction set the codecs dispatch to ("avx512", "avx2", "scalar").
const char* active_isa() noexcept;
}  // namespace ctstream
