// writer — the rules on CompressOptions that every user-facing surface applies (the CLI's
// `compress`, the Python module's compress / save_*), written once, and the names of the formats
// and strategies the writer produces. The combination of options (bits, strategy, group size for
// a format) is resolve()'s (plan.cpp).
#include <algorithm>
#include <string>

#include "ctstream/error.hpp"
#include "ctstream/writer.hpp"

namespace ctstream {
namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(ErrorKind::invalid_argument, "", "", msg); }

}  // namespace

std::span<const Format> writer_formats() noexcept {
  static constexpr Format kFormats[] = {
      Format::dense,           Format::sparse_bitmask,  Format::sparse_24_bitmask,    Format::pack_quantized,
      Format::int_quantized,   Format::float_quantized, Format::nvfp4_pack_quantized, Format::mxfp4_pack_quantized,
      Format::mxfp8_quantized, Format::low_rank};
  return kFormats;
}

std::string writer_format_names() {
  std::string s;
  for (Format f : writer_formats()) s += (s.empty() ? "" : ", ") + std::string(format_name(f));
  return s;
}

Format writer_format_from_name(std::string_view name) {
  const auto f = format_from_name(name);
  const auto all = writer_formats();
  if (!f || std::find(all.begin(), all.end(), *f) == all.end())
    bad("format must be one of " + writer_format_names() + "; got '" + std::string(name) + "'");
  return *f;
}

QuantStrategy writer_strategy_from_name(std::string_view name) {
  const auto st = strategy_from_name(name);
  if (!st || *st == QuantStrategy::token || *st == QuantStrategy::attn_head)
    bad("strategy must be tensor, channel, group, block or tensor_group; got '" + std::string(name) + "'");
  return *st;
}

void CompressOptions::validate() const {
  if (format == Format::dense && !dtype) bad("format 'dense' needs dtype (bfloat16, float16 or float32)");
  if (shard_bytes == 0) bad("shard size must be positive");
  if ((rank != 0 || energy != 0) && format != Format::low_rank) bad("rank / energy apply to format 'low-rank'");
}

}  // namespace ctstream
