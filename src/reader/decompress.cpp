#include "ctstream/decompress.hpp"

#include <vector>

#include "ctstream/safetensors_writer.hpp"

namespace ctstream {

DType decompressed_dtype(const TensorInfo& t, const DecompressOptions& opt) noexcept {
  if (!opt.dtype) return t.dtype;
  if (t.format != Format::dense || is_float_output(t.dtype)) return *opt.dtype;
  return t.dtype;
}

uint64_t decompress_to_file(const Checkpoint& ckpt, const std::filesystem::path& out, const DecompressOptions& opt) {
  const auto tensors = ckpt.tensors();
  std::vector<SafetensorsWriter::Entry> entries;
  entries.reserve(tensors.size());
  uint64_t largest = 0;
  for (const auto& t : tensors) {
    const DType d = decompressed_dtype(t, opt);
    entries.push_back({t.name, d, t.shape});
    largest = std::max(largest, t.decoded_bytes(d));
  }
  SafetensorsWriter w(out, std::move(entries), {{"format", "pt"}});
  std::vector<std::byte> buf(largest);
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const uint64_t n = ckpt.decode_into(t, buf, decompressed_dtype(t, opt));
    w.write({buf.data(), n});
    total += n;
    if (opt.progress) opt.progress(i + 1, tensors.size(), t);
  }
  w.commit();
  return total;
}

}  // namespace ctstream
