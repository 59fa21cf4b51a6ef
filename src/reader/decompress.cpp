#include "ctstream/decompress.hpp"

#include <vector>

#include "core/boundary.hpp"
#include "ctstream/safetensors_writer.hpp"

namespace ctstream {

DType decompressed_dtype(const TensorInfo& t, const DecompressOptions& opt) noexcept {
  return output_dtype(t, opt.dtype);
}

uint64_t decompress_to_file(const Checkpoint& ckpt, const std::filesystem::path& out, const DecompressOptions& opt) {
  return detail::at_boundary(out.string(), "", [&]() -> uint64_t {
    std::error_code ec;
    for (const auto& f : ckpt.files())
      if (std::filesystem::equivalent(f, out, ec))
        throw Error(ErrorKind::invalid_argument, out.string(), "", "the output is one of the checkpoint's own files");
    const auto tensors = ckpt.tensors();
    std::vector<SafetensorsWriter::Entry> entries;
    entries.reserve(tensors.size());
    for (const auto& t : tensors) entries.push_back({t.name, decompressed_dtype(t, opt), t.shape});
    SafetensorsWriter w(out, std::move(entries), {{"format", "pt"}});
    std::vector<std::byte> buf;
    uint64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (opt.cancel && opt.cancel->load())
        throw Error(ErrorKind::io, out.string(), "", "cancelled; nothing was written");
      const auto& t = tensors[i];
      ckpt.validate(t);  // a damaged tensor is refused before its decoded size is allocated
      const DType d = decompressed_dtype(t, opt);
      if (buf.size() < t.decoded_bytes(d)) {
        buf = {};  // the old buffer goes first: never both at once
        buf.resize(t.decoded_bytes(d));
      }
      const uint64_t n = ckpt.decode_into(t, buf, d);
      w.write({buf.data(), n});
      total += n;
      if (opt.progress) opt.progress(i + 1, tensors.size(), t);
    }
    w.commit();
    return total;
  });
}

}  // namespace ctstream
