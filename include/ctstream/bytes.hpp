// ctstream — byte counts as users type them; the one parser every surface calls.
#pragma once
#include <cstdint>
#include <string>

namespace ctstream {

/// Parses a byte count: "512MB", "2GiB", "1.5G", "1048576" (decimal K/M/G/T = 1000^n,
/// KiB/MiB/GiB/TiB = 1024^n). Throws Error{invalid_argument}.
uint64_t parse_bytes(const std::string& text);

}  // namespace ctstream
