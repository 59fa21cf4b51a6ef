// Fuzz helpers: turn fuzzer bytes into a compressed-tensors checkpoint that is *mostly* well
// formed, so that mutations reach the decoders instead of dying in the header parser. The
// layouts are spelled out here independently of src/format/format_table.cpp (a bug there should
// not be mirrored here); a few choices deliberately break one rule (a shape off by one, padding
// bits set, a wrong row offset, an out-of-range g_idx) so that validation is exercised too.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fz {

/// Reads fuzzer bytes front to back; past the end it yields zeros.
class Bytes {
 public:
  Bytes(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t below(uint32_t n) { return n ? u16() % n : 0; }
  bool chance(unsigned percent) { return below(100) < percent; }
  /// n bytes of payload (the rest of the input, cycled; zeros when there is none).
  std::string take(size_t n) {
    std::string s(n, '\0');
    for (size_t k = 0; k < n; ++k) s[k] = static_cast<char>(i_ < n_ ? p_[i_ + (k % (n_ - i_))] : 0);
    if (i_ < n_) i_ += std::min(n, n_ - i_);
    return s;
  }
  size_t left() const { return n_ - std::min(i_, n_); }

 private:
  const uint8_t* p_;
  size_t n_, i_ = 0;
};

struct Part {
  std::string key, dtype;
  std::vector<uint64_t> shape;
  std::string data;
};

inline size_t dtype_bytes(const std::string& d) {
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I64" || d == "F64" || d == "U64") return 8;
  return 1;
}

inline uint64_t numel(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

inline std::string shape_json(const std::vector<uint64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

/// The bytes of a safetensors file holding `parts` in order.
inline std::string safetensors_file(const std::vector<Part>& parts) {
  std::string h = "{", data;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    h += (i ? "," : "") + std::string("\"") + p.key + "\":{\"dtype\":\"" + p.dtype +
         "\",\"shape\":" + shape_json(p.shape) + ",\"data_offsets\":[" + std::to_string(data.size()) + "," +
         std::to_string(data.size() + p.data.size()) + "]}";
    data += p.data;
  }
  h += "}";
  while (h.size() % 8) h += ' ';
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + h + data;
}

inline std::string i64s(const std::vector<int64_t>& v) {
  std::string s(v.size() * 8, '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

struct Checkpoint {
  std::vector<Part> parts;
  std::string config;  // config.json text ("" = none)
  std::string family;
};

inline std::string qconfig(const std::string& weights, const std::string& fmt, const std::string& version) {
  return "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"version\":\"" + version +
         "\",\"format\":\"" + fmt + "\",\"config_groups\":{\"g\":{\"targets\":[\"re:.*\"],\"format\":\"" + fmt +
         "\",\"weights\":" + weights + "}}}}";
}

/// One compressed module `m` (logical tensor "m.weight") of a family the fuzzer picks.
inline Checkpoint structured(Bytes& in) {
  Checkpoint ck;
  const std::string M = "m";
  const unsigned family = in.below(8);
  const bool off_by_one = in.chance(3);  // break one shape on purpose
  auto bump = [&](std::vector<uint64_t> s) {
    if (off_by_one && !s.empty()) s[in.below(static_cast<uint32_t>(s.size()))] += 1;
    return s;
  };
  auto add = [&](const std::string& role, const std::string& dtype, std::vector<uint64_t> shape) {
    Part p{M + "." + role, dtype, shape, in.take(numel(shape) * dtype_bytes(dtype))};
    ck.parts.push_back(std::move(p));
    return &ck.parts.back();
  };
  const char* scale_types[] = {"BF16", "F16", "F32"};
  const std::string sdt = scale_types[in.below(3)];
  uint64_t R = in.below(34);
  switch (family) {
    case 0:
    case 1: {  // sparse-bitmask / sparse-24-bitmask, optionally on int8 / fp8 values
      const bool is24 = family == 1;
      uint64_t C = is24 ? 4 * in.below(12) : in.below(70);
      if (is24 && in.chance(3)) C += 2;
      const bool quant = in.chance(30);
      const std::string vdt = quant ? (in.chance(50) ? "I8" : "F8_E4M3") : sdt;
      const uint64_t mb = (C + 7) / 8;
      std::string mask = in.take(R * mb);
      uint64_t nnz = 0;
      std::vector<int64_t> offsets;
      for (uint64_t r = 0; r < R; ++r) {
        offsets.push_back(static_cast<int64_t>(nnz));
        for (uint64_t k = 0; k < mb; ++k) {
          auto& b = reinterpret_cast<uint8_t&>(mask[r * mb + k]);
          if (is24 && !in.chance(5)) {  // 2 of every 4
            uint8_t v = 0;
            for (int q = 0; q < 2; ++q) {
              static const uint8_t two[6] = {0x3, 0x5, 0x9, 0x6, 0xA, 0xC};
              v |= static_cast<uint8_t>(two[(b >> (4 * q)) % 6] << (4 * q));
            }
            b = v;
          }
          const uint64_t valid = std::min<uint64_t>(8, C - 8 * k);
          if (valid < 8 && !in.chance(3)) b &= static_cast<uint8_t>((1u << valid) - 1);
          nnz += static_cast<uint64_t>(__builtin_popcount(b));
        }
      }
      if (in.chance(3)) nnz += 1;
      ck.parts.push_back({M + ".shape", "I64", is24 ? std::vector<uint64_t>{2, 1} : std::vector<uint64_t>{2},
                          i64s({static_cast<int64_t>(R), static_cast<int64_t>(C)})});
      if (is24) add("compressed", vdt, bump({R, C / 2}));
      else add("compressed", vdt, {nnz});
      ck.parts.push_back({M + ".bitmask", "U8", bump({R, mb}), mask});
      ck.parts.back().data.resize(numel(ck.parts.back().shape));
      if (!is24 && in.chance(60)) {
        if (in.chance(5) && !offsets.empty()) offsets[in.below(static_cast<uint32_t>(offsets.size()))] += 1;
        ck.parts.push_back({M + ".row_offsets", "I64", {R}, i64s(offsets)});
      }
      const std::string fmt = is24 ? "sparse-24-bitmask" : "sparse-bitmask";
      std::string cfg =
          "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"version\":\"0.12.2\","
          "\"sparsity_config\":{\"format\":\"" +
          fmt + "\",\"targets\":[\"Linear\"]}";
      if (quant) {
        const bool channel = in.chance(50);
        add("weight_scale", sdt, channel ? std::vector<uint64_t>{R, 1} : std::vector<uint64_t>{1});
        const bool asym = vdt == "I8" && in.chance(40);
        if (asym) add("weight_zero_point", "I8", channel ? std::vector<uint64_t>{R, 1} : std::vector<uint64_t>{1});
        cfg += ",\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"type\":\"" +
               std::string(vdt == "I8" ? "int" : "float") + "\",\"strategy\":\"" + (channel ? "channel" : "tensor") +
               "\",\"symmetric\":" + (asym ? "false" : "true") + "}}}";
      }
      ck.config = cfg + "}}";
      ck.family = fmt;
      break;
    }
    case 2: {  // pack-quantized
      const unsigned b = 1 + in.below(8);
      const bool legacy = in.chance(30);
      const unsigned strategy = in.below(3);  // tensor, channel, group
      const uint64_t gs = 4u << in.below(4);
      // Up to 139 columns: rows long enough for the SIMD kernels' table paths (AVX2 E4M3 tables from
      // 64 columns of one scale), with whole steps and tails.
      const uint64_t C = strategy == 2 ? gs * in.below(5) : in.below(140);
      const uint64_t words = legacy ? (C + 32 / b - 1) / (32 / b) : (C * b + 31) / 32;
      add("weight_packed", "I32", bump({R, words}));
      const uint64_t G = strategy == 2 ? C / gs : 1;
      const std::vector<uint64_t> ss = strategy == 0 ? std::vector<uint64_t>{1} : std::vector<uint64_t>{R, G};
      add("weight_scale", sdt, ss);
      ck.parts.push_back({M + ".weight_shape", "I64", {2}, i64s({static_cast<int64_t>(R), static_cast<int64_t>(C)})});
      const bool asym = in.chance(40);
      if (asym) {
        if (strategy == 0) add("weight_zero_point", "I8", {1});
        else add("weight_zero_point", "I32", bump({legacy ? (R + 32 / b - 1) / (32 / b) : (R * b + 31) / 32, G}));
      }
      if (strategy == 2 && in.chance(25)) {
        std::vector<int32_t> g(C);
        for (uint64_t j = 0; j < C; ++j)
          g[j] = in.chance(3) ? static_cast<int32_t>(in.below(9)) - 1 : static_cast<int32_t>(j / gs);
        std::string d(C * 4, '\0');
        if (C) std::memcpy(d.data(), g.data(), d.size());
        ck.parts.push_back({M + ".weight_g_idx", "I32", {C}, d});
      }
      const char* strat[] = {"tensor", "channel", "group"};
      ck.config = qconfig("{\"num_bits\":" + std::to_string(b) + ",\"type\":\"int\",\"strategy\":\"" + strat[strategy] +
                              "\",\"group_size\":" + (strategy == 2 ? std::to_string(gs) : "null") +
                              ",\"symmetric\":" + (asym ? "false" : "true") + "}",
                          "pack-quantized", legacy ? "0.12.2" : "0.20.0");
      ck.family = "pack-quantized";
      break;
    }
    case 3: {  // naive / int / float: I8 or F8_E4M3 values
      const bool fp8 = in.chance(50);
      const unsigned strategy = in.below(4);  // tensor, channel, group, block
      const uint64_t gs = 4u << in.below(3);
      const uint64_t bh = 1 + in.below(9), bw = 1 + in.below(9);
      // Up to 139 columns: rows long enough for the SIMD kernels' table paths (AVX2 E4M3 tables from
      // 64 columns of one scale), with whole steps and tails.
      const uint64_t C = strategy == 2 ? gs * in.below(5) : in.below(140);
      add("weight", fp8 ? "F8_E4M3" : "I8", {R, C});
      std::vector<uint64_t> ss;
      switch (strategy) {
        case 0: ss = {1}; break;
        case 1: ss = {R, 1}; break;
        case 2: ss = {R, C / gs}; break;
        default: ss = {(R + bh - 1) / bh, (C + bw - 1) / bw}; break;
      }
      add("weight_scale", sdt, bump(ss));
      const bool asym = !fp8 && in.chance(40);
      if (asym) add("weight_zero_point", "I8", ss);
      const char* strat[] = {"tensor", "channel", "group", "block"};
      std::string wj = "{\"num_bits\":8,\"type\":\"" + std::string(fp8 ? "float" : "int") + "\",\"strategy\":\"" +
                       strat[strategy] + "\",\"symmetric\":" + (asym ? "false" : "true");
      if (strategy == 2) wj += ",\"group_size\":" + std::to_string(gs);
      if (strategy == 3) wj += ",\"block_structure\":[" + std::to_string(bh) + "," + std::to_string(bw) + "]";
      const std::string fmt = in.chance(50) ? "naive-quantized" : fp8 ? "float-quantized" : "int-quantized";
      ck.config = qconfig(wj + "}", fmt, "0.20.0");
      ck.family = fmt;
      break;
    }
    default: {  // nvfp4 / mxfp4 / mxfp6 / mxfp8
      const unsigned kind = family - 4;
      const uint64_t group = kind == 0 ? 16 : 32;
      // Up to 11 groups: the AVX2 kernels take runs of 8 whole groups through E2M1 tables.
      const uint64_t C = group * in.below(12);
      if (kind == 3) add("weight", "F8_E4M3", {R, C});
      else add("weight_packed", "U8", bump({R, kind == 2 ? C / 4 * 3 : C / 2}));
      add("weight_scale", kind == 0 ? "F8_E4M3" : "U8", bump({R, C / group}));
      if (kind == 0) add("weight_global_scale", "F32", {1});
      const char* fmts[] = {"nvfp4-pack-quantized", "mxfp4-pack-quantized", "mxfp6-pack-quantized", "mxfp8-quantized"};
      const unsigned bits[] = {4, 4, 6, 8};
      ck.config = qconfig("{\"num_bits\":" + std::to_string(bits[kind]) + ",\"type\":\"float\",\"strategy\":\"" +
                              (kind == 0 ? "tensor_group" : "group") + "\",\"group_size\":" + std::to_string(group) +
                              ",\"symmetric\":true" + (kind ? ",\"scale_dtype\":\"torch.uint8\"" : "") + "}",
                          fmts[kind], "0.20.0");
      ck.family = fmts[kind];
      break;
    }
  }
  return ck;
}

/// A scratch directory for one fuzzing process (tmpfs when available: the targets write files).
inline const std::filesystem::path& scratch_dir(const char* tag) {
  // Never destroyed: the exit handler below runs after static destructors registered later.
  static const std::filesystem::path* const d = [tag] {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    auto* p =
        new std::filesystem::path(base / (std::string("ctstream-fuzz-") + tag + "-" + std::to_string(::getpid())));
    std::filesystem::create_directories(*p);
    // Removed when the process exits normally (libFuzzer's -max_total_time / -runs end with
    // exit()); a crashed run leaves it for the post-mortem.
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(nullptr), ec);
    });
    return p;
  }();
  return *d;
}

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Writes `ck` into `dir` (model.safetensors + config.json, or no config).
inline void write_checkpoint(const std::filesystem::path& dir, const Checkpoint& ck) {
  write_file(dir / "model.safetensors", safetensors_file(ck.parts));
  std::error_code ec;
  if (ck.config.empty()) std::filesystem::remove(dir / "config.json", ec);
  else write_file(dir / "config.json", ck.config);
}

}  // namespace fz
