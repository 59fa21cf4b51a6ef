// libFuzzer target: the safetensors container (8-byte length + JSON header + data region) as pure
// functions over bytes. Any crash, sanitizer report, exception other than ctstream::Error, or an
// accepted header whose entries do not tile the data region exactly is a bug.
#include <cstdint>
#include <string_view>

#include "ctstream/error.hpp"
#include "format/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const uint64_t n = ctstream::format::parse_prefix(bytes, size, 100'000'000, "fuzz.safetensors");
    const std::string_view json(reinterpret_cast<const char*>(data) + 8, n);
    const auto h = ctstream::format::parse_header(json, n, size, "fuzz.safetensors");
    uint64_t end = 0;
    for (const auto& e : h.entries) {
      if (e.begin != end || e.end < e.begin) __builtin_trap();
      end = e.end;
    }
    if (h.data_start + end != size) __builtin_trap();
  } catch (const ctstream::Error&) {
  }
  return 0;
}
