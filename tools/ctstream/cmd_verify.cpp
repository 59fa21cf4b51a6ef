// ctstream verify PATH — opens (all header/index/config checks), decodes every tensor, reports.
#include <cmath>
#include <cstdio>
#include <vector>

#include "cli.hpp"

namespace cli {

int cmd_verify(int argc, char** argv) {
  Args a = parse(argc, argv, 2, with_open_switches({"--quiet"}), {"--threads", "--module-classes"});
  if (a.pos.size() != 1) throw std::invalid_argument("verify needs exactly one PATH");
  auto ckpt = ctstream::Checkpoint::open(a.pos[0], open_options(a));
  size_t problems = 0, nonfinite_tensors = 0;
  uint64_t bytes = 0;
  for (const auto& t : ckpt.tensors()) {
    try {
      // Floats are checked through an F32 decode (finite-ness); other dtypes decode as stored.
      const bool is_float = ctstream::is_float_output(t.dtype) || t.format != ctstream::Format::dense;
      const ctstream::DType out = is_float ? ctstream::DType::F32 : t.dtype;
      // In pieces of ~64 MiB (a damaged tensor is reported before any is allocated): memory stays
      // flat whatever size a tensor claims.
      uint64_t bad = 0;
      bytes += ckpt.decode_chunked(t, out, uint64_t{64} << 20, [&](std::span<const std::byte> b) {
        if (!is_float) return;
        const float* f = reinterpret_cast<const float*>(b.data());
        for (size_t i = 0; i < b.size() / 4; ++i) bad += !std::isfinite(f[i]);
      });
      if (is_float) {
        if (bad) {
          ++nonfinite_tensors;
          std::printf("note: %s: %llu non-finite values (NaN/Inf)\n", t.name.c_str(),
                      static_cast<unsigned long long>(bad));
        }
      }
    } catch (const ctstream::Error& e) {
      ++problems;
      std::printf("problem [%s]: %s\n", std::string(ctstream::error_kind_name(e.kind())).c_str(), e.what());
    }
  }
  std::printf("%s: %zu tensors decoded (%s), %zu problem(s), %zu tensor(s) with non-finite values\n",
              ckpt.name().c_str(), ckpt.tensors().size(), human_bytes(bytes).c_str(), problems, nonfinite_tensors);
  return problems ? 1 : 0;
}

}  // namespace cli
