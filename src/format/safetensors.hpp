// format — the safetensors container: 8-byte little-endian header length, JSON header, data.
// Pure functions over bytes: no file access, so the parser can be fuzzed directly.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/dtype.hpp"
#include "ctstream/tensor.hpp"

namespace ctstream::format {

/// One header entry; [begin, end) is relative to the start of the data region.
struct StEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct StHeader {
  uint64_t data_start = 0;       ///< 8 + header length
  std::vector<StEntry> entries;  ///< sorted by begin (= file order)
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;  ///< `__metadata__` present and not null (even if {})
};

/// Reads the 8-byte prefix and checks the header length against `file_size` and `max_header`.
/// Returns the JSON header length. `file` is only used in error messages.
uint64_t parse_prefix(std::span<const std::byte> prefix, uint64_t file_size, uint64_t max_header,
                      const std::string& file);

/// Parses and validates the JSON header as strictly as safetensors' own `validate`
/// (safetensors/src/tensor.rs): known dtypes, non-negative integer shapes, offsets that tile the
/// data region exactly in order (no gap, no overlap, nothing past the end), byte counts equal to
/// dtype bits x shape product / 8 (overflow-checked, sub-byte dtypes byte-aligned).
StHeader parse_header(std::string_view json, uint64_t header_len, uint64_t file_size, const std::string& file);

/// Serialises a header for writing: entries in the given order with offsets as given,
/// padded with spaces so the data starts 8-byte aligned (as safetensors writes it).
std::string serialize_header(const std::vector<StEntry>& entries, const std::map<std::string, std::string>& metadata);

}  // namespace ctstream::format
