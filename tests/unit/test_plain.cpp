// A file that is not a compressed-tensors checkpoint (no config.json, a config.json without a
// quantization_config, or one of another quant_method such as AutoFP8's "fp8") reads entry by entry
// exactly as stored: same keys, dtypes, shapes and bytes as the file's own header says (parsed here
// independently of the reader). Only a compressed-tensors config makes the reader group parts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

struct StoredEntry {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<std::byte> bytes;
};

// The safetensors layout (u64 LE header length, JSON header, data), read without ctstream.
std::map<std::string, StoredEntry> read_stored(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(all.size() >= 8);
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  const auto header = nlohmann::json::parse(std::string(all.data() + 8, n));
  std::map<std::string, StoredEntry> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    StoredEntry e{it.value()["dtype"].get<std::string>(), it.value()["shape"].get<std::vector<uint64_t>>(), {}};
    const auto off = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    const auto* p = reinterpret_cast<const std::byte*>(all.data() + 8 + n);
    e.bytes.assign(p + off[0], p + off[1]);
    out.emplace(it.key(), std::move(e));
  }
  return out;
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

void require_plain(const fs::path& dir, IoMode io, bool stored_entries = false) {
  OpenOptions o;
  o.io = io;
  o.stored_entries = stored_entries;
  const Checkpoint ck = Checkpoint::open(dir, o);
  CHECK_FALSE(ck.config_info().compressed_tensors);
  const auto stored = read_stored(dir / "model.safetensors");
  REQUIRE(ck.tensors().size() == stored.size());
  for (const auto& [key, e] : stored) {
    INFO(dir.filename().string() << " " << key);
    const TensorInfo* t = ck.find(key);
    REQUIRE(t != nullptr);
    CHECK(t->format == Format::dense);
    CHECK_FALSE(t->quantized);
    CHECK(std::string(dtype_name(t->dtype)) == e.dtype);
    CHECK(t->shape == e.shape);
    std::vector<std::byte> out(t->decoded_bytes(t->dtype));
    out.resize(ck.decode_into(*t, out, t->dtype));
    CHECK(out == e.bytes);
  }
}

}  // namespace

TEST_CASE("a file without a compressed-tensors config reads as safetensors reads it", "[reader][plain]") {
  th::TempDir tmp("plain");
  // Real checkpoints of the library, each with parts the reader would group under their config:
  // fp8 weight + weight_scale, sparse bitmask parts, packed int4 with zero points, int8 + scale.
  for (const char* name : {"v020_fp8_channel_dynamic_bf16", "v012_sparse_bitmask_bf16", "v020_pack_w4_g32_asym_bf16",
                           "v020_int8_w8a8_channel_sym_bf16", "v012_sparse24_fp8_bf16", "v020_nvfp4a16_bf16"}) {
    const fs::path src = th::fixtures() / "ct" / name;
    // With their own config they are compressed-tensors checkpoints (so the cases below can fail).
    const Checkpoint own = Checkpoint::open(src);
    CHECK(own.config_info().compressed_tensors);
    CHECK(own.config_info().file == src / "config.json");
    CHECK(own.tensors().size() < read_stored(src / "model.safetensors").size());
    // Asked for its stored entries, the same checkpoint reads as safetensors reads it; its
    // config.json is unread but still one of its files (writers refuse to overwrite it).
    require_plain(src, IoMode::mmap, true);
    require_plain(src, IoMode::pread, true);
    {
      OpenOptions o;
      o.stored_entries = true;
      const Checkpoint st = Checkpoint::open(src, o);
      CHECK(std::any_of(st.source_files().begin(), st.source_files().end(),
                        [&](const Checkpoint::SourceFile& f) { return f.path == src / "config.json"; }));
    }

    const fs::path d = tmp.path / name;
    fs::create_directories(d);
    fs::copy_file(src / "model.safetensors", d / "model.safetensors");
    const std::vector<std::pair<std::string, std::string>> configs = {
        {"", "no config.json"},
        {R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})", "no compressed-tensors"},
        {R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}})", "\"fp8\""},
        {R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}})", "\"gptq\""},
    };
    for (const auto& [cfg, why] : configs) {
      fs::remove(d / "config.json");
      if (!cfg.empty()) write_text(d / "config.json", cfg);
      INFO(name << " with " << why);
      require_plain(d, IoMode::mmap);
      require_plain(d, IoMode::pread);
      const Checkpoint ck = Checkpoint::open(d);
      CHECK(ck.config_info().description.find(why) != std::string::npos);
      CHECK(ck.config_info().file == (cfg.empty() ? fs::path() : d / "config.json"));
      // The single file opened directly finds the same config beside it.
      CHECK_FALSE(Checkpoint::open(d / "model.safetensors").config_info().compressed_tensors);
    }
  }
}

TEST_CASE("entries named like compressed parts are plain tensors without a config that says so", "[reader][plain]") {
  th::TempDir tmp("plain-names");
  const fs::path d = tmp.path;
  // Every suffix the reader knows, alone or in sets it would group under a compressed-tensors
  // config; plus an int8 weight with a 1-D scale (no strategy a config could give).
  const std::vector<std::tuple<std::string, DType, Shape>> entries = {
      {"a.bitmask", DType::U8, {4, 2}},
      {"b.compressed", DType::F16, {6}},
      {"c.row_offsets", DType::I64, {4}},
      {"d.weight_shape", DType::I64, {2}},
      {"e.weight", DType::I8, {4, 8}},
      {"e.weight_scale", DType::F32, {4}},
      {"f.shape", DType::I64, {2}},
      {"f.compressed", DType::BF16, {5}},
      {"f.bitmask", DType::U8, {2, 1}},
      {"g.weight_packed", DType::I32, {2, 1}},
      {"g.weight_scale", DType::BF16, {2, 1}},
      {"g.weight_zero_point", DType::I32, {1, 1}},
      {"h.weight", DType::F8_E4M3, {2, 16}},
      {"h.weight_scale", DType::F32, {1}},
      {"i.weight_packed", DType::U8, {2, 8}},
      {"i.weight_global_scale", DType::F32, {1}},
  };
  std::vector<SafetensorsWriter::Entry> es;
  for (const auto& [n, dt, sh] : entries) es.push_back({n, dt, sh});
  {
    SafetensorsWriter w(d / "model.safetensors", es);
    uint64_t seed = 1;
    for (const auto& [n, dt, sh] : entries) {
      uint64_t elems = 1;
      for (auto x : sh) elems *= x;
      w.write(th::random_bytes(elems * dtype_bits(dt) / 8, seed++));
    }
    w.commit();
  }
  require_plain(d, IoMode::mmap);
  require_plain(d, IoMode::pread);
  // Under a compressed-tensors config that quantizes, a lone weight_shape is a damaged checkpoint
  // again: the rule is the config's, not the key's.
  write_text(d / "config.json",
             R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                 "version": "0.20.0", "config_groups": {"group_0": {"targets": ["re:^zzz$"],
                 "weights": {"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": true}}}}})");
  CHECK_THROWS_WITH(Checkpoint::open(d), Catch::Contains("weight_shape without weight_packed"));
}
