// format — turns the stored entries of all files into logical tensors: `weight_packed` +
// `weight_scale` + ... become one TensorInfo named `<module>.weight`, according to config.json.
#pragma once
#include <string>
#include <vector>

#include "ctstream/tensor.hpp"

namespace ctstream::format {

/// One stored safetensors entry with its absolute location.
struct RawTensor {
  std::string key;
  DType dtype;
  Shape shape;
  uint32_t file = 0;
  uint64_t offset = 0, nbytes = 0;
};

/// Groups entries (in file order) into logical tensors, keeping the order of each group's first
/// entry. `config_json` may be empty (everything dense). Errors name `config_file`.
std::vector<TensorInfo> group_tensors(const std::vector<RawTensor>& raw, const std::string& config_json,
                                      const std::string& config_file);

}  // namespace ctstream::format
