#include "format/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "ctstream/error.hpp"

namespace ctstream::format {
namespace {

[[noreturn]] void fail(ErrorKind k, const std::string& file, const std::string& tensor, const std::string& msg) {
  throw Error(k, file, tensor, msg);
}

uint64_t get_u64(const nlohmann::json& v, const std::string& file, const std::string& name, const char* field) {
  if (!v.is_number_unsigned())
    fail(ErrorKind::invalid_header, file, name,
         std::string(field) + " must hold non-negative integers, got " + v.dump());
  return v.get<uint64_t>();
}

}  // namespace

uint64_t parse_prefix(std::span<const std::byte> prefix, uint64_t file_size, uint64_t max_header,
                      const std::string& file) {
  if (file_size < 8 || prefix.size() < 8)
    fail(ErrorKind::truncated, file, "", "file is " + std::to_string(file_size) +
                                             " bytes, too short for the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(prefix[static_cast<size_t>(i)]);
  if (n > max_header)
    fail(ErrorKind::header_too_large, file, "",
         "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_header) + " bytes");
  if (n > file_size - 8)
    fail(ErrorKind::header_too_large, file, "",
         "header length " + std::to_string(n) + " runs past the end of the " + std::to_string(file_size) +
             "-byte file");
  return n;
}

StHeader parse_header(std::string_view json, uint64_t header_len, uint64_t file_size, const std::string& file) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::invalid_header, file, "", std::string("header is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) fail(ErrorKind::invalid_header, file, "", "header is not a JSON object");

  StHeader h;
  h.data_start = 8 + header_len;
  const uint64_t data_len = file_size - h.data_start;
  h.entries.reserve(root.size());
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(ErrorKind::invalid_header, file, "", "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(ErrorKind::invalid_header, file, "", "__metadata__ value for '" + m.key() + "' is not a string");
        h.metadata.emplace(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    if (!v.is_object()) fail(ErrorKind::invalid_header, file, name, "entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || sh == v.end() || off == v.end())
      fail(ErrorKind::invalid_header, file, name, "entry needs dtype, shape and data_offsets");
    if (!dt->is_string()) fail(ErrorKind::invalid_header, file, name, "dtype is not a string");
    auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) fail(ErrorKind::unknown_dtype, file, name, "unknown dtype '" + dt->get<std::string>() + "'");
    if (!sh->is_array()) fail(ErrorKind::invalid_header, file, name, "shape is not an array");
    if (!off->is_array() || off->size() != 2)
      fail(ErrorKind::invalid_header, file, name, "data_offsets is not a [begin, end] pair");
    StEntry e{name, *dtype, {}, 0, 0};
    e.shape.reserve(sh->size());
    for (const auto& d : *sh) e.shape.push_back(get_u64(d, file, name, "shape"));
    e.begin = get_u64((*off)[0], file, name, "data_offsets");
    e.end = get_u64((*off)[1], file, name, "data_offsets");
    if (e.end < e.begin)
      fail(ErrorKind::invalid_header, file, name,
           "data_offsets end " + std::to_string(e.end) + " is before begin " + std::to_string(e.begin));
    h.entries.push_back(std::move(e));
  }

  // safetensors `Metadata::validate`: sorted by offset, each tensor starts where the previous
  // ended, byte count = bits(dtype) * numel / 8, and the tensors cover the data region exactly.
  // Sorted by (begin, end) like safetensors, so an empty tensor at offset x precedes one
  // starting at x.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const StEntry& a, const StEntry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t expect = 0;
  for (const auto& e : h.entries) {
    if (e.begin != expect)
      fail(ErrorKind::invalid_offsets, file, e.name,
           "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") " +
               (e.begin < expect ? "overlap the previous tensor, which ends at "
                                 : "leave a gap after the previous tensor, which ends at ") +
               std::to_string(expect));
    expect = e.end;
    auto numel = detail::checked_numel(e.shape);
    auto bits = numel ? detail::checked_mul(*numel, dtype_bits(e.dtype)) : std::nullopt;
    if (!bits) fail(ErrorKind::overflow, file, e.name, "shape product overflows 64 bits");
    if (*bits % 8 != 0)
      fail(ErrorKind::size_mismatch, file, e.name,
           std::to_string(*numel) + " elements of " + std::string(dtype_name(e.dtype)) + " do not fill whole bytes");
    if (e.end - e.begin != *bits / 8)
      fail(ErrorKind::size_mismatch, file, e.name,
           "holds " + std::to_string(e.end - e.begin) + " bytes but " + std::string(dtype_name(e.dtype)) +
               " x shape needs " + std::to_string(*bits / 8));
  }
  if (expect > data_len)
    fail(ErrorKind::truncated, file, h.entries.empty() ? "" : h.entries.back().name,
         "tensor data ends at byte " + std::to_string(h.data_start + expect) + " but the file has only " +
             std::to_string(file_size) + " bytes");
  if (expect < data_len)
    fail(ErrorKind::invalid_offsets, file, "",
         "data region has " + std::to_string(data_len - expect) + " trailing bytes not covered by any tensor");
  return h;
}

std::string serialize_header(const std::vector<StEntry>& entries, const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order so the header lists tensors in file order.
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  for (const auto& e : entries) {
    nlohmann::ordered_json v;
    v["dtype"] = std::string(dtype_name(e.dtype));
    v["shape"] = e.shape;
    v["data_offsets"] = {e.begin, e.end};
    root[e.name] = std::move(v);
  }
  std::string s = root.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

}  // namespace ctstream::format
