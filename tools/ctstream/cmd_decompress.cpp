// ctstream decompress PATH OUT.safetensors [--dtype bf16|fp16|fp32] [--overwrite]
#include <cstdio>

#include "cli.hpp"

namespace cli {

int cmd_decompress(int argc, char** argv) {
  Args a = parse(argc, argv, 2, with_open_switches({"--quiet", "--overwrite"}),
                 {"--dtype", "--threads", "--module-classes"});
  if (a.pos.size() != 2) throw std::invalid_argument("decompress needs PATH and OUT.safetensors");
  auto ckpt = ctstream::Checkpoint::open(a.pos[0], open_options(a));
  ctstream::DecompressOptions opt;
  if (a.has("--dtype")) opt.dtype = parse_dtype(a.get("--dtype"));
  opt.overwrite = a.has("--overwrite");
  const bool tty = stdout_is_terminal() && !a.has("--quiet");
  if (tty)
    opt.progress = [](size_t done, size_t total, const ctstream::TensorInfo&) {
      std::printf("\rdecompressing %zu/%zu", done, total);
      std::fflush(stdout);
    };
  SignalCancel signals;
  opt.cancel = signals.flag();
  const double t0 = now_seconds();
  uint64_t bytes = 0;
  try {
    bytes = ctstream::decompress_to_file(ckpt, a.pos[1], opt);
  } catch (const ctstream::Error&) {
    if (tty) std::printf("\n");
    if (signals.cancelled()) {
      std::fprintf(stderr, "ctstream decompress: interrupted; no output was written\n");
      return 130;
    }
    throw;
  }
  const double dt = now_seconds() - t0;
  if (tty) std::printf("\n");
  if (!a.has("--quiet"))
    std::printf("wrote %s: %zu tensors, %s in %.3f s (%.2f GB/s), peak RSS %s\n", a.pos[1].c_str(),
                ckpt.tensors().size(), human_bytes(bytes).c_str(), dt, dt > 0 ? bytes / dt / 1e9 : 0.0,
                human_bytes(peak_rss_bytes()).c_str());
  return 0;
}

}  // namespace cli
