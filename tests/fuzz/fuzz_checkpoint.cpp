// libFuzzer target: the whole open + decode path on arbitrary bytes. Input = one selector byte
// (its low 7 bits: which config.json sits beside the file: none, or one of the fixture configs of
// each format family) + the bytes of a .safetensors file. With the selector's top bit set, the
// bytes after it are a model.safetensors.index.json and two shards it may name, each of the
// first two parts after a 4-byte little-endian length; the first shard is opened on its own
// (OpenOptions::sibling_shards: the index, the siblings, the one-shard listing).
// Any crash, sanitizer report or non-ctstream exception is a bug; ctstream::Error is the expected
// outcome for bad input.
#include <algorithm>
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
  const size_t sel = (data[0] & 0x7F) % kCases;
  const bool one_shard = data[0] & 0x80;
  const fs::path dir = fz::scratch_dir("checkpoint");  // /dev/shm: a disk write per input was a third of the time
  static const char* const kShards[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  std::error_code ec;
  for (const char* n : kShards) fs::remove(dir / n, ec);
  fs::remove(dir / "model.safetensors", ec);
  fs::remove(dir / "model.safetensors.index.json", ec);
  size_t at = 1;
  const auto part = [&](bool last) {  // the next length-prefixed part, or the rest
    size_t len = size - at;
    if (!last) {
      uint32_t n = 0;
      for (int k = 0; k < 4; ++k) n |= at < size ? uint32_t{data[at++]} << (8 * k) : 0u;
      len = std::min<size_t>(n, size - at);
    }
    std::string out(reinterpret_cast<const char*>(data + at), len);
    at += len;
    return out;
  };
  fs::path open_path = dir;
  if (one_shard) {
    fz::write_file(dir / "model.safetensors.index.json", part(false));
    fz::write_file(dir / kShards[0], part(false));
    fz::write_file(dir / kShards[1], part(true));
    open_path = dir / kShards[0];
  } else {
    fz::write_file(dir / "model.safetensors", part(true));
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
  fs::remove(dir / "config.json", ec);
  if (kConfigCases[sel]) fz::write_file(dir / "config.json", configs[sel]);
  for (auto io : {ctstream::IoMode::mmap, ctstream::IoMode::pread}) {
    try {
      ctstream::OpenOptions o;
      o.io = io;
      o.threads = 1;
      auto ck = ctstream::Checkpoint::open(open_path, o);
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
