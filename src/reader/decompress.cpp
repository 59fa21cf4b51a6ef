#include "ctstream/decompress.hpp"

#include <sys/stat.h>

#include <string>
#include <vector>

#include "core/boundary.hpp"
#include "core/paths.hpp"
#include "ctstream/safetensors_writer.hpp"
#include "format/low_rank.hpp"

namespace ctstream {
namespace {

namespace fs = std::filesystem;

/// Refuses an output that is one of the files the checkpoint was opened from (its shards, its
/// index, the config.json and decompose_config.json beside them) or that lies inside the
/// checkpoint's directory (one holding a config or an index: a model directory, whose next open
/// would read the output back as part of it). Files that exist are compared by (st_dev, st_ino),
/// so that links and other spellings are caught; other paths lexically, resolved.
void check_output(const Checkpoint& ckpt, const fs::path& out) {
  const auto files = ckpt.files();
  if (files.empty()) return;
  std::error_code ec;
  const fs::path dir = fs::absolute(files.front(), ec).parent_path();
  std::vector<fs::path> inputs(files.begin(), files.end());
  bool model_dir = files.size() > 1;
  for (const fs::path& extra : {dir / "config.json", dir / std::string(format::kDecomposeConfigName)})
    if (fs::exists(extra, ec)) {
      inputs.push_back(extra);
      model_dir = true;
    }
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() >= 23 && name.compare(name.size() - 23, 23, ".safetensors.index.json") == 0) {
      inputs.push_back(it->path());
      model_dir = true;
    }
  }
  const fs::path out_c = fs::weakly_canonical(fs::absolute(out, ec).lexically_normal(), ec);
  struct stat os {};
  const bool out_exists = ::stat(out.c_str(), &os) == 0;
  for (const fs::path& f : inputs) {
    struct stat st {};
    const bool same = out_exists && ::stat(f.c_str(), &st) == 0
                          ? st.st_dev == os.st_dev && st.st_ino == os.st_ino
                          : fs::weakly_canonical(fs::absolute(f, ec).lexically_normal(), ec) == out_c;
    if (same)
      throw Error(ErrorKind::invalid_argument, out.string(), "",
                  "the output is one of the checkpoint's own files (" + f.string() + "); choose another path");
  }
  if (model_dir && detail::path_within(out_c, fs::weakly_canonical(dir, ec)))
    throw Error(ErrorKind::invalid_argument, out.string(), "",
                "the output lies inside the checkpoint directory " + dir.string() +
                    " (it would be read back as part of the checkpoint); choose a path outside it");
}

}  // namespace

DType decompressed_dtype(const TensorInfo& t, const DecompressOptions& opt) noexcept {
  return output_dtype(t, opt.dtype);
}

uint64_t decompress_to_file(const Checkpoint& ckpt, const std::filesystem::path& out, const DecompressOptions& opt) {
  return detail::at_boundary(out.string(), "", [&]() -> uint64_t {
    check_output(ckpt, out);
    const auto tensors = ckpt.tensors();
    std::vector<SafetensorsWriter::Entry> entries;
    entries.reserve(tensors.size());
    for (const auto& t : tensors) entries.push_back({t.name, decompressed_dtype(t, opt), t.shape});
    SafetensorsWriter w(out, std::move(entries), {{"format", "pt"}});
    uint64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (opt.cancel && opt.cancel->load())
        throw Error(ErrorKind::io, out.string(), "", "cancelled; nothing was written");
      const auto& t = tensors[i];
      // In pieces of ~64 MiB: memory stays flat whatever size a tensor claims (the file grows).
      total +=
          ckpt.decode_chunked(t, decompressed_dtype(t, opt), uint64_t{64} << 20, [&](std::span<const std::byte> b) {
            if (opt.cancel && opt.cancel->load())
              throw Error(ErrorKind::io, out.string(), "", "cancelled; nothing was written");
            w.write(b);
          });
      if (opt.progress) opt.progress(i + 1, tensors.size(), t);
    }
    w.commit();
    return total;
  });
}

}  // namespace ctstream
