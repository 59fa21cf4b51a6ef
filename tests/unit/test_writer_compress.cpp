// Writer (`compress_checkpoint`): quantizer kernels, round trips through the reader for every
// format (exact for sparse/dense, element-wise within the quantization error bound otherwise),
// shards / index / config / other files, and failures that must leave nothing behind.
// Byte-exactness against the Python library is tests/python/test_writer_crosscheck.py.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

#include "codecs/encode.hpp"
#include "codecs/half.hpp"
#include "codecs/minifloat.hpp"
#include "ctstream/ctstream.hpp"
#include "format/safetensors.hpp"
#include "helpers.hpp"
#include "io/output.hpp"
#include "writer/quantize.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> encode(const std::vector<float>& v, DType d) {
  std::vector<std::byte> out(v.size() * dtype_bits(d) / 8);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t b = codecs::f32_bits(v[i]);
    if (d == DType::F32) std::memcpy(out.data() + 4 * i, &b, 4);
    else {
      const uint16_t h = d == DType::BF16 ? codecs::f32_to_bf16(b) : codecs::f32_to_f16(b);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

struct Tensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<float> values;  // exact in dtype
};

/// A small Llama-shaped checkpoint: embed, 2 layers of q/k/v/o + MLP (+ q bias, norms), lm_head.
/// Values ~N(0, 0.04) with outliers, a zero row, a constant row and -0.0 in q_proj.
std::vector<Tensor> make_model(DType d, uint64_t H = 64, uint64_t I = 128, uint64_t V = 96, bool sparse24 = false) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 0.04f);
  std::vector<Tensor> ts;
  auto add = [&](std::string n, Shape s, float base = 0.f) {
    uint64_t k = 1;
    for (auto v : s) k *= v;
    std::vector<float> v(k);
    for (auto& x : v) x = writer::round_to(d, base + nd(rng));
    ts.push_back({std::move(n), d, std::move(s), std::move(v)});
  };
  add("model.embed_tokens.weight", {V, H});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {H, H});
    add(p + "self_attn.q_proj.bias", {H});
    add(p + "self_attn.k_proj.weight", {H / 2, H});
    add(p + "self_attn.v_proj.weight", {H / 2, H});
    add(p + "self_attn.o_proj.weight", {H, H});
    add(p + "mlp.gate_proj.weight", {I, H});
    add(p + "mlp.up_proj.weight", {I, H});
    add(p + "mlp.down_proj.weight", {H, I});
    add(p + "input_layernorm.weight", {H}, 1.f);
  }
  add("model.norm.weight", {H}, 1.f);
  add("lm_head.weight", {V, H});
  auto& q = ts[1].values;
  q[0] = 0.5f;
  q[H - 1] = -0.375f;
  for (uint64_t c = 0; c < H; ++c) q[2 * H + c] = 0.f, q[3 * H + c] = 0.03125f;
  for (uint64_t c = 0; c < H; c += 3) q[4 * H + c] = -0.f;
  if (sparse24)
    for (auto& t : ts)
      if (t.shape.size() == 2 && t.name.find("layers") != std::string::npos)
        for (size_t i = 0; i < t.values.size(); i += 4) t.values[i + (i / 4) % 4] = t.values[i + (i / 4 + 2) % 4] = 0.f;
  return ts;
}

void write_model(const fs::path& dir, const std::vector<Tensor>& ts, const std::string& torch_dtype) {
  fs::create_directories(dir);
  std::vector<SafetensorsWriter::Entry> es;
  for (const auto& t : ts) es.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter w(dir / "model.safetensors", es, {{"format", "pt"}});
  for (const auto& t : ts) w.write(encode(t.values, t.dtype));
  w.commit();
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": ")" << torch_dtype
      << R"(", "hidden_size": 64})";
  std::ofstream(dir / "tokenizer.json") << R"({"version": "1.0"})";
  fs::create_directories(dir / "1_Pooling");
  std::ofstream(dir / "1_Pooling" / "config.json") << "{}";
  std::ofstream(dir / "pytorch_model.bin") << "weights";
}

std::vector<float> decode_f32(const Checkpoint& c, const TensorInfo& t) {
  std::vector<float> v(t.numel());
  c.decode_into(t, std::as_writable_bytes(std::span(v)), DType::F32);
  return v;
}

std::vector<float> part_f32(const Checkpoint& c, const TensorPart& p) {
  std::vector<std::byte> raw(p.nbytes);
  c.read_part(p, raw);
  const uint64_t n = p.nbytes * 8 / dtype_bits(p.dtype);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (p.dtype == DType::F32) std::memcpy(&v[i], raw.data() + 4 * i, 4);
    else if (p.dtype == DType::F8_E4M3) v[i] = codecs::e4m3_to_f32(static_cast<uint8_t>(raw[i]));
    else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      v[i] = codecs::f32_from_bits(p.dtype == DType::BF16 ? codecs::bf16_to_f32(h) : codecs::f16_to_f32(h));
    }
  }
  return v;
}

double unit_roundoff(DType d) { return d == DType::BF16 ? 0x1p-8 : d == DType::F16 ? 0x1p-11 : 0x1p-24; }

struct Case {
  const char* name;
  Format format;
  unsigned bits;
  std::optional<QuantStrategy> strategy;
  bool symmetric;
  uint64_t group = 32;
};

/// Element-wise bound of |decoded - input| for one quantized weight, from the scales in the file
/// (not from the writer's own numbers): half a step for round-to-nearest, clamping at the range
/// ends, and the per-op rounding of x/scale and of the output in the weight dtype.
void check_bound(const Checkpoint& out, const TensorInfo& info, const std::vector<float>& x,
                 const std::vector<float>& dec, const Case& c, DType d) {
  const uint64_t R = info.shape[0], C = info.shape[1];
  const auto* sp = info.part("weight_scale");
  REQUIRE(sp);
  const auto scales = part_f32(out, *sp);
  float gs = 1.f;
  if (const auto* g = info.part("weight_global_scale")) gs = part_f32(out, *g)[0];
  const QuantArgs& a = info.quant;  // the writer's quantizers take the scheme as read back
  const double u = unit_roundoff(d);
  const double uo = c.format == Format::nvfp4_pack_quantized ? 0x1p-8 : u;  // nvfp4 decodes to bf16
  const bool int_asym = (c.format == Format::pack_quantized || c.format == Format::int_quantized) && !c.symmetric;
  const double qmax = c.format == Format::float_quantized        ? 448
                      : c.format == Format::nvfp4_pack_quantized ? 6
                                                                 : std::ldexp(1.0, c.bits - 1) - 1;
  const double qspan = int_asym ? std::ldexp(1.0, c.bits) : qmax + 1;
  for (uint64_t r = 0; r < R; ++r)
    for (uint64_t col = 0; col < C; ++col) {
      const uint64_t i = r * C + col;
      const double s = static_cast<double>(scales[writer::scale_index(a, C, r, col)]) / gs;
      const double v = std::fabs(x[i]) / s;
      double step;  // half the spacing of the code grid around v, in units of s
      if (c.format == Format::float_quantized) step = std::max(v * 0x1p-4, 0x1p-10);
      else if (c.format == Format::nvfp4_pack_quantized) step = v <= 2 ? 0.25 : v <= 4 ? 0.5 : 1.0;
      else step = 0.5;
      // sym: values past the largest code are clamped to it; asym: the rounded zero point keeps
      // the range within half a step of the codes, so the clamp error is <= 0.5 too.
      const double clamp = int_asym ? 0.0 : std::max(0.0, v - qmax);
      const double bound = s * (std::max(step, clamp) + (v + qspan + 1) * u) + std::fabs(dec[i]) * uo + 1e-30;
      const double err = std::fabs(static_cast<double>(dec[i]) - x[i]);
      if (err > bound)
        FAIL(info.name << "[" << r << "," << col << "]: |" << dec[i] << " - " << x[i] << "| = " << err << " > bound "
                       << bound << " (scale " << s << ")");
    }
}

}  // namespace

TEST_CASE("quantizer kernels: fp8 encode, rounding, int32 packing, fp4 codes", "[writer_compress]") {
  // Every finite e4m3 value encodes to itself; midpoints round to even.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    const float v = codecs::e4m3_to_f32(static_cast<uint8_t>(b));
    REQUIRE(codecs::f32_to_e4m3(v) == b);
  }
  CHECK(codecs::f32_to_e4m3(1.0625f) == codecs::f32_to_e4m3(1.0f));  // tie -> even mantissa
  CHECK(codecs::f32_to_e4m3(1.1875f) == codecs::f32_to_e4m3(1.25f));
  CHECK(codecs::f32_to_e4m3(0x1p-10f) == 0);  // half the smallest subnormal -> 0
  CHECK(codecs::f32_to_e4m3(500.f) == 0x7F);  // no saturation: NaN code
  CHECK(writer::round_to(DType::BF16, 1.f + 0x1p-8f) == 1.f);
  CHECK(writer::round_to(DType::BF16, 1.f + 3 * 0x1p-8f) == 1.015625f);
  CHECK(writer::round_to(DType::F16, 1.f + 0x1p-11f) == 1.f);

  // Dense cross-word packing: element i at bits [i*b, i*b+b) of the row's bit stream, offset-binary.
  std::mt19937 rng(1);
  for (unsigned b = 1; b <= 8; ++b) {
    const uint64_t R = 3, C = 37;
    std::vector<int8_t> q(R * C);
    for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % (1u << b)) - (1 << (b - 1)));
    const auto p = codecs::pack_int32_rows(q.data(), R, C, b);
    const uint64_t W = (C * b + 31) / 32;
    REQUIRE(p.size() == R * W);
    for (uint64_t r = 0; r < R; ++r)
      for (uint64_t i = 0; i < C; ++i) {
        uint32_t u = 0;
        for (unsigned k = 0; k < b; ++k) {
          const uint64_t bit = i * b + k;
          u |= ((static_cast<uint32_t>(p[r * W + bit / 32]) >> (bit % 32)) & 1u) << k;
        }
        REQUIRE(static_cast<int>(u) - (1 << (b - 1)) == q[r * C + i]);
      }
    const auto z = codecs::pack_int32_cols(q.data(), R, C, b);  // along rows
    REQUIRE(z.size() == ((R * b + 31) / 32) * C);
  }
  // FP4: ties to the even E2M1 value; negatives (even those rounding to 0) carry the sign bit.
  QuantArgs a;
  a.type = QuantType::float_;
  a.num_bits = 4;
  a.strategy = QuantStrategy::tensor_group;
  a.group_size = 16;
  writer::QParams p;
  p.shape = {1, 1};
  p.scale = {1.f};
  p.global_scale = 1.f;
  const std::vector<float> x = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f,  7.f,
                                -0.1f, 0.f,   -0.f,  -6.f,  0.3f, 2.6f, 4.9f, 5.1f};
  std::vector<uint8_t> codes(16);
  writer::quantize(x.data(), 1, 16, DType::F32, a, p, codes.data());
  const std::vector<uint8_t> want = {0, 2, 2, 4, 4, 6, 6, 7, 8, 0, 0, 15, 1, 5, 6, 7};
  CHECK(codes == want);
}

TEST_CASE("compress round trip through the reader, every format", "[writer_compress]") {
  th::TempDir tmp("wc");
  const std::vector<std::pair<DType, std::string>> dtypes = {
      {DType::BF16, "bfloat16"}, {DType::F16, "float16"}, {DType::F32, "float32"}};
  std::map<DType, std::vector<Tensor>> models;
  for (const auto& [d, name] : dtypes) {
    models[d] = make_model(d);
    write_model(tmp.path / ("in_" + name), models[d], name);
  }
  const std::vector<Case> cases = {
      {"pack_w4_g32_sym", Format::pack_quantized, 4, QuantStrategy::group, true},
      {"pack_w4_g32_asym", Format::pack_quantized, 4, QuantStrategy::group, false},
      {"pack_w3_channel_asym", Format::pack_quantized, 3, QuantStrategy::channel, false},
      {"pack_w8_tensor_asym", Format::pack_quantized, 8, QuantStrategy::tensor, false},
      {"int_w8_channel_sym", Format::int_quantized, 8, QuantStrategy::channel, true},
      {"int_w8_block_asym", Format::int_quantized, 8, QuantStrategy::block, false},
      {"fp8_channel", Format::float_quantized, 8, QuantStrategy::channel, true},
      {"fp8_block", Format::float_quantized, 8, QuantStrategy::block, true},
      {"nvfp4", Format::nvfp4_pack_quantized, 4, std::nullopt, true},
  };
  for (const auto& [d, dname] : dtypes) {
    const fs::path in = tmp.path / ("in_" + dname);
    for (const auto& c : cases) {
      DYNAMIC_SECTION(c.name << " " << dname) {
        CompressOptions o;
        o.format = c.format;
        o.num_bits = c.bits;
        o.strategy = c.strategy;
        o.symmetric = c.symmetric;
        // Sizes only for the strategy that reads them (another strategy refuses them)
        if (c.strategy == QuantStrategy::group) o.group_size = c.group;
        if (c.strategy == QuantStrategy::block) o.block_rows = 48, o.block_cols = 40;  // ragged blocks on 64 / 128
        const fs::path outp = tmp.path / (std::string(c.name) + "_" + dname);
        const auto rep = compress_checkpoint(in, outp, o);
        auto out = Checkpoint::open(outp);
        REQUIRE(out.tensors().size() == models[d].size());
        size_t quantized = 0;
        for (const auto& t : models[d]) {
          const auto& info = out.at(t.name);
          const auto dec = decode_f32(out, info);
          const TensorReport* tr = nullptr;
          for (const auto& x : rep.tensors)
            if (x.name == t.name) tr = &x;
          REQUIRE(tr);
          if (info.format == Format::dense) {
            REQUIRE(info.dtype == d);
            for (size_t i = 0; i < dec.size(); ++i) REQUIRE(codecs::f32_bits(dec[i]) == codecs::f32_bits(t.values[i]));
            continue;
          }
          ++quantized;
          REQUIRE(info.format == c.format);
          REQUIRE(t.name.find("layers") != std::string::npos);  // embeddings, norms, lm_head stay dense
          check_bound(out, info, t.values, dec, c, d);
          // The report's error is that of the reader's decode (the library's arithmetic).
          double mx = 0;
          for (size_t i = 0; i < dec.size(); ++i)
            mx = std::max(mx, std::fabs(static_cast<double>(dec[i]) - t.values[i]));
          CHECK(tr->max_abs_error == mx);
          CHECK(tr->output_dtype == (c.format == Format::nvfp4_pack_quantized ? DType::BF16 : d));
        }
        CHECK(quantized == 14);
        CHECK(rep.format_counts.at(std::string(format_name(c.format))) == 14);
        CHECK(rep.output_bytes < rep.input_bytes);
      }
    }
  }
}

TEST_CASE("sparse and dense outputs decode exactly; config, shards and other files", "[writer_compress]") {
  th::TempDir tmp("ws");
  const auto model = make_model(DType::BF16, 64, 128, 96, /*sparse24=*/true);
  write_model(tmp.path / "in", model, "bfloat16");
  auto expect_exact = [&](const fs::path& outp, DType d, bool dense_ok) {
    auto out = Checkpoint::open(outp);
    REQUIRE(out.tensors().size() == model.size());
    for (const auto& t : model) {
      const auto& info = out.at(t.name);
      if (!dense_ok) CHECK((info.format != Format::dense) == (t.name.find("proj.weight") != std::string::npos));
      const auto dec = decode_f32(out, info);
      for (size_t i = 0; i < dec.size(); ++i) REQUIRE(dec[i] == writer::round_to(d, t.values[i]));
    }
  };
  SECTION("sparse-bitmask, sharded") {
    CompressOptions o;
    o.format = Format::sparse_bitmask;
    o.shard_bytes = 40'000;
    const auto rep = compress_checkpoint(tmp.path / "in", tmp.path / "sb", o);
    expect_exact(tmp.path / "sb", DType::BF16, false);
    CHECK(fs::exists(tmp.path / "sb" / "model.safetensors.index.json"));
    CHECK(std::count(rep.files.begin(), rep.files.end(), "model.safetensors.index.json") == 1);
    CHECK(rep.files.size() >= 4);  // >= 2 shards + index + config
    CHECK(!fs::exists(tmp.path / "sb" / "model.safetensors"));
    const auto cfg = th::read_json(tmp.path / "sb" / "config.json");
    CHECK(cfg["quantization_config"]["version"] == "0.12.2");
    CHECK(cfg["quantization_config"]["sparsity_config"]["format"] == "sparse-bitmask");
    CHECK(cfg["model_type"] == "llama");
    for (const auto& t : rep.tensors) CHECK(t.exact);
  }
  SECTION("sparse-24-bitmask of a 2:4 tensor is lossless; dense needs --prune-24") {
    CompressOptions o;
    o.format = Format::sparse_24_bitmask;
    compress_checkpoint(tmp.path / "in", tmp.path / "s24", o);
    expect_exact(tmp.path / "s24", DType::BF16, false);
    const auto dense = make_model(DType::BF16);
    write_model(tmp.path / "dense_in", dense, "bfloat16");
    try {
      compress_checkpoint(tmp.path / "dense_in", tmp.path / "s24b", o);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(e.tensor() == "model.layers.0.self_attn.q_proj.weight");
      CHECK(std::string(e.what()).find("--prune-24") != std::string::npos);
    }
    CHECK(!fs::exists(tmp.path / "s24b"));
    o.prune_24 = true;
    const auto rep = compress_checkpoint(tmp.path / "dense_in", tmp.path / "s24b", o);
    for (const auto& t : rep.tensors)
      if (t.format == Format::sparse_24_bitmask) CHECK((t.pruned > 0 && !t.exact));
  }
  SECTION("dense downcast, config dtype, files copied, weight files skipped") {
    CompressOptions o;
    o.format = Format::dense;
    o.dtype = DType::F16;
    const auto rep = compress_checkpoint(tmp.path / "in", tmp.path / "d16", o);
    expect_exact(tmp.path / "d16", DType::F16, true);
    const auto cfg = th::read_json(tmp.path / "d16" / "config.json");
    CHECK(cfg["torch_dtype"] == "float16");
    CHECK(!cfg.contains("quantization_config"));
    CHECK(fs::exists(tmp.path / "d16" / "tokenizer.json"));
    CHECK(fs::exists(tmp.path / "d16" / "1_Pooling" / "config.json"));
    CHECK(!fs::exists(tmp.path / "d16" / "pytorch_model.bin"));
    CHECK(rep.skipped == std::vector<std::string>{"pytorch_model.bin"});
  }
  SECTION("quantization_config: targets, ignore, version, format") {
    CompressOptions o;
    o.ignore = {"re:.*down_proj"};
    o.group_size = 64;
    compress_checkpoint(tmp.path / "in", tmp.path / "pq", o);
    const auto q = th::read_json(tmp.path / "pq" / "config.json")["quantization_config"];
    CHECK(q["version"] == "0.20.0");
    CHECK(q["format"] == "pack-quantized");
    CHECK(q["config_groups"]["group_0"]["targets"] == nlohmann::json::array({"Linear"}));
    CHECK(q["config_groups"]["group_0"]["weights"]["group_size"] == 64);
    CHECK(q["ignore"] == nlohmann::json::array({"re:.*down_proj", "model.embed_tokens", "lm_head"}));
    auto out = Checkpoint::open(tmp.path / "pq");
    CHECK(out.at("model.layers.1.mlp.down_proj.weight").format == Format::dense);
    CHECK(out.at("model.layers.1.mlp.up_proj.weight").format == Format::pack_quantized);
  }
}

TEST_CASE("compress failures name the tensor and leave nothing behind", "[writer_compress]") {
  th::TempDir tmp("wf");
  auto model = make_model(DType::BF16);
  write_model(tmp.path / "in", model, "bfloat16");
  auto nothing_left = [&](const fs::path& out) {
    CHECK(!fs::exists(out));
    for (const auto& e : fs::directory_iterator(tmp.path))
      CHECK(e.path().filename().string().find("ctstream-tmp") == std::string::npos);
  };
  auto expect = [&](CompressOptions o, ErrorKind k, const std::string& tensor, const fs::path& in, const char* what) {
    const fs::path out = tmp.path / "out";
    try {
      compress_checkpoint(in, out, o);
      FAIL("expected an error: " << what);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.kind() == k);
      CHECK(e.tensor() == tensor);
    }
    nothing_left(out);
  };
  CompressOptions base;
  base.group_size = 32;
  CompressOptions o = base;
  o.group_size = 48;  // does not divide 64 columns
  expect(o, ErrorKind::invalid_argument, "model.layers.0.self_attn.q_proj.weight", tmp.path / "in", "group size");
  // A size the strategy does not read, or an MX group other than 32, is refused (never ignored)
  const auto refused = [&](const CompressOptions& opt, const std::string& what) {
    const fs::path out = tmp.path / "refused";
    try {
      compress_checkpoint(tmp.path / "in", out, opt);
      FAIL("expected an error: " << what);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
    nothing_left(out);
  };
  for (Format mx : {Format::mxfp4_pack_quantized, Format::mxfp8_quantized}) {
    CompressOptions m;
    m.format = mx;
    m.group_size = 64;
    refused(m, "groups are 32 values (E8M0 scales); got group size 64");
    m.group_size = 32;  // the one size they take, given or not
    CHECK_NOTHROW(compress_checkpoint(tmp.path / "in", tmp.path / "mx32", m));
    fs::remove_all(tmp.path / "mx32");
  }
  o = {};
  o.format = Format::int_quantized;  // channel by default
  o.group_size = 32;
  refused(o, "a group size applies to the group strategy, not 'channel'");
  o.strategy = QuantStrategy::block;
  refused(o, "a group size applies to the group strategy, not 'block'");
  o = {};
  o.format = Format::nvfp4_pack_quantized;
  o.group_size = 16;
  refused(o, "not 'tensor_group' (nvfp4 groups are 16)");
  o = {};
  o.format = Format::float_quantized;
  o.block_rows = 64;
  refused(o, "block dimensions apply to the block strategy, not 'channel'");
  o = {};
  o.format = Format::nvfp4_pack_quantized;
  o.targets = {"re:.*mlp.*", "re:zzz"};
  CompressOptions bad_regex = o;
  bad_regex.targets = {"re:(unclosed"};
  expect(bad_regex, ErrorKind::invalid_argument, "", tmp.path / "in", "bad regex");
  o.targets = {"re:nothing.*"};
  expect(o, ErrorKind::invalid_argument, "", tmp.path / "in", "no target");
  // Unsupported dtype for the format: an F64 2-D weight.
  {
    std::vector<SafetensorsWriter::Entry> es = {{"model.layers.0.mlp.up_proj.weight", DType::F64, {4, 32}}};
    fs::create_directories(tmp.path / "f64");
    SafetensorsWriter w(tmp.path / "f64" / "model.safetensors", es);
    w.write(std::vector<std::byte>(4 * 32 * 8));
    w.commit();
    expect({}, ErrorKind::unsupported, "model.layers.0.mlp.up_proj.weight", tmp.path / "f64", "f64");
  }
  // NaN in a weight cannot be quantized (sparse formats keep it).
  {
    auto m = model;
    m[5].values[7] = NAN;
    write_model(tmp.path / "nan", m, "bfloat16");
    expect(base, ErrorKind::invalid_argument, m[5].name, tmp.path / "nan", "nan");
  }
  // A range the work dtype cannot hold (fuzz_writer finding): F16 values from -50208 to 33024,
  // asymmetric int8 -> the library's scale (max - min) / 255 overflows F16 to inf and the tensor
  // would decode to NaN. Refused instead of written.
  {
    auto m = make_model(DType::F16);
    for (size_t i = 0; i < m[5].values.size(); ++i) m[5].values[i] = i % 2 ? 33024.f : -50208.f;
    write_model(tmp.path / "wide", m, "float16");
    CompressOptions a;
    a.format = Format::int_quantized;
    a.symmetric = false;
    expect(a, ErrorKind::invalid_argument, m[5].name, tmp.path / "wide", "range overflows F16");
  }
  // Finite weights whose dequantization overflows (fuzz_writer finding): 2-bit codes of values
  // near the largest BF16 value decode to -inf. Refused instead of written.
  {
    auto m = make_model(DType::BF16);
    m[5].values[3] = -3.0306e38f;
    m[5].values[4] = 1.8e28f;
    write_model(tmp.path / "huge", m, "bfloat16");
    CompressOptions a;
    a.num_bits = 2;
    a.strategy = QuantStrategy::channel;
    expect(a, ErrorKind::invalid_argument, m[5].name, tmp.path / "huge", "dequantization overflows");
  }
  // Output exists and is not empty: refused, untouched; --overwrite replaces it atomically.
  {
    fs::create_directories(tmp.path / "busy");
    std::ofstream(tmp.path / "busy" / "keep.txt") << "x";
    CHECK_THROWS_AS(compress_checkpoint(tmp.path / "in", tmp.path / "busy", base), Error);
    CHECK(fs::exists(tmp.path / "busy" / "keep.txt"));
    CompressOptions ow = base;
    ow.overwrite = true;
    compress_checkpoint(tmp.path / "in", tmp.path / "busy", ow);
    CHECK(!fs::exists(tmp.path / "busy" / "keep.txt"));
    CHECK(fs::exists(tmp.path / "busy" / "model.safetensors"));
    for (const auto& e : fs::directory_iterator(tmp.path))  // the old output (swapped out) is gone too
      CHECK(e.path().filename().string().find("ctstream-") == std::string::npos);
    fs::remove_all(tmp.path / "busy");
  }
  // Cancel and a throwing progress callback stop the job mid-way.
  {
    std::atomic<bool> cancel{false};
    CompressOptions c = base;
    c.cancel = &cancel;
    int n = 0;
    c.progress = [&](const CompressProgress&) {
      if (++n == 5) cancel = true;
    };
    expect(c, ErrorKind::io, "", tmp.path / "in", "cancel");
    CompressOptions t = base;
    t.progress = [](const CompressProgress& p) {
      if (p.tensors_done == 3) throw Error(ErrorKind::io, "", "", "stop");
    };
    expect(t, ErrorKind::io, "", tmp.path / "in", "callback");
    // The caller's own exception type comes back as it was thrown (not "internal error").
    struct Mine {};
    CompressOptions m = base;
    m.progress = [](const CompressProgress& p) {
      if (p.tensors_done == 2) throw Mine{};
    };
    CHECK_THROWS_AS(compress_checkpoint(tmp.path / "in", tmp.path / "out", m), Mine);
    nothing_left(tmp.path / "out");
  }
  // Output directory not writable: /sys refuses mkdir even for root.
  if (fs::is_directory("/sys")) {
    try {
      compress_checkpoint(tmp.path / "in", "/sys/ctstream-test-out", base);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::io);
      CHECK(std::string(e.what()).find("not writable") != std::string::npos);
    }
  }
  // Unsupported combinations are refused before anything is read.
  CompressOptions f;
  f.format = Format::float_quantized;
  f.symmetric = false;
  CHECK_THROWS_AS(compress_checkpoint(tmp.path / "in", tmp.path / "x", f), Error);
  f = {};
  f.format = Format::mxfp6_pack_quantized;  // a format the writer does not produce
  CHECK_THROWS_AS(compress_checkpoint(tmp.path / "in", tmp.path / "x", f), Error);
  f = {};
  f.format = Format::mxfp8_quantized;
  f.num_bits = 4;  // MX formats fix their element type
  CHECK_THROWS_AS(compress_checkpoint(tmp.path / "in", tmp.path / "x", f), Error);
  f = {};
  f.format = Format::mxfp4_pack_quantized;
  f.strategy = QuantStrategy::channel;  // and their 32-value groups
  CHECK_THROWS_AS(compress_checkpoint(tmp.path / "in", tmp.path / "x", f), Error);
  nothing_left(tmp.path / "x");
}

TEST_CASE("pread mode reads parts through sliding windows: large parts decode as in mmap mode", "[writer_compress]") {
  // Parts of several hundred KiB (int4 packed 384 KiB, bitmask values ~1.5 MiB) are larger than
  // the 256 KiB read window, so row-by-row decoding re-reads at window edges, from several
  // threads and for slices that start mid-part. pread mode must equal mmap mode (which maps the
  // sparse values but reads quantized parts through windows too), and every decode must match
  // the input: exactly for the sparse format, within a few quantization steps otherwise (a
  // window serving the wrong bytes gives errors of whole scales).
  th::TempDir tmp("pw");
  const auto model = make_model(DType::BF16, 512, 1536, 96);
  write_model(tmp.path / "in", model, "bfloat16");
  struct F {
    const char* name;
    Format format;
    unsigned bits;
    std::optional<QuantStrategy> strategy;
  };
  const F formats[] = {{"int4_g32", Format::pack_quantized, 4, QuantStrategy::group},
                       {"bitmask", Format::sparse_bitmask, 0, std::nullopt},
                       {"fp8_block", Format::float_quantized, 8, QuantStrategy::block},
                       {"int8_channel", Format::int_quantized, 8, QuantStrategy::channel}};
  for (const F& f : formats) {
    DYNAMIC_SECTION(f.name) {
      CompressOptions o;
      o.format = f.format;
      if (f.bits) o.num_bits = f.bits;
      o.strategy = f.strategy;
      if (f.strategy.value_or(QuantStrategy::group) == QuantStrategy::group) o.group_size = 32;
      const fs::path outp = tmp.path / f.name;
      compress_checkpoint(tmp.path / "in", outp, o);
      OpenOptions om, op;
      op.io = IoMode::pread;
      om.threads = op.threads = 2;
      auto m = Checkpoint::open(outp, om);
      auto p = Checkpoint::open(outp, op);
      uint64_t big_parts = 0;
      for (const auto& t : m.tensors()) {
        for (const auto& part : t.parts) big_parts += part.nbytes > (256u << 10);
        const uint64_t n = t.decoded_bytes(DType::BF16);
        std::vector<std::byte> a(n), b(n);
        m.decode_into(t, a, DType::BF16);
        p.decode_into(p.at(t.name), b, DType::BF16);
        INFO(t.name);
        REQUIRE(a == b);
        const Tensor* src = nullptr;
        for (const auto& x : model)
          if (x.name == t.name) src = &x;
        REQUIRE(src);
        double max_err = 0;
        for (size_t i = 0; i < src->values.size(); ++i) {
          uint16_t h;
          std::memcpy(&h, a.data() + 2 * i, 2);
          max_err = std::max(
              max_err, std::fabs(static_cast<double>(codecs::f32_from_bits(codecs::bf16_to_f32(h))) - src->values[i]));
        }
        if (t.format == Format::dense || t.format == Format::sparse_bitmask) REQUIRE(max_err == 0);
        else REQUIRE(max_err < 0.05);  // values ~N(0, 0.04): an int4 step is ~0.03 at most here
        if (t.shape.size() != 2) continue;
        const uint64_t R = t.shape[0], C = t.shape[1];
        for (const Slice s : {Slice{0, R / 3, R - R / 5}, Slice{1, C / 2, C}}) {
          const uint64_t sn = t.decoded_bytes(DType::BF16) / (s.dim == 0 ? R : C) * (s.stop - s.start);
          std::vector<std::byte> sa(sn), sb(sn);
          m.decode_into(t, sa, DType::BF16, s);
          p.decode_into(p.at(t.name), sb, DType::BF16, s);
          REQUIRE(sa == sb);
        }
      }
      CHECK(big_parts >= 2);
    }
  }
}

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("compress from memory (BufferSource) writes the bytes compress_checkpoint writes", "[writer_compress]") {
  // The in-memory path (Python's save_model) and the file path share the whole writer; fed the
  // same tensors and config they must produce identical files, for every format.
  th::TempDir tmp("wm");
  const auto model = make_model(DType::BF16);
  write_model(tmp.path / "in", model, "bfloat16");
  std::vector<std::vector<std::byte>> bytes;
  std::vector<BufferSource::Entry> entries;
  for (const auto& t : model) {
    bytes.push_back(encode(t.values, t.dtype));
    entries.push_back({t.name, t.dtype, t.shape});
  }
  const std::string config = slurp(tmp.path / "in" / "config.json");
  struct F {
    const char* name;
    Format format;
    std::optional<DType> dtype;
  };
  for (const F& f : {F{"pack", Format::pack_quantized, {}}, F{"int8", Format::int_quantized, {}},
                     F{"fp8", Format::float_quantized, {}}, F{"nvfp4", Format::nvfp4_pack_quantized, {}},
                     F{"bitmask", Format::sparse_bitmask, {}}, F{"dense_f16", Format::dense, DType::F16}}) {
    DYNAMIC_SECTION(f.name) {
      CompressOptions o;
      o.format = f.format;
      if (f.format == Format::pack_quantized) o.group_size = 32;
      o.dtype = f.dtype;
      o.copy_other_files = false;
      const auto from_file = compress_checkpoint(tmp.path / "in", tmp.path / (std::string(f.name) + "_file"), o);
      size_t fetches = 0;
      BufferSource src(entries,
                       [&](size_t i) {
                         ++fetches;
                         return std::span<const std::byte>(bytes[i]);
                       },
                       {config, {}, {}, {}});
      const auto from_mem = compress(src, tmp.path / (std::string(f.name) + "_mem"), o);
      CHECK(fetches >= model.size());
      CHECK(from_mem.files == from_file.files);
      for (const auto& name : from_file.files)
        CHECK(slurp(tmp.path / (std::string(f.name) + "_mem") / name) ==
              slurp(tmp.path / (std::string(f.name) + "_file") / name));
      REQUIRE(from_mem.tensors.size() == from_file.tensors.size());
      for (size_t i = 0; i < from_mem.tensors.size(); ++i) {
        CHECK(from_mem.tensors[i].max_abs_error == from_file.tensors[i].max_abs_error);
        CHECK(from_mem.tensors[i].format == from_file.tensors[i].format);
      }
    }
  }
}

TEST_CASE("compress from memory: class targets, extra files, bad buffers leave nothing", "[writer_compress]") {
  th::TempDir tmp("wm2");
  const auto model = make_model(DType::F32);
  std::vector<std::vector<std::byte>> bytes;
  std::vector<BufferSource::Entry> entries;
  for (const auto& t : model) {
    bytes.push_back(encode(t.values, t.dtype));
    entries.push_back({t.name, t.dtype, t.shape});
  }
  auto fetch = [&](size_t i) { return std::span<const std::byte>(bytes[i]); };
  // The model's classes: only layer 0's MLP are (subclasses of) Linear; lm_head is a Linear too.
  BufferSource::Model m;
  for (const auto& t : model) {
    const std::string mod = t.name.substr(0, t.name.rfind('.'));
    const bool lin = mod.find("layers.0.mlp") != std::string::npos || mod == "lm_head";
    m.module_classes[mod] =
        lin ? std::vector<std::string>{"QLinear", "Linear", "Module"} : std::vector<std::string>{"Other", "Module"};
  }
  m.extra_files["generation_config.json"] = "{\"do_sample\": false}";
  SECTION("\"Linear\" matches by class (the output head stays dense), other classes too") {
    BufferSource src(entries, fetch, m);
    CompressOptions o;
    o.group_size = 32;
    auto rep = compress(src, tmp.path / "cls", o);
    auto ck = Checkpoint::open(tmp.path / "cls");
    for (const auto& t : ck.tensors()) {
      const bool want = t.name.find("layers.0.mlp") != std::string::npos && t.name.ends_with(".weight");
      CHECK((t.format == Format::pack_quantized) == want);
    }
    CHECK(slurp(tmp.path / "cls" / "generation_config.json") == "{\"do_sample\": false}");
    CHECK(std::find(rep.files.begin(), rep.files.end(), "generation_config.json") != rep.files.end());
    o.targets = {"QLinear", "lm_head"};
    BufferSource src2(entries, fetch, m);
    compress(src2, tmp.path / "cls2", o);
    auto ck2 = Checkpoint::open(tmp.path / "cls2");
    CHECK(ck2.at("lm_head.weight").format == Format::pack_quantized);
    CHECK(ck2.at("model.layers.0.mlp.up_proj.weight").format == Format::pack_quantized);
    CHECK(ck2.at("model.layers.1.mlp.up_proj.weight").format == Format::dense);
  }
  SECTION("without classes, a class other than Linear / Embedding is refused") {
    BufferSource src(entries, fetch);
    CompressOptions o;
    o.targets = {"QLinear"};
    CHECK(th::error_kind([&] { compress(src, tmp.path / "x", o); }) == ErrorKind::unsupported);
  }
  SECTION("a buffer of the wrong size, or a fetch that throws: an error naming the tensor, nothing written") {
    auto short_fetch = [&](size_t i) {
      std::span<const std::byte> s(bytes[i]);
      return model[i].name == "model.layers.1.mlp.up_proj.weight" ? s.first(s.size() - 2) : s;
    };
    BufferSource src(entries, short_fetch);
    CompressOptions o;
    o.group_size = 32;
    try {
      compress(src, tmp.path / "bad", o);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(e.tensor() == "model.layers.1.mlp.up_proj.weight");
    }
    BufferSource src2(entries, [&](size_t i) -> std::span<const std::byte> {
      if (i == 5) throw Error(ErrorKind::io, "", model[i].name, "cancelled by the caller");
      return bytes[i];
    });
    CHECK_THROWS_AS(compress(src2, tmp.path / "bad", o), Error);
    struct Mine {};
    BufferSource src3(entries, [&](size_t i) -> std::span<const std::byte> {
      if (i == 5) throw Mine{};
      return bytes[i];
    });
    CHECK_THROWS_AS(compress(src3, tmp.path / "bad", o), Mine);
    std::vector<std::byte> row(64);
    CHECK_THROWS_AS(src3.read(5, 0, 1, row, DType::F32), Mine);  // called directly, too
    CHECK(!fs::exists(tmp.path / "bad"));
    for (const auto& e : fs::directory_iterator(tmp.path))
      CHECK(e.path().filename().string().find("bad") == std::string::npos);
  }
  SECTION("entries and extra files are checked up front") {
    auto dup = entries;
    dup.push_back(entries[0]);
    CHECK(th::error_kind([&] { BufferSource(dup, fetch); }) == ErrorKind::invalid_argument);
    for (const char* bad : {"../x", "a/b", "", "model.safetensors", "config.json"}) {
      BufferSource::Model mm;
      mm.extra_files[bad] = "x";
      CHECK(th::error_kind([&] { BufferSource(entries, fetch, mm); }) == ErrorKind::invalid_argument);
    }
    CHECK(th::error_kind([&] { BufferSource({{"t", DType::F4, {3}}}, fetch); }) == ErrorKind::invalid_argument);
  }
}

namespace {
bool no_temp_left(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".ctstream-") != std::string::npos) return false;
  return true;
}
}  // namespace

TEST_CASE("other files: copied to their own path below OUT, links followed only to regular files inside",
          "[writer_compress]") {
  // A Hugging Face cache snapshot: every file a link to ../../blobs/<hash>. The copies land at
  // OUT/<name>, never at OUT/../../blobs/<hash> (which a path resolved through the link names).
  th::TempDir tmp("hfcache");
  const fs::path repo = tmp.path / "hub" / "models--org--m", snap = repo / "snapshots" / "rev1";
  write_model(tmp.path / "src", make_model(DType::BF16), "bfloat16");
  fs::create_directories(repo / "blobs");
  fs::create_directories(snap);
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json"}) {
    fs::rename(tmp.path / "src" / f, repo / "blobs" / (std::string("blob-") + f));
    fs::create_symlink(fs::path("../../blobs") / (std::string("blob-") + f), snap / f);
  }
  // Files a wrong destination would clobber, and things that are no regular file.
  fs::create_directories(tmp.path / "blobs");
  std::ofstream(tmp.path / "blobs" / "blob-tokenizer.json") << "PRECIOUS";
  std::ofstream(tmp.path / "secret") << "outside";
  fs::create_symlink(tmp.path / "secret", snap / "notes.txt");
  fs::create_directories(tmp.path / "outside_dir");
  std::ofstream(tmp.path / "outside_dir" / "x.txt") << "x";
  fs::create_symlink(tmp.path / "outside_dir", snap / "assets");
  fs::create_symlink("/proc/self/environ", snap / "special_tokens_map.json");
  fs::create_symlink(tmp.path / "missing", snap / "dangling.json");
  REQUIRE(::mkfifo((snap / "pipe.json").c_str(), 0600) == 0);  // opening it would block
  fs::create_directories(tmp.path / "out");

  CompressOptions o;
  o.format = Format::int_quantized;
  const fs::path out = tmp.path / "out" / "m";
  const auto rep = compress_checkpoint(snap, out, o);
  CHECK(slurp(out / "tokenizer.json") == R"({"version": "1.0"})");
  CHECK(fs::is_regular_file(fs::symlink_status(out / "tokenizer.json")));
  // A link out of the checkpoint (not into its repo's blobs/) is not copied: OUT gets uploaded.
  for (const char* absent : {"notes.txt", "assets", "special_tokens_map.json", "dangling.json", "pipe.json"})
    CHECK(!fs::exists(fs::symlink_status(out / absent)));
  CHECK(slurp(tmp.path / "blobs" / "blob-tokenizer.json") == "PRECIOUS");
  CHECK(slurp(tmp.path / "secret") == "outside");
  CHECK(std::vector<fs::path>(fs::directory_iterator(tmp.path / "out"), fs::directory_iterator()).size() == 1);
  auto sorted = rep.copied;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"tokenizer.json"});
  auto ck = Checkpoint::open(out);
  CHECK(ck.at("model.layers.0.mlp.up_proj.weight").format == Format::int_quantized);
}

namespace {
/// A BufferSource that counts read() calls and raises the cancel flag on the first one.
class CancellingSource final : public TensorSource {
 public:
  CancellingSource(BufferSource& inner, std::atomic<bool>& cancel) : inner_(inner), cancel_(cancel) {}
  std::span<const TensorInfo> tensors() const override { return inner_.tensors(); }
  void read(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType d) override {
    ++reads;
    cancel_ = true;
    inner_.read(i, r0, r1, out, d);
  }
  std::string origin(size_t i) const override { return inner_.origin(i); }
  int reads = 0;

 private:
  BufferSource& inner_;
  std::atomic<bool>& cancel_;
};
}  // namespace

TEST_CASE("zero-element tensors with huge dims write at once; cancel is polled inside a tensor", "[writer_compress]") {
  th::TempDir tmp("zero");
  SECTION("checkpoint input [2^62, 0] and [2^40, 0, 3]") {
    fs::create_directories(tmp.path / "in");
    std::vector<SafetensorsWriter::Entry> es = {{"a.weight", DType::BF16, {64, 64}},
                                                {"z", DType::F32, {uint64_t{1} << 62, 0}},
                                                {"z3", DType::BF16, {uint64_t{1} << 40, 0, 3}}};
    SafetensorsWriter w(tmp.path / "in" / "model.safetensors", es);
    w.write(encode(std::vector<float>(64 * 64, 0.25f), DType::BF16));
    w.commit();
    for (Format f : {Format::dense, Format::int_quantized, Format::sparse_bitmask}) {
      CompressOptions o;
      o.format = f;
      o.dtype = DType::F16;  // converted: the f32 path
      const fs::path out = tmp.path / ("out" + std::to_string(static_cast<int>(f)));
      compress_checkpoint(tmp.path / "in", out, o);
      auto ck = Checkpoint::open(out);
      CHECK(ck.at("z").shape == Shape{uint64_t{1} << 62, 0});
      CHECK(ck.at("z3").shape == Shape{uint64_t{1} << 40, 0, 3});
      decompress_to_file(ck, tmp.path / "dec.safetensors");
    }
  }
  SECTION("memory input [2^59, 0]") {
    std::vector<std::byte> a(16 * 16 * 4);
    BufferSource src({{"a.weight", DType::F32, {16, 16}}, {"z", DType::F32, {uint64_t{1} << 59, 0}}},
                     [&](size_t i) { return i == 0 ? std::span<const std::byte>(a) : std::span<const std::byte>(); });
    CompressOptions o;
    o.format = Format::dense;
    compress(src, tmp.path / "mem", o);
    CHECK(Checkpoint::open(tmp.path / "mem").at("z").shape == Shape{uint64_t{1} << 59, 0});
  }
  SECTION("a cancel raised during a many-chunk tensor stops it before the next chunk") {
    std::vector<std::byte> big(uint64_t{8192} * 1024 * 4);  // 32 MiB of F32: several 16 MiB chunks
    BufferSource inner({{"emb", DType::F32, {8192, 1024}}}, [&](size_t) { return std::span<const std::byte>(big); });
    std::atomic<bool> cancel{false};
    CancellingSource src(inner, cancel);
    CompressOptions o;
    o.format = Format::dense;
    o.cancel = &cancel;
    CHECK(th::error_kind([&] { compress(src, tmp.path / "c", o); }) == ErrorKind::io);
    CHECK(src.reads == 1);
    CHECK(!fs::exists(tmp.path / "c"));
    CHECK(no_temp_left(tmp.path));
  }
}

TEST_CASE("output name collisions are refused before anything is written", "[writer_compress]") {
  th::TempDir tmp("coll");
  auto expect_refused = [&](const std::string& tag, std::vector<Tensor> extra, CompressOptions o, const char* needle) {
    auto model = make_model(DType::BF16);
    for (auto& t : extra) model.push_back(std::move(t));
    const fs::path in = tmp.path / ("in_" + tag), out = tmp.path / ("out_" + tag);
    write_model(in, model, "bfloat16");
    try {
      compress_checkpoint(in, out, o);
      FAIL("expected a collision error: " << tag);
    } catch (const Error& e) {
      INFO(tag << ": " << e.what());
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(e.tensor().rfind("model.layers.0.mlp.up_proj.", 0) == 0);
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
    CHECK(!fs::exists(out));
    CHECK(no_temp_left(tmp.path));
  };
  const std::string up = "model.layers.0.mlp.up_proj.";
  auto ones = [](std::string name, DType d, Shape s) {
    uint64_t n = 1;
    for (auto v : s) n *= v;
    return Tensor{std::move(name), d, std::move(s), std::vector<float>(n, 1.f)};
  };
  CompressOptions q8;
  q8.format = Format::int_quantized;
  expect_refused("scale", {ones(up + "weight_scale", DType::BF16, {128, 1})}, q8, "written twice");
  CompressOptions pq;
  pq.group_size = 32;
  {  // an input `.weight_packed` beside its `.weight`: the reader refuses the input itself
    auto model = make_model(DType::BF16);
    model.push_back(ones(up + "weight_packed", DType::F32, {128, 8}));
    write_model(tmp.path / "in_packed", model, "bfloat16");
    const auto k = th::error_kind([&] { compress_checkpoint(tmp.path / "in_packed", tmp.path / "out_packed", pq); });
    CHECK((k && *k != ErrorKind::internal));
    CHECK(!fs::exists(tmp.path / "out_packed"));
  }
  expect_refused("zero_point", {ones(up + "weight_zero_point", DType::BF16, {128, 1})}, q8, "named like a part");
  CompressOptions lr;
  lr.format = Format::low_rank;
  lr.rank = 4;
  expect_refused("lowrank", {ones(up + "0.weight", DType::BF16, {8, 64})}, lr, "named like a part");
  expect_refused("bias", {ones(up + "bias", DType::BF16, {128}), ones(up + "1.bias", DType::BF16, {128})}, lr,
                 "written twice");
}

TEST_CASE("a safetensors header never holds one name twice", "[writer_compress]") {
  th::TempDir tmp("dupname");
  std::vector<format::StEntry> st = {{"a", DType::F32, {1}, 0, 4}, {"a", DType::F32, {1}, 4, 8}};
  CHECK(th::error_kind([&] { format::serialize_header(st, {}); }) == ErrorKind::invalid_argument);
  CHECK(th::error_kind([&] {
          SafetensorsWriter w(tmp.path / "x.safetensors", {{"a", DType::F32, {1}}, {"a", DType::F32, {1}}});
        }) == ErrorKind::invalid_argument);
  CHECK(!fs::exists(tmp.path / "x.safetensors"));
  CHECK(no_temp_left(tmp.path));
}

TEST_CASE("remove_registered_temps empties and removes registered temporary directories", "[writer_compress]") {
  // What the CLI's second Ctrl-C runs (async-signal-safe): finished shards in the writer's
  // temporary output directory go too, not only the file being written.
  th::TempDir tmp("sigdir");
  const fs::path d = io::make_temp_dir(tmp.path, "out", "tmp");
  const int slot = io::register_temp_dir(d);
  REQUIRE(slot >= 0);
  for (int i = 0; i < 300; ++i) std::ofstream(d / ("model-" + std::to_string(i) + ".safetensors")) << "x";
  fs::create_directories(d / "sub" / "deeper");
  std::ofstream(d / "sub" / "deeper" / "tokenizer.json") << "{}";
  std::ofstream(tmp.path / "keep.txt") << "keep";
  fs::create_symlink(tmp.path / "keep.txt", d / "link");
  io::remove_registered_temps();
  io::unregister_temp(slot);
  CHECK(!fs::exists(d));
  CHECK(slurp(tmp.path / "keep.txt") == "keep");  // a link inside is removed, never followed
}

TEST_CASE("decompress refuses the checkpoint's own files and directory as output", "[writer_compress]") {
  th::TempDir tmp("decout");
  const fs::path ck = tmp.path / "ck";
  fs::copy(th::fixtures() / "ct" / "v020_int8_w8a8_channel_sym_bf16", ck, fs::copy_options::recursive);
  const std::string cfg = slurp(ck / "config.json");
  auto c = Checkpoint::open(ck);
  fs::create_symlink(ck / "config.json", tmp.path / "cfg_link.json");
  for (const fs::path& bad : {ck / "config.json", ck / "." / "config.json", tmp.path / "cfg_link.json",
                              ck / "model.safetensors", ck / "new.safetensors", ck / "sub" / ".." / "x.safetensors"}) {
    INFO(bad);
    CHECK(th::error_kind([&] { decompress_to_file(c, bad); }) == ErrorKind::invalid_argument);
  }
  CHECK(slurp(ck / "config.json") == cfg);
  CHECK(fs::is_symlink(tmp.path / "cfg_link.json"));
  decompress_to_file(c, tmp.path / "dense.safetensors");
  CHECK(Checkpoint::open(tmp.path / "dense.safetensors").tensors().size() == c.tensors().size());
  // A directory holding one file and no config, opened as a directory, is the model's too (a
  // red-team pass: the check ran only for checkpoints of two sources or more); the file opened by
  // itself keeps its directory free.
  const fs::path lone = tmp.path / "lone";
  fs::create_directories(lone);
  fs::copy_file(th::fixtures() / "st" / "all_dtypes.safetensors", lone / "model.safetensors");
  auto by_dir = Checkpoint::open(lone);
  CHECK(th::error_kind([&] { decompress_to_file(by_dir, lone / "out.safetensors"); }) == ErrorKind::invalid_argument);
  CHECK(!fs::exists(lone / "out.safetensors"));
  auto by_file = Checkpoint::open(lone / "model.safetensors");
  decompress_to_file(by_file, lone / "out.safetensors");
  CHECK(fs::exists(lone / "out.safetensors"));
}

TEST_CASE("the compress report is written through a temporary file, never through a link", "[writer_compress]") {
  th::TempDir tmp("report");
  std::ofstream(tmp.path / "victim") << "precious";
  fs::create_symlink(tmp.path / "victim", tmp.path / "rep.json");
  CompressReport rep;
  // something is there: replaced only when overwriting
  CHECK_THROWS_AS(write_report_json(tmp.path / "rep.json", rep, {}), Error);
  CHECK(fs::is_symlink(tmp.path / "rep.json"));
  CompressOptions replace;
  replace.overwrite = true;
  write_report_json(tmp.path / "rep.json", rep, replace);
  CHECK(slurp(tmp.path / "victim") == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(tmp.path / "rep.json")));
  CHECK(th::read_json(tmp.path / "rep.json").contains("tensors"));
  CHECK(no_temp_left(tmp.path));
}
