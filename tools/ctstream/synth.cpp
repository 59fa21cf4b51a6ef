#include "synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <system_error>

#include "cli.hpp"

namespace cli {

std::vector<SynthTensor> llama_specs(const SynthSpec& sp) {
  const uint64_t h = sp.hidden, in = sp.intermediate;
  std::vector<SynthTensor> s{{"model.embed_tokens.weight", {sp.vocab, h}}};
  for (unsigned l = 0; l < sp.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      s.push_back({p + n + ".weight", {h, h}});
    s.push_back({p + "mlp.gate_proj.weight", {in, h}});
    s.push_back({p + "mlp.up_proj.weight", {in, h}});
    s.push_back({p + "mlp.down_proj.weight", {h, in}});
    s.push_back({p + "input_layernorm.weight", {h}});
    s.push_back({p + "post_attention_layernorm.weight", {h}});
  }
  s.push_back({"model.norm.weight", {h}});
  s.push_back({"lm_head.weight", {sp.vocab, h}});
  return s;
}

namespace {
// IEEE binary16 bits of a finite |v| < 65520, rounded to nearest even: in double arithmetic, so
// it needs no compiler half type (_Float16 is GCC / clang >= 15 on x86) and none of the code
// under test.
uint16_t to_f16_bits(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(v));
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);                                              // a = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 11, -24));  // 11 significant bits, subnormals 2^-24
  a = std::nearbyint(a / quantum) * quantum;                      // round half to even (default rounding mode)
  if (a < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(a / std::ldexp(1.0, -24)));
  std::frexp(a, &e);  // the rounding may have carried into 2^e
  const auto exp = static_cast<uint16_t>(e - 1 + 15);
  const auto mant = static_cast<uint16_t>((std::ldexp(a, -(e - 1)) - 1.0) * 1024.0);
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}
}  // namespace

void fill_bf16(const std::string& name, uint64_t n, uint16_t* out, double prune) {
  const float cut = static_cast<float>(prune * 0.05);
  uint64_t x = std::hash<std::string>{}(name);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float f = (static_cast<float>(z >> 40) / 16777216.0f - 0.5f) * 0.1f;
    if (std::fabs(f) < cut) f = 0.0f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    out[i] = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
  }
}

namespace {
namespace fs = std::filesystem;
// A name beside `final` no one else uses: mkdir fails, rather than follows, if anything is there.
fs::path claim_temp_dir(const fs::path& final) {
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char token[17];
    std::snprintf(token, sizeof token, "%08x%08x", rd(), rd());
    std::string name(".");  // appended piecewise: GCC 12 misreads the chained operator+ (-Wrestrict)
    name += final.filename().string();
    name += ".ctstream-synth-";
    name += token;
    fs::path p = final.parent_path() / name;
    std::error_code ec;
    if (fs::create_directory(p, ec)) return p;
    if (ec && ec != std::errc::file_exists)
      throw std::runtime_error("synth: cannot create a directory beside " + final.string() + ": " + ec.message());
  }
  throw std::runtime_error("synth: no free temporary name beside " + final.string());
}
void write_text(const fs::path& p, const std::string& text) {
  std::FILE* f = std::fopen(p.c_str(), "wx");  // exclusive: a fresh directory, nothing there
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
    throw std::runtime_error("synth: cannot write " + p.string());
}
}  // namespace

uint64_t write_synthetic_llama(const std::filesystem::path& final_dir, const SynthSpec& sp, bool overwrite) {
  // The checkpoint is written into a fresh directory beside DIR, which then takes DIR's name:
  // nothing is written through a link planted in DIR, and no stale file of an earlier
  // checkpoint (an index beside a single shard) survives. An existing non-empty DIR is replaced
  // only when `overwrite`; the directory it held (or the link at its name, not the link's
  // target) is removed.
  const fs::path dir_final = fs::absolute(final_dir).lexically_normal();
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir_final, ec);
  const bool exists = st.type() != fs::file_type::not_found;
  if (exists && !overwrite && !(fs::is_directory(st) && fs::is_empty(dir_final, ec)))
    throw std::invalid_argument(
        final_dir.string() + " exists and is not an empty directory (--overwrite replaces it with the new checkpoint)");
  if (exists && fs::exists(dir_final, ec) && !fs::is_directory(dir_final, ec) && !fs::is_symlink(st))
    throw std::invalid_argument(final_dir.string() + " exists and is not a directory");
  fs::create_directories(dir_final.parent_path());
  const fs::path dir = claim_temp_dir(dir_final);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      if (!p.empty()) fs::remove_all(p, e);
    }
  } cleanup{dir};
  const auto specs = llama_specs(sp);
  const size_t shards = std::max(1u, sp.shards);
  nlohmann::ordered_json weight_map;
  uint64_t total = 0, grand_total = 0;
  for (const auto& t : specs) {
    uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    grand_total += n * ctstream::dtype_bits(sp.dtype) / 8;
  }
  std::vector<uint16_t> bf;
  std::vector<std::byte> conv;
  for (size_t shard = 0; shard < shards; ++shard) {
    char fname[64];
    if (shards == 1) std::snprintf(fname, sizeof fname, "model.safetensors");
    else std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", shard + 1, shards);
    const size_t b = specs.size() * shard / shards, e = specs.size() * (shard + 1) / shards;
    std::vector<ctstream::SafetensorsWriter::Entry> entries;
    for (size_t i = b; i < e; ++i) {
      entries.push_back({specs[i].name, sp.dtype, specs[i].shape});
      weight_map[specs[i].name] = fname;
    }
    ctstream::SafetensorsWriter w(dir / fname, entries, {{"format", "pt"}});
    for (const auto& en : entries) {
      uint64_t n = 1;
      for (auto d : en.shape) n *= d;
      bf.resize(n);
      fill_bf16(en.name, n, bf.data(), en.shape.size() == 2 ? sp.prune : 0.0);
      if (sp.dtype == ctstream::DType::BF16) {
        w.write(std::as_bytes(std::span(bf)));
      } else {  // widen exactly, or narrow to f16 with RNE (independently of the library's kernels)
        conv.resize(n * ctstream::dtype_bits(sp.dtype) / 8);
        for (uint64_t i = 0; i < n; ++i) {
          uint32_t f = static_cast<uint32_t>(bf[i]) << 16;
          if (sp.dtype == ctstream::DType::F32) std::memcpy(&conv[4 * i], &f, 4);
          else {
            float v;
            std::memcpy(&v, &f, 4);
            const uint16_t h = to_f16_bits(v);
            std::memcpy(&conv[2 * i], &h, 2);
          }
        }
        w.write(conv);
      }
      total += n * ctstream::dtype_bits(sp.dtype) / 8;
      if (sp.progress) sp.progress(total, grand_total);
    }
    w.commit();
  }
  if (shards > 1)
    write_text(dir / "model.safetensors.index.json",
               nlohmann::ordered_json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
  write_text(dir / "config.json",
             nlohmann::ordered_json{{"architectures", {"LlamaForCausalLM"}},
                                    {"model_type", "llama"},
                                    {"hidden_size", sp.hidden},
                                    {"intermediate_size", sp.intermediate},
                                    {"num_hidden_layers", sp.layers},
                                    {"num_attention_heads", std::max<uint64_t>(1, sp.hidden / 64)},
                                    {"vocab_size", sp.vocab},
                                    {"torch_dtype", sp.dtype == ctstream::DType::F32   ? "float32"
                                                    : sp.dtype == ctstream::DType::F16 ? "float16"
                                                                                       : "bfloat16"}}
                 .dump(2));
  if (!exists) {
    fs::rename(dir, dir_final);
    cleanup.p.clear();
    return total;
  }
  // The old one out of the way (renaming moves a link, not its target), the new one in; the old
  // one back if that fails, and removed only once the new one holds the name.
  const fs::path old = claim_temp_dir(dir_final);
  Cleanup old_cleanup{old};
  fs::rename(dir_final, old / "old");
  try {
    fs::rename(dir, dir_final);
  } catch (...) {
    std::error_code back;
    fs::rename(old / "old", dir_final, back);
    if (back) old_cleanup.p.clear();  // it could not go back: left where it is, never removed
    throw;
  }
  cleanup.p.clear();
  return total;
}

int cmd_synth(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"--overwrite"},
                 {"--layers", "--hidden", "--intermediate", "--vocab", "--shards", "--dtype"});
  if (a.pos.size() != 1) throw std::invalid_argument("synth needs an output DIR");
  SynthSpec sp;
  sp.layers = static_cast<unsigned>(parse_uint("--layers", a.get("--layers", "4"), 0, 1024));
  sp.hidden = parse_uint("--hidden", a.get("--hidden", "512"), 1, 1 << 16);
  sp.intermediate = parse_uint("--intermediate", a.get("--intermediate", "1376"), 1, 1 << 18);
  sp.vocab = parse_uint("--vocab", a.get("--vocab", "8192"), 1, 1 << 20);
  // one tensor a shard at most (an empty shard is no checkpoint file anyone writes)
  sp.shards = static_cast<unsigned>(parse_uint("--shards", a.get("--shards", "1"), 1, llama_specs(sp).size()));
  if (a.has("--dtype")) sp.dtype = parse_dtype(a.get("--dtype"));
  const double t0 = now_seconds();
  const uint64_t bytes = write_synthetic_llama(a.pos[0], sp, a.has("--overwrite"));
  std::printf("wrote %s: %zu tensors, %s in %u shard(s), %.2f s\n", a.pos[0].c_str(), llama_specs(sp).size(),
              human_bytes(bytes).c_str(), std::max(1u, sp.shards), now_seconds() - t0);
  return 0;
}

}  // namespace cli
