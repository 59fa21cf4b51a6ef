// format — turns the stored entries of all files into logical tensors: `weight_packed` +
// `weight_scale` + ... become one TensorInfo named `<module>.weight`, according to config.json
// (see scheme.hpp) and checked against it: part shapes must agree with the logical shape and
// the scheme, or the checkpoint is refused with a clear error.
#pragma once
#include <cstddef>
#include <functional>
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

/// Reads the bytes of a small stored entry (a `shape` / `weight_shape` vector) at open time.
using SmallReader = std::function<std::vector<std::byte>(const RawTensor&)>;

/// Groups entries (in file order) into logical tensors. `config_json` may be empty (then
/// compressed parts are recognised by their keys alone). `file_of` names a file index in errors.
std::vector<TensorInfo> group_tensors(const std::vector<RawTensor>& raw, const std::string& config_json,
                                      const std::string& config_file, const SmallReader& read_small,
                                      const std::function<std::string(uint32_t)>& file_of);

}  // namespace ctstream::format
