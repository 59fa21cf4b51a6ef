// format — turns the stored entries of all files into logical tensors: `weight_packed` +
// `weight_scale` + ... become one TensorInfo named `<module>.weight`, according to config.json
// (see scheme.hpp) and checked against it: part shapes must agree with the logical shape and
// the scheme, or the checkpoint is refused with a clear error.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ctstream/tensor.hpp"
#include "format/scheme.hpp"

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

/// What group_tensors took the checkpoint to be (Scheme::present / Scheme::description).
struct ConfigUse {
  bool compressed_tensors = false;
  std::string description;
};

/// The module a stored key is a part of (`<module>.<role>`, any role of kAllRoles), or nullopt:
/// the one rule by which group_tensors puts a module's parts together.
std::optional<std::string> module_of_key(std::string_view key);

/// Groups entries (in file order) into logical tensors, as far as config.json describes them: with
/// no compressed-tensors config (`config_json` empty, or a config of another quant_method) every
/// entry is a plain tensor, exactly as safetensors reads it. `file_of` names a file index in errors.
/// `use`, when given, receives what the config made of the checkpoint. `classes` (may be null) are
/// the caller's module classes, for config groups that target class names.
std::vector<TensorInfo> group_tensors(const std::vector<RawTensor>& raw, const std::string& config_json,
                                      const std::string& config_file, const SmallReader& read_small,
                                      const std::function<std::string(uint32_t)>& file_of, ConfigUse* use = nullptr,
                                      const ModuleClasses* classes = nullptr);

}  // namespace ctstream::format
