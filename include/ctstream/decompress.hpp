// ctstream — decode a whole checkpoint into one plain safetensors file (what `ctstream
// decompress` does), streaming: each tensor is decoded in pieces of about 64 MiB
// (Checkpoint::decode_chunked), so peak memory is one piece (one leading-dim slice when a single
// slice is larger), not the largest decoded tensor.
#pragma once
#include <atomic>
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
  /// Polled between tensors; when it becomes true the call throws Error{io, "cancelled"} and
  /// leaves nothing behind (e.g. set from a SIGINT handler).
  const std::atomic<bool>* cancel = nullptr;
  /// An existing output file is replaced (the library's default); false refuses it,
  /// Error{invalid_argument} (`ctstream decompress` without --overwrite: a writer touches only
  /// files it owns).
  bool overwrite = true;
};

/// The dtype `t` is written as under `opt`.
DType decompressed_dtype(const TensorInfo& t, const DecompressOptions& opt) noexcept;

/// Decodes every tensor and writes `out` (temp file + rename). Each tensor is validated
/// (Checkpoint::validate) before its buffer is sized, so a damaged one is reported without
/// allocating its decoded size. `out` may not be one of the files the checkpoint was opened from
/// (Checkpoint::source_files(), by identity: a link to one counts) nor lie in its directory
/// (Error{invalid_argument}); nor anything but a regular file, nor an output that appeared during
/// the run (Error{io}; see ctstream/safetensors_writer.hpp). An existing regular file is replaced
/// when `opt.overwrite`.
/// @return tensor bytes written.
uint64_t decompress_to_file(const Checkpoint& ckpt, const std::filesystem::path& out,
                            const DecompressOptions& opt = {});

}  // namespace ctstream
