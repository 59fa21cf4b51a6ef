// libFuzzer target: decompose_config.json (ptdeco low-rank layout) -> modules -> merge into the
// original architecture's tensors. Input: the config text. The tensors it is merged with are the
// factors the config itself describes (so merges succeed and their checks run), plus the
// mutations the input's length selects (a missing factor, a wrong shape, an integer dtype, a
// stray bias, a clash with the original name): every outcome is a merged set whose shapes are the
// modules' original shapes, or a ctstream::Error.
#include <cstdint>
#include <string>
#include <vector>

#include "ctstream/error.hpp"
#include "format/low_rank.hpp"

using namespace ctstream;

namespace {
TensorInfo dense(const std::string& name, const Shape& shape, DType dtype, uint64_t& offset) {
  TensorInfo t;
  t.name = name;
  t.shape = shape;
  t.dtype = dtype;
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  t.parts.push_back({"weight", name, dtype, shape, 0, offset, n * 4});
  offset += n * 4;
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<format::LowRankModule> mods;
  try {
    mods = format::parse_decompose_config(text, "decompose_config.json");
  } catch (const Error&) {
    return 0;
  }
  const size_t mode = size % 8;  // any valid text can reach every mutation (trailing spaces)
  std::vector<TensorInfo> tensors;
  uint64_t off = 0;
  for (size_t i = 0; i < mods.size() && i < 64; ++i) {
    const auto& m = mods[i];
    // The parser bounds every dimension; keep the fake sizes small anyway (no data is read).
    Shape a = m.a_shape(), b = m.b_shape();
    if (mode == 1 && i == 0) a[0] += 1;
    tensors.push_back(dense(m.a_key(), a, mode == 2 && i == 0 ? DType::I32 : DType::F32, off));
    if (!(mode == 3 && i == 0)) tensors.push_back(dense(m.b_key(), b, DType::F32, off));
    if (m.bias != (mode == 4 && i == 0)) tensors.push_back(dense(m.bias_key(), {m.out}, DType::F32, off));
    if (mode == 5 && i == 0) tensors.push_back(dense(m.name + ".weight", m.weight_shape(), DType::F32, off));
  }
  tensors.push_back(dense("other.weight", {3, 3}, DType::F32, off));
  try {
    format::merge_low_rank(tensors, mods, "decompose_config.json");
  } catch (const Error&) {
    return 0;
  }
  if (mods.size() > 64) return 0;  // only the first 64 had factors: merge must have refused
  for (const auto& m : mods) {
    bool found = false;
    for (const auto& t : tensors)
      if (t.name == m.name + ".weight") {
        if (found || t.format != Format::low_rank || t.shape != m.weight_shape() || t.factors.size() != 2 ||
            t.factors[0].shape != m.a_shape() || t.factors[1].shape != m.b_shape())
          __builtin_trap();
        found = true;
      }
    if (!found) __builtin_trap();
  }
  return 0;
}
