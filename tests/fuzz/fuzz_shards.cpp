// libFuzzer target: a sharded checkpoint directory. Input: byte 0 = number of shards (1..3) and a
// config selector; then per shard a 16-bit length and that many bytes of the shard file; the rest
// is model.safetensors.index.json. The directory is opened in both io modes and every tensor
// decoded. Only ctstream::Error may come out; shard names must never leave the directory.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "structured.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz::Bytes in(data, size);
  const uint8_t head = in.u8();
  const unsigned shards = 1 + head % 3;
  const fs::path dir = fz::scratch_dir("shards") / "ckpt";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  for (unsigned k = 0; k < shards; ++k) {
    const size_t n = in.u16() % 4096;
    fz::write_file(dir / ("model-0000" + std::to_string(k + 1) + "-of-0000" + std::to_string(shards) + ".safetensors"),
                   in.take(std::min(n, in.left())));
  }
  fz::write_file(dir / "model.safetensors.index.json", in.take(in.left()));
  if (head & 0x80)
    fz::write_file(
        dir / "config.json",
        "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
        "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4,\"group_size\":8}}}}}");
  for (auto io : {ctstream::IoMode::mmap, ctstream::IoMode::pread}) {
    try {
      ctstream::OpenOptions o;
      o.io = io;
      o.threads = 1;
      const auto ck = ctstream::Checkpoint::open(dir, o);
      for (const auto& f : ck.files())
        if (fs::weakly_canonical(f).parent_path() != fs::weakly_canonical(dir)) __builtin_trap();
      std::vector<std::byte> buf;
      for (const auto& t : ck.tensors()) {
        try {
          ck.validate(t);
          const auto d = ctstream::is_float_output(t.dtype) || t.quantized ? ctstream::DType::F32 : t.dtype;
          buf.resize(t.decoded_bytes(d));
          ck.decode_into(t, buf, d);
        } catch (const ctstream::Error&) {
        }
      }
    } catch (const ctstream::Error&) {
    }
  }
  return 0;
}
