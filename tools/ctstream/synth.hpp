// Synthetic Llama-shaped dense checkpoints (deterministic values) for the demo, the benchmarks
// and the memory tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ctstream/ctstream.hpp>

namespace cli {

struct SynthSpec {
  unsigned layers = 4;
  uint64_t hidden = 512, intermediate = 1376, vocab = 8192;
  unsigned shards = 1;
  ctstream::DType dtype = ctstream::DType::BF16;  ///< BF16, F16 or F32
  /// Magnitude pruning of the 2-D weights: values with |x| below prune * 0.05 are zero (0.5:
  /// half of them, as a 50%-sparse model after magnitude pruning).
  double prune = 0;
  /// Called after each tensor written (bytes done, bytes total).
  std::function<void(uint64_t, uint64_t)> progress;
};

struct SynthTensor {
  std::string name;
  ctstream::Shape shape;
};
std::vector<SynthTensor> llama_specs(const SynthSpec& s);
/// Deterministic values of tensor `name` as bf16 bits (~U(-0.05, 0.05)); with `prune` > 0 those
/// with |x| < prune * 0.05 are +0.
void fill_bf16(const std::string& name, uint64_t n, uint16_t* out, double prune = 0);
/// Writes shards + model.safetensors.index.json (when shards > 1) + config.json as the directory
/// `dir`: into a fresh directory beside it, which then takes its name. An existing `dir` must be
/// an empty directory unless `overwrite` (then it is replaced). Throws std::invalid_argument /
/// std::runtime_error / std::filesystem::filesystem_error, ctstream::Error from the writer.
/// @return tensor bytes written.
uint64_t write_synthetic_llama(const std::filesystem::path& dir, const SynthSpec& s, bool overwrite = false);

int cmd_synth(int argc, char** argv);

}  // namespace cli
