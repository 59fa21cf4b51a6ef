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

namespace fs = std::filesystem;

namespace cli {
namespace {

struct Spec {
  std::string name;
  ctstream::Shape shape;
};

std::vector<Spec> llama_specs(unsigned layers, uint64_t hidden, uint64_t inter, uint64_t vocab) {
  std::vector<Spec> s{{"model.embed_tokens.weight", {vocab, hidden}}};
  for (unsigned l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      s.push_back({p + n + ".weight", {hidden, hidden}});
    s.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
    s.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
    s.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
    s.push_back({p + "input_layernorm.weight", {hidden}});
    s.push_back({p + "post_attention_layernorm.weight", {hidden}});
  }
  s.push_back({"model.norm.weight", {hidden}});
  s.push_back({"lm_head.weight", {vocab, hidden}});
  return s;
}

// Deterministic values per tensor: splitmix64 seeded by the name, mapped to ~U(-0.05, 0.05) bf16.
void fill_bf16(const std::string& name, uint64_t n, uint16_t* out) {
  uint64_t x = std::hash<std::string>{}(name);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float f = (static_cast<float>(z >> 40) / 16777216.0f - 0.5f) * 0.1f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    out[i] = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
  }
}

uint64_t numel(const ctstream::Shape& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"--pread"}, {"--threads"});
  const fs::path dir = a.pos.empty() ? fs::temp_directory_path() / "ctstream-demo" : fs::path(a.pos[0]);
  fs::create_directories(dir);
  const auto specs = llama_specs(4, 512, 1376, 8192);
  std::printf("ctstream demo — ISA %s, model dir %s\n\n", ctstream::active_isa(), dir.c_str());

  // 1. Write: two shards, an index and a config, as save_pretrained would.
  const double t0 = now_seconds();
  const size_t split = specs.size() / 2;
  nlohmann::ordered_json weight_map;
  uint64_t total = 0;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string fname = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    std::vector<ctstream::SafetensorsWriter::Entry> entries;
    for (size_t i = shard ? split : 0; i < (shard ? specs.size() : split); ++i) {
      entries.push_back({specs[i].name, ctstream::DType::BF16, specs[i].shape});
      weight_map[specs[i].name] = fname;
    }
    ctstream::SafetensorsWriter w(dir / fname, entries, {{"format", "pt"}});
    std::vector<uint16_t> buf;
    for (const auto& e : entries) {
      buf.resize(numel(e.shape));
      fill_bf16(e.name, buf.size(), buf.data());
      w.write(std::as_bytes(std::span(buf)));
      total += buf.size() * 2;
    }
    w.commit();
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::ordered_json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
  std::ofstream(dir / "config.json") << nlohmann::ordered_json{{"architectures", {"LlamaForCausalLM"}},
                                                                {"hidden_size", 512},
                                                                {"intermediate_size", 1376},
                                                                {"num_hidden_layers", 4},
                                                                {"vocab_size", 8192},
                                                                {"torch_dtype", "bfloat16"}}
                                            .dump(2);
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
  std::printf("%-26s %8zu %12s %10.4f %10.2f\n", "write 2 shards + index", specs.size(), human_bytes(total).c_str(),
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
