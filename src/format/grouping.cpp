#include "format/grouping.hpp"

namespace ctstream::format {

TensorInfo dense_tensor(const RawTensor& r) {
  TensorInfo t;
  t.name = r.key;
  t.shape = r.shape;
  t.dtype = r.dtype;
  t.format = Format::dense;
  t.parts.push_back(TensorPart{"weight", r.key, r.dtype, r.shape, r.file, r.offset, r.nbytes});
  return t;
}

std::vector<TensorInfo> group_tensors(const std::vector<RawTensor>& raw, const std::string& /*config_json*/,
                                      const std::string& /*config_file*/) {
  std::vector<TensorInfo> out;
  out.reserve(raw.size());
  for (const auto& r : raw) out.push_back(dense_tensor(r));
  return out;
}

}  // namespace ctstream::format
