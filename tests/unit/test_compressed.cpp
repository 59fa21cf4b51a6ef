// Every compressed-tensors fixture (tests/fixtures/ct, written by compressed-tensors 0.20.0 and
// 0.12.2, see gen_compressed.py) decodes to exactly what the library's own decompression
// returns, cast with torch's .to(D), for D in bf16 / fp16 / fp32 and the native dtype.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "codecs/half.hpp"
#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

bool is_nan(DType d, const std::byte* p) {
  uint32_t v = 0;
  if (d == DType::F32) {
    std::memcpy(&v, p, 4);
    return std::isnan(codecs::f32_from_bits(v));
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return std::isnan(codecs::f32_from_bits(d == DType::BF16 ? codecs::bf16_to_f32(h) : codecs::f16_to_f32(h)));
}

// Compares decode(name) in `d` with the reference tensor; returns elements compared.
uint64_t compare(const Checkpoint& ck, const Checkpoint& ref, const std::string& name, DType d,
                 std::optional<Slice> slice = std::nullopt) {
  const TensorInfo& rt = ref.at(name);
  const TensorInfo* t = ck.find(name);
  INFO("tensor " << name << " as " << dtype_name(d));
  REQUIRE(t != nullptr);
  REQUIRE(t->shape == rt.shape);
  std::vector<std::byte> want(rt.decoded_bytes(rt.dtype));
  ref.decode_into(rt, want, rt.dtype);
  REQUIRE(rt.dtype == d);
  std::vector<std::byte> got(t->decoded_bytes(d) + 16, std::byte{0x77});
  const uint64_t n = ck.decode_into(*t, got, d, slice);
  REQUIRE(n == want.size());
  REQUIRE(got[n] == std::byte{0x77});
  const size_t esz = dtype_bits(d) / 8;
  for (size_t i = 0; i < want.size(); i += esz) {
    if (is_float_output(d) && is_nan(d, &want[i])) {
      REQUIRE(is_nan(d, &got[i]));  // torch's NaN payloads are path-dependent
      continue;
    }
    if (std::memcmp(&got[i], &want[i], esz) != 0) {
      uint32_t g = 0, w = 0;
      std::memcpy(&g, &got[i], esz);
      std::memcpy(&w, &want[i], esz);
      FAIL("element " << i / esz << " (row " << (i / esz) / rt.shape.back() << ", col " << (i / esz) % rt.shape.back()
                      << "): got 0x" << std::hex << g << " want 0x" << w);
    }
  }
  return want.size() / esz;
}

bool is_leftover_param(const std::string& name) {
  // Activation / KV-cache quantization parameters stay model parameters; the fixtures only list
  // weights and pass-through tensors (gen_compressed.py notes "leftover qparams").
  for (const char* suf : {".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale",
                          ".output_zero_point", ".k_scale", ".v_scale"})
    if (name.size() > std::strlen(suf) && name.compare(name.size() - std::strlen(suf), std::strlen(suf), suf) == 0)
      return true;
  return false;
}

}  // namespace

TEST_CASE("every compressed-tensors fixture decodes bit-exactly to the library's decompression",
          "[ct][fixture][dispatch]") {
  const fs::path root = th::fixtures() / "ct";
  const auto manifest = th::read_json(root / "manifest.json");
  const auto& cases = manifest.is_object() && manifest.contains("cases") ? manifest["cases"] : manifest;
  REQUIRE(cases.size() >= 60);
  uint64_t elements = 0;
  size_t checked_cases = 0;
  for (const auto& c : cases) {
    const std::string name = c["case"];
    if (!fs::exists(root / name / "expected" / "expected.safetensors")) continue;
    INFO("case " << name << " (" << c.value("format", "") << ", library " << c.value("library_version", "") << ")");
    const auto io = (checked_cases % 2) ? IoMode::pread : IoMode::mmap;  // both io paths over the corpus
    OpenOptions o;
    o.io = io;
    auto ck = Checkpoint::open(root / name, o);
    auto native = Checkpoint::open(root / name / "expected" / "expected.safetensors");
    for (const auto& rt : native.tensors()) {
      const TensorInfo& t = ck.at(rt.name);
      INFO("tensor " << rt.name);
      CHECK(t.dtype == rt.dtype);  // natural dtype = what the library returns
      elements += compare(ck, native, rt.name, rt.dtype);
    }
    for (const char* dn : {"bf16", "fp16", "fp32"}) {
      auto ref = Checkpoint::open(root / name / "expected" / (std::string("expected_") + dn + ".safetensors"));
      for (const auto& rt : ref.tensors()) {
        if (!is_float_output(rt.dtype)) continue;
        elements += compare(ck, ref, rt.name, rt.dtype);
      }
    }
    for (const auto& t : ck.tensors()) {
      INFO("ctstream yields " << t.name);
      CHECK((native.find(t.name) != nullptr || is_leftover_param(t.name)));
    }
    ++checked_cases;
  }
  CHECK(checked_cases >= 70);
  CHECK(elements > 100000);
}

TEST_CASE("row and column slices of compressed weights equal slicing the full decode", "[ct][fixture][slice]") {
  const fs::path root = th::fixtures() / "ct";
  for (const char* name : {"v020_pack_w4_g32_asym_bf16", "v012_sparse_bitmask_bf16", "v020_nvfp4a16_bf16",
                           "v020_fp8_block128_colsragged_bf16", "v020_pack_w3_g16_asym_bf16", "v012_sparse24_fp8_bf16",
                           "v020_fp8_channel_dynamic_bf16", "v020_pack_w4_channel_asym_bf16", "v020_mxfp4a16_bf16",
                           "v020_pack_w8_g16_asym_bf16", "v012_int_w8_g32_actorder_asym_bf16"}) {
    auto ck = Checkpoint::open(root / name);
    for (const auto& t : ck.tensors()) {
      if (t.format == Format::dense || t.shape.size() != 2) continue;
      INFO(name << " " << t.name);
      std::vector<std::byte> full(t.decoded_bytes(DType::F32));
      ck.decode_into(t, full, DType::F32);
      const uint64_t R = t.shape[0], C = t.shape[1];
      for (unsigned dim : {0u, 1u}) {
        const uint64_t n = t.shape[dim];
        for (auto [a, b] : {std::pair<uint64_t, uint64_t>{0, n / 2}, {n / 3, n}, {1, 2}, {2, 7}, {16, 48}, {32, n}}) {
          if (b > n || a > b) continue;
          std::vector<std::byte> got(t.decoded_bytes(DType::F32));
          const uint64_t bytes = ck.decode_into(t, got, DType::F32, Slice{dim, a, b});
          std::vector<std::byte> want;
          for (uint64_t r = 0; r < R; ++r)
            for (uint64_t c = 0; c < C; ++c)
              if ((dim == 0 ? r : c) >= a && (dim == 0 ? r : c) < b)
                want.insert(want.end(), full.begin() + (r * C + c) * 4, full.begin() + (r * C + c + 1) * 4);
          REQUIRE(bytes == want.size());
          got.resize(bytes);
          REQUIRE(got == want);
        }
      }
    }
  }
}

TEST_CASE("inspect metadata: formats and schemes of the fixtures", "[ct][fixture]") {
  const fs::path root = th::fixtures() / "ct";
  auto ck = Checkpoint::open(root / "v020_mixed_int4g32_fp8ch_bf16");
  const auto& down = ck.at("model.layers.0.mlp.down_proj.weight");
  CHECK(down.format == Format::pack_quantized);
  CHECK(down.quant.num_bits == 4);
  CHECK(down.quant.strategy == QuantStrategy::group);
  CHECK(down.quant.group_size == 32);
  const auto& q = ck.at("model.layers.0.self_attn.q_proj.weight");
  CHECK(q.format == Format::float_quantized);
  CHECK(q.quant.strategy == QuantStrategy::channel);
  CHECK(ck.at("model.layers.0.mlp.gate_proj.weight").format == Format::dense);  // ignored module
  auto old = Checkpoint::open(root / "v012_pack_w3_g32_sym_bf16");
  CHECK(old.at("model.layers.0.mlp.down_proj.weight").quant.legacy_packing);
  auto neu = Checkpoint::open(root / "v020_pack_w3_g32_sym_bf16");
  CHECK_FALSE(neu.at("model.layers.0.mlp.down_proj.weight").quant.legacy_packing);
  auto act = Checkpoint::open(root / "v012_pack_w4_g32_actorder_bf16");
  CHECK(act.at("model.layers.0.mlp.down_proj.weight").quant.actorder);
  auto naive_act = Checkpoint::open(root / "v012_int_w8_g32_actorder_asym_bf16");  // weight_g_idx is a part
  CHECK(naive_act.at("model.layers.0.mlp.down_proj.weight").quant.actorder);
  CHECK(naive_act.find("model.layers.0.mlp.down_proj.weight_g_idx") == nullptr);
}

TEST_CASE("marlin-24 is recognised and passed through packed", "[ct][fixture]") {
  auto ck = Checkpoint::open(th::fixtures() / "ct" / "v012_marlin24_w4_g128_bf16");
  size_t marlin = 0;
  for (const auto& t : ck.tensors()) {
    if (t.format != Format::marlin_24) continue;
    ++marlin;
    REQUIRE(t.part("weight_packed") != nullptr);
    REQUIRE(t.part("scale_packed") != nullptr);
    REQUIRE(t.part("meta") != nullptr);
    std::vector<std::byte> buf(t.decoded_bytes(DType::F16));
    try {
      ck.decode_into(t, buf, DType::F16);
      FAIL("decode of marlin-24 should be refused");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::unsupported);
      CHECK(std::string(e.what()).find("marlin-24") != std::string::npos);
    }
    auto v = ck.part_view(*t.part("weight_packed"));
    CHECK(v.size() == t.part("weight_packed")->nbytes);
  }
  CHECK(marlin >= 1);
}

TEST_CASE("slices of every dim of 1-D, 2-D and 3-D quantized weights equal an independent dequantization",
          "[ct][slice]") {
  // naive int8, one tensor scale of 0.5, symmetric: element = code * 0.5 exactly, so the reference
  // is computed here, not by the decoder. A 1-D weight is one row: a slice of its only dim is a
  // column slice (this once returned success and wrote nothing).
  th::TempDir tmp("slices");
  const std::vector<Shape> shapes = {{37}, {5, 37}, {3, 4, 37}};
  const std::vector<std::string> names = {"m0", "m1", "m2"};
  std::vector<SafetensorsWriter::Entry> decl;
  std::vector<std::vector<std::byte>> data;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string& m = names[i];
    uint64_t n = 1;
    for (uint64_t d : shapes[i]) n *= d;
    decl.push_back({m + ".weight", DType::I8, shapes[i]});
    data.push_back(th::random_bytes(n, 17 + i));
    decl.push_back({m + ".weight_scale", DType::F32, {1}});
    const float half = 0.5f;
    data.emplace_back(4);
    std::memcpy(data.back().data(), &half, 4);
  }
  {
    SafetensorsWriter w(tmp.path / "model.safetensors", decl);
    for (const auto& d : data) w.write(d);
    w.commit();
  }
  std::ofstream(tmp.path / "config.json")
      << R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "naive-quantized",
            "config_groups": {"g": {"targets": ["re:.*"], "weights": {"num_bits": 8, "type": "int",
            "strategy": "tensor", "symmetric": true}}}}})";
  for (auto io : {IoMode::mmap, IoMode::pread}) {
    OpenOptions o;
    o.io = io;
    auto ck = Checkpoint::open(tmp.path, o);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const TensorInfo& t = ck.at(names[i] + ".weight");
      REQUIRE(t.quantized);
      const Shape& s = shapes[i];
      const auto& codes = data[2 * i];
      for (unsigned dim = 0; dim < s.size(); ++dim) {
        const uint64_t n = s[dim];
        for (auto [a, b] : {std::pair<uint64_t, uint64_t>{0, n}, {0, 1}, {1, n / 2 + 1}, {n - 1, n}, {2, 2}}) {
          if (a > b || b > n) continue;
          INFO("shape rank " << s.size() << " dim " << dim << " [" << a << ", " << b << ")");
          uint64_t outer = 1, inner = 1;
          for (unsigned d = 0; d < dim; ++d) outer *= s[d];
          for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
          std::vector<float> want;
          for (uint64_t o2 = 0; o2 < outer; ++o2)
            for (uint64_t k = a; k < b; ++k)
              for (uint64_t j = 0; j < inner; ++j)
                want.push_back(0.5f * static_cast<float>(static_cast<int8_t>(codes[(o2 * n + k) * inner + j])));
          std::vector<float> got(want.size() + 4, -999.f);  // poisoned: every written element is checked
          const uint64_t bytes =
              ck.decode_into(t, std::as_writable_bytes(std::span<float>(got)), DType::F32, Slice{dim, a, b});
          REQUIRE(bytes == want.size() * 4);
          got.resize(want.size());
          CHECK(got == want);
        }
      }
    }
  }
}
