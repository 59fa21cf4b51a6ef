// libFuzzer target: the whole open + decode path on arbitrary bytes. Input = one selector byte
// (which config.json sits beside the file: none, or one of the fixture configs of each format
// family) + the bytes of a .safetensors file. Any crash, sanitizer report or non-ctstream
// exception is a bug; ctstream::Error is the expected outcome for bad input.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "structured.hpp"

namespace fs = std::filesystem;

namespace {
const char* const kConfigCases[] = {
    nullptr,
    "v020_pack_w4_g32_asym_bf16",
    "v020_pack_w3_g16_asym_bf16",
    "v012_pack_w5_g32_sym_bf16",
    "v012_pack_w4_g32_actorder_bf16",
    "v012_sparse_bitmask_bf16",
    "v012_sparse24_fp8_bf16",
    "v020_nvfp4a16_bf16",
    "v020_mxfp6a16_bf16",
    "v020_fp8_block128_colsragged_bf16",
    "v020_mixed_int4g32_fp8ch_bf16",
};
constexpr size_t kCases = sizeof(kConfigCases) / sizeof(kConfigCases[0]);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t sel = data[0] % kCases;
  const fs::path dir = fz::scratch_dir("checkpoint");  // /dev/shm: a disk write per input was a third of the time
  {
    std::ofstream f(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  // The fixture configs are read once (a copy_file per input can fail with EINTR when
  // libFuzzer's timer signal lands inside its sendfile).
  static const std::vector<std::string> configs = [] {
    std::vector<std::string> v(kCases);
    for (size_t i = 0; i < kCases; ++i)
      if (kConfigCases[i]) {
        std::ifstream f(fs::path(CTSTREAM_FIXTURES) / "ct" / kConfigCases[i] / "config.json", std::ios::binary);
        v[i].assign(std::istreambuf_iterator<char>(f), {});
      }
    return v;
  }();
  std::error_code ec;
  fs::remove(dir / "config.json", ec);
  if (kConfigCases[sel]) fz::write_file(dir / "config.json", configs[sel]);
  for (auto io : {ctstream::IoMode::mmap, ctstream::IoMode::pread}) {
    try {
      ctstream::OpenOptions o;
      o.io = io;
      o.threads = 1;
      auto ck = ctstream::Checkpoint::open(dir, o);
      std::vector<std::byte> buf;
      for (const auto& t : ck.tensors()) {
        for (auto d : {ctstream::DType::BF16, ctstream::DType::F32}) {
          if (t.decoded_bytes(d) > (64u << 20)) continue;
          buf.resize(t.decoded_bytes(d));
          try {
            ck.decode_into(t, buf, ctstream::is_float_output(t.dtype) || t.quantized ? d : t.dtype);
            if (t.shape.size() == 2 && t.shape[1] > 2) ck.decode_into(t, buf, d, ctstream::Slice{1, 1, t.shape[1] - 1});
          } catch (const ctstream::Error&) {
          }
        }
      }
    } catch (const ctstream::Error&) {
    }
  }
  return 0;
}
