#include "format/config_writer.hpp"

#include <nlohmann/json.hpp>

#include "ctstream/error.hpp"
#include "format/json.hpp"

namespace ctstream::format {
namespace {

using json = nlohmann::json;

constexpr const char* kVersion020 = "0.20.0";  // layout + config of the current library line
constexpr const char* kVersion012 = "0.12.2";  // the last line with sparse compressors

std::string torch_name(DType d) { return d == DType::BF16 ? "bfloat16" : d == DType::F16 ? "float16" : "float32"; }

// QuantizationArgs as the library serialises them (quant_args.py, model_dump).
json weight_args(const QuantArgs& a, const std::string& scale_dtype) {
  json w = {{"dynamic", false},
            {"num_bits", a.num_bits},
            {"strategy", std::string(strategy_name(a.strategy))},
            {"symmetric", a.symmetric},
            {"type", a.type == QuantType::int_ ? "int" : "float"}};
  w["group_size"] = (a.strategy == QuantStrategy::group || a.strategy == QuantStrategy::tensor_group)
                        ? json(a.group_size)
                        : json(nullptr);
  if (a.strategy == QuantStrategy::block) w["block_structure"] = {a.block_rows, a.block_cols};
  if (!scale_dtype.empty()) w["scale_dtype"] = scale_dtype;
  return w;
}

}  // namespace

bool quantized_format(Format f) noexcept {
  return f == Format::pack_quantized || f == Format::int_quantized || f == Format::float_quantized ||
         f == Format::nvfp4_pack_quantized || f == Format::mxfp4_pack_quantized || f == Format::mxfp8_quantized;
}

std::string compression_config(const std::string& input_config, const std::string& input_file,
                               const CompressionSection& s) {
  json cfg = json::object();
  if (!input_config.empty()) {
    cfg = parse_json(input_config, ErrorKind::invalid_config, input_file, "config.json");
    if (!cfg.is_object()) throw Error(ErrorKind::invalid_config, input_file, "", "config.json is not a JSON object");
  }
  // The input's own compression settings no longer apply: every tensor was decoded.
  cfg.erase("quantization_config");
  cfg.erase("compression_config");
  cfg.erase("sparsity_config");
  if (s.dtype && !input_config.empty()) {  // what transformers' save_pretrained records after model.to(dtype)
    cfg["torch_dtype"] = torch_name(*s.dtype);
    if (cfg.contains("dtype")) cfg["dtype"] = torch_name(*s.dtype);
  }
  const json targets = s.targets.empty() ? json::array({"Linear"}) : json(s.targets);
  if (quantized_format(s.format)) {
    const std::string f(format_name(s.format));
    json ia = nullptr;
    if (s.input_activations) {  // the INT8_W8A8 / FP8_DYNAMIC / FP8_BLOCK presets
      const bool block = s.weights.strategy == QuantStrategy::block;
      ia = {{"dynamic", true},   {"group_size", block ? json(128) : json(nullptr)},
            {"num_bits", 8},     {"strategy", block ? "group" : "token"},
            {"symmetric", true}, {"type", s.weights.type == QuantType::int_ ? "int" : "float"}};
    }
    cfg["quantization_config"] = {{"config_groups",
                                   {{"group_0",
                                     {{"format", f},
                                      {"input_activations", ia},
                                      {"output_activations", nullptr},
                                      {"targets", targets},
                                      {"weights", weight_args(s.weights, s.scale_dtype)}}}}},
                                  {"format", f},
                                  {"global_compression_ratio", nullptr},
                                  {"ignore", s.ignore},
                                  {"kv_cache_scheme", nullptr},
                                  {"moe_sparsity_config", nullptr},
                                  {"quant_method", "compressed-tensors"},
                                  {"quantization_status", "compressed"},
                                  {"sparsity_config", json::object()},
                                  {"transform_config", json::object()},
                                  {"version", kVersion020}};
  } else if (s.format == Format::sparse_bitmask || s.format == Format::sparse_24_bitmask) {
    cfg["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"sparsity_config",
         {{"format", std::string(format_name(s.format))},
          {"global_sparsity", s.global_sparsity},
          {"ignore", s.ignore},
          {"registry_requires_subclass", false},
          {"sparsity_structure", s.format == Format::sparse_24_bitmask ? "2:4" : "unstructured"},
          {"targets", targets}}},
        {"transform_config", json::object()},
        {"version", kVersion012}};
  } else if (input_config.empty()) {
    return {};  // dense output of a bare file: nothing to say
  }
  return cfg.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace ctstream::format
