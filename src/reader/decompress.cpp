#include "ctstream/decompress.hpp"

#include <string>
#include <vector>

#include "core/boundary.hpp"
#include "core/paths.hpp"
#include "ctstream/safetensors_writer.hpp"
#include "io/output.hpp"

namespace ctstream {
namespace {

namespace fs = std::filesystem;

/// Refuses an output that is one of the files the checkpoint was opened from (its shards, its
/// index, config.json, decompose_config.json: Checkpoint::source_files(), compared by the
/// identity each had when it was read, so that links, hard links and other spellings are caught
/// wherever those files lie, shards in a subdirectory of the index included), or that lies inside
/// the checkpoint's directory (one holding a config or an index: a model directory, whose next
/// open would read the output back as part of it). What else the output may be is the io rule
/// (io::check_output), which SafetensorsWriter applies again.
void check_output(const Checkpoint& ckpt, const fs::path& out) {
  const auto sources = ckpt.source_files();
  std::vector<io::FileIdentity> inputs;
  for (const auto& f : sources) inputs.push_back({f.path, f.device, f.inode});
  (void)io::check_output(out, io::OutputKind::file, false, inputs);
  std::error_code ec;
  // One bare .safetensors file opened as a file: its directory is not the model's. A directory
  // opened (even one holding a single file and nothing else) is.
  const bool opened_dir = fs::is_directory(fs::path(ckpt.name()), ec);
  if (sources.size() < 2 && !opened_dir) return;
  const fs::path out_c = fs::weakly_canonical(fs::absolute(out, ec).lexically_normal(), ec);
  for (const auto& f : sources) {
    const fs::path dir = fs::weakly_canonical(fs::absolute(f.path, ec).parent_path(), ec);
    if (detail::path_within(out_c, dir))
      throw Error(ErrorKind::invalid_argument, out.string(), "",
                  "the output lies inside the checkpoint directory " + dir.string() +
                      " (it would be read back as part of the checkpoint); choose a path outside it");
  }
}

}  // namespace

DType decompressed_dtype(const TensorInfo& t, const DecompressOptions& opt) noexcept {
  return output_dtype(t, opt.dtype);
}

uint64_t decompress_to_file(const Checkpoint& ckpt, const std::filesystem::path& out, const DecompressOptions& opt) {
  return detail::at_boundary(out.string(), "", [&]() -> uint64_t {
    check_output(ckpt, out);
    std::error_code ec;
    if (!opt.overwrite && fs::symlink_status(out, ec).type() != fs::file_type::not_found && !ec)
      throw Error(ErrorKind::invalid_argument, out.string(), "",
                  "the output file already exists (--overwrite replaces it)");
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
      if (opt.progress) detail::call_caller(opt.progress, i + 1, tensors.size(), t);
    }
    w.commit();
    return total;
  });
}

}  // namespace ctstream
