// ctstream demo [DIR] — the embedded default job: generates a small Llama-shaped checkpoint
// (bf16, two shards + index + config.json), streams every tensor back into one reused caller
// buffer as bf16 and as fp32, checks the values, and prints what it did.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli.hpp"
#include "synth.hpp"

namespace fs = std::filesystem;

namespace cli {
int cmd_demo(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"--pread"}, {"--threads"});
  const fs::path dir = a.pos.empty() ? fs::temp_directory_path() / "ctstream-demo" : fs::path(a.pos[0]);
  fs::create_directories(dir);
  std::printf("ctstream demo — ISA %s, model dir %s\n\n", ctstream::active_isa(), dir.c_str());

  // 1. Write: two shards, an index and a config, as save_pretrained would.
  const double t0 = now_seconds();
  SynthSpec spec;  // 4 layers, hidden 512: ~40 MiB of bf16
  spec.layers = 4, spec.hidden = 512, spec.intermediate = 1376, spec.vocab = 8192, spec.shards = 2;
  const uint64_t total = write_synthetic_llama(dir, spec);
  const size_t n_tensors = llama_specs(spec).size();
  const double t_write = now_seconds() - t0;

  // 2. Open: headers, index and config only.
  const double t1 = now_seconds();
  auto ckpt = ctstream::Checkpoint::open(dir, open_options(a));
  const double t_open = now_seconds() - t1;

  // 3. Stream back into one reused caller buffer, per output dtype, and check every value.
  uint64_t largest = 0;
  for (const auto& t : ckpt.tensors()) largest = std::max(largest, t.decoded_bytes(ctstream::DType::F32));
  std::vector<std::byte> buf(largest);
  std::vector<uint16_t> expect;
  size_t mismatches = 0;
  struct Row {
    const char* what;
    double secs;
    uint64_t bytes;
  };
  std::vector<Row> rows;
  for (ctstream::DType out : {ctstream::DType::BF16, ctstream::DType::F32}) {
    uint64_t bytes = 0;
    double secs = 0;
    for (const auto& t : ckpt.tensors()) {
      const double s = now_seconds();
      bytes += ckpt.decode_into(t, buf, out);
      secs += now_seconds() - s;
      expect.resize(t.numel());
      fill_bf16(t.name, expect.size(), expect.data());
      for (uint64_t i = 0; i < expect.size(); ++i) {
        uint32_t got;
        if (out == ctstream::DType::BF16) {
          uint16_t h;
          std::memcpy(&h, buf.data() + 2 * i, 2);
          got = static_cast<uint32_t>(h) << 16;
        } else {
          std::memcpy(&got, buf.data() + 4 * i, 4);
        }
        mismatches += got != (static_cast<uint32_t>(expect[i]) << 16);
      }
    }
    rows.push_back({out == ctstream::DType::BF16 ? "decode -> bf16 (copy)" : "decode -> fp32 (widen)", secs, bytes});
  }

  std::printf("%-26s %8s %12s %10s %10s\n", "step", "tensors", "bytes", "seconds", "GB/s");
  std::printf("%-26s %8zu %12s %10.4f %10.2f\n", "write 2 shards + index", n_tensors, human_bytes(total).c_str(),
              t_write, total / t_write / 1e9);
  std::printf("%-26s %8zu %12s %10.4f %10s\n", "open (headers only)", ckpt.tensors().size(), "-", t_open, "-");
  for (const auto& r : rows)
    std::printf("%-26s %8zu %12s %10.4f %10.2f\n", r.what, ckpt.tensors().size(), human_bytes(r.bytes).c_str(),
                r.secs, r.bytes / r.secs / 1e9);
  std::printf("\nvalues checked: %s (%zu mismatches); caller buffer %s; peak RSS %s\n",
              mismatches ? "FAILED" : "all equal", mismatches, human_bytes(largest).c_str(),
              human_bytes(peak_rss_bytes()).c_str());
  return mismatches ? 1 : 0;
}

}  // namespace cli
