// format — the compression section of config.json, written (scheme.cpp reads it). Layouts:
// compressed-tensors 0.20.0 `ModelCompressor.update_config` for the quantized formats,
// 0.12.2 `SparsityCompressionConfig` for the sparse ones. The writer's self-check parses what
// this produces with parse_scheme() before any tensor is written.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ctstream/tensor.hpp"

namespace ctstream::format {

struct CompressionSection {
  Format format = Format::dense;
  QuantArgs weights;                 ///< quantized formats
  std::string scale_dtype;           ///< weights' scale_dtype: torch.float8_e4m3fn (nvfp4), torch.uint8 (MX), or none
  bool input_activations = false;    ///< int/float-quantized: dynamic activation quantization
  std::vector<std::string> targets;  ///< as given (empty: ["Linear"])
  std::vector<std::string> ignore;   ///< config ignore list
  double global_sparsity = 0;        ///< sparse formats: zeros / parameters
  std::optional<DType> dtype;        ///< recorded as torch_dtype when the model was converted
};

/// The quantized formats the writer produces: their section is a quantization_config with weight
/// arguments (the others: sparsity_config, or none).
bool quantized_format(Format f) noexcept;

/// config.json text: `input_config` (the model's own config.json, may be empty) with its
/// compression settings replaced by `s`. "" when there is nothing to write (a dense copy of a
/// checkpoint without config). Errors: Error{invalid_config, input_file} for a malformed input.
std::string compression_config(const std::string& input_config, const std::string& input_file,
                               const CompressionSection& s);

}  // namespace ctstream::format
