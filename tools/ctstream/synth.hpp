// Synthetic Llama-shaped dense checkpoints (deterministic values) for the demo, the benchmarks
// and the memory tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <ctstream/ctstream.hpp>

namespace cli {

struct SynthSpec {
  unsigned layers = 4;
  uint64_t hidden = 512, intermediate = 1376, vocab = 8192;
  unsigned shards = 1;
  ctstream::DType dtype = ctstream::DType::BF16;  ///< BF16, F16 or F32
};

struct SynthTensor {
  std::string name;
  ctstream::Shape shape;
};
std::vector<SynthTensor> llama_specs(const SynthSpec& s);
/// Deterministic values of tensor `name` as bf16 bits (~U(-0.05, 0.05)).
void fill_bf16(const std::string& name, uint64_t n, uint16_t* out);
/// Writes shards + model.safetensors.index.json (when shards > 1) + config.json into `dir`.
/// @return tensor bytes written.
uint64_t write_synthetic_llama(const std::filesystem::path& dir, const SynthSpec& s);

int cmd_synth(int argc, char** argv);

}  // namespace cli
