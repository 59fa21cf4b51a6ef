// ctstream — decode a whole checkpoint into one plain safetensors file (what `ctstream
// decompress` does), streaming: peak memory is the largest decoded tensor.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>

#include "ctstream/checkpoint.hpp"

namespace ctstream {

struct DecompressOptions {
  /// Output dtype for floating tensors (every decoded compressed tensor included); nullopt keeps
  /// each tensor's natural dtype. Non-float tensors (ints, bools) are always copied as stored.
  std::optional<DType> dtype;
  /// Called after each tensor is written: (tensors done, total, that tensor).
  std::function<void(size_t, size_t, const TensorInfo&)> progress;
};

/// The dtype `t` is written as under `opt`.
DType decompressed_dtype(const TensorInfo& t, const DecompressOptions& opt) noexcept;

/// Decodes every tensor and writes `out` (temp file + rename). @return tensor bytes written.
uint64_t decompress_to_file(const Checkpoint& ckpt, const std::filesystem::path& out,
                            const DecompressOptions& opt = {});

}  // namespace ctstream
