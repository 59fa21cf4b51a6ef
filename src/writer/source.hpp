// writer — the checkpoint-on-disk TensorSource behind compress_checkpoint (BufferSource, its
// in-memory sibling, is public in ctstream/writer.hpp).
#pragma once
#include <filesystem>
#include <set>

#include "ctstream/checkpoint.hpp"
#include "ctstream/writer.hpp"
#include "format/file_names.hpp"

namespace ctstream::writer {

class CheckpointSource final : public TensorSource {
 public:
  CheckpointSource(const std::filesystem::path& in, const OpenOptions& open);
  std::span<const TensorInfo> tensors() const override { return ck_.tensors(); }
  /// Validates the tensor's data (once) before its first read; compressed inputs decode.
  void read(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType dtype) override;
  std::string origin(size_t i) const override;
  std::string config_json() const override { return ck_.config_json(); }
  std::string config_origin() const override { return (dir_ / format::kConfigName).string(); }
  const Checkpoint& checkpoint() const { return ck_; }

 private:
  Checkpoint ck_;
  std::filesystem::path in_, dir_;
  std::set<size_t> validated_;
};

}  // namespace ctstream::writer
