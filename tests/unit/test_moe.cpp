// 3-D MoE expert weights with zero points (issue 26 part 2): transformers 5 keeps experts as
// [E, R, C] tensors, and compressed-tensors 0.20 packs a 3-D weight AND its zero point one expert
// slice at a time (compressors/pack_quantized/helpers.py:45 `pack_to_int32` on `value.ndim > 2`,
// base.py:105 the zero point with packed_dim=0). The fixtures (tests/fixtures/gen/gen_moe.py) are
// the library's own packing; the expected tensors its own decompression.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <span>

#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCases[] = {"w4a16_group32_asym", "w4a16_channel_asym", "w8a16_channel_asym",
                                  "v0171_w3a16_group32_asym"};

fs::path case_dir(const char* name) { return th::fixtures() / "ct_moe" / name; }

std::vector<std::byte> decode(const Checkpoint& ck, const TensorInfo& t, DType d,
                              std::optional<Slice> s = std::nullopt) {
  std::vector<std::byte> out(t.decoded_bytes(d));
  out.resize(ck.decode_into(t, out, d, s));
  return out;
}

}  // namespace

TEST_CASE("3-D expert weights with packed zero points decode as the library decompresses them", "[ct][moe]") {
  for (const char* name : kCases) {
    for (IoMode io : {IoMode::mmap, IoMode::pread}) {
      OpenOptions o;
      o.io = io;
      const Checkpoint ck = Checkpoint::open(case_dir(name), o);  // was refused: "needs a 2-D weight"
      const Checkpoint exp = Checkpoint::open(case_dir(name) / "expected" / "expected.safetensors");
      REQUIRE(ck.tensors().size() == exp.tensors().size());
      size_t experts = 0;
      for (const TensorInfo& e : exp.tensors()) {
        INFO(name << " " << e.name);
        const TensorInfo* t = ck.find(e.name);
        REQUIRE(t != nullptr);
        CHECK(t->dtype == e.dtype);
        CHECK(t->shape == e.shape);
        if (t->shape.size() == 3) {
          ++experts;
          CHECK(t->format == Format::pack_quantized);
          CHECK_FALSE(t->quant.symmetric);
          const TensorPart* zp = t->part("weight_zero_point");
          REQUIRE(zp != nullptr);
          CHECK(zp->dtype == DType::I32);
          CHECK(zp->shape.size() == 3);  // [E, packed rows of one expert, G]
          CHECK(zp->shape[0] == t->shape[0]);
        }
        CHECK(decode(ck, *t, e.dtype) == decode(exp, e, e.dtype));
      }
      CHECK(experts == 4);
    }
  }
}

TEST_CASE("slices of 3-D expert weights along every dim equal slicing the full decode", "[ct][moe][slice]") {
  for (const char* name : kCases) {
    const Checkpoint ck = Checkpoint::open(case_dir(name));
    for (const TensorInfo& t : ck.tensors()) {
      if (t.shape.size() != 3) continue;
      INFO(name << " " << t.name);
      const std::vector<std::byte> full = decode(ck, t, DType::F32);
      const uint64_t E = t.shape[0], R = t.shape[1], C = t.shape[2];
      for (unsigned dim : {0u, 1u, 2u}) {
        const uint64_t n = t.shape[dim];
        for (auto [a, b] : {std::pair<uint64_t, uint64_t>{0, n / 2}, {n / 2, n}, {1, 3}, {3, 4}, {5, 37}, {32, n}}) {
          if (b > n || a >= b) continue;
          INFO("dim " << dim << " [" << a << ", " << b << ")");
          std::vector<std::byte> want;
          for (uint64_t e = 0; e < E; ++e)
            for (uint64_t r = 0; r < R; ++r)
              for (uint64_t c = 0; c < C; ++c) {
                const uint64_t i = dim == 0 ? e : dim == 1 ? r : c;
                if (i < a || i >= b) continue;
                const auto at = full.begin() + static_cast<std::ptrdiff_t>(((e * R + r) * C + c) * 4);
                want.insert(want.end(), at, at + 4);
              }
          REQUIRE(decode(ck, t, DType::F32, Slice{dim, a, b}) == want);
        }
      }
    }
  }
}

TEST_CASE("keep-packed parts of 3-D experts are the stored bytes", "[ct][moe]") {
  for (const char* name : kCases) {
    const Checkpoint ck = Checkpoint::open(case_dir(name));
    // The same file read as plain safetensors (no config next to it): every entry as stored.
    th::TempDir tmp("moe-plain");
    fs::copy_file(case_dir(name) / "model.safetensors", tmp.path / "model.safetensors");
    const Checkpoint plain = Checkpoint::open(tmp.path / "model.safetensors");
    for (const TensorInfo& t : ck.tensors()) {
      if (t.shape.size() != 3) continue;
      for (const TensorPart& p : t.parts) {
        INFO(name << " " << p.key);
        const TensorInfo& raw = plain.at(p.key);
        CHECK(raw.shape == p.shape);
        std::vector<std::byte> got(p.nbytes);
        REQUIRE(ck.read_part(p, got) == p.nbytes);
        CHECK(got == decode(plain, raw, raw.dtype));
      }
    }
  }
}

TEST_CASE("a 3-D zero point is packed per expert: the per-slice shape opens, a flattened one is refused", "[ct][moe]") {
  // [2, 8, 32] 4-bit group 32: one expert's 8 zero-point rows take one word, so the library writes
  // [2, 1, 1] (helpers.py:45); packing the 16 rows as one 2-D column would give [2, 1].
  const std::string cfg = R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
      "version": "0.20.0", "config_groups": {"g": {"targets": ["re:.*experts.*"], "weights": {"num_bits": 4,
      "type": "int", "strategy": "group", "group_size": 32, "symmetric": false}}}}})";
  for (const Shape& zp : {Shape{2, 1, 1}, Shape{2, 1}}) {
    th::TempDir tmp("moe-zp");
    const std::string m = "mlp.experts.down_proj";
    const std::vector<SafetensorsWriter::Entry> decl = {{m + ".weight_packed", DType::I32, {2, 8, 4}},
                                                        {m + ".weight_scale", DType::BF16, {2, 8, 1}},
                                                        {m + ".weight_shape", DType::I64, {3}},
                                                        {m + ".weight_zero_point", DType::I32, zp}};
    {
      SafetensorsWriter w(tmp.path / "model.safetensors", decl);
      w.write(th::random_bytes(2 * 8 * 4 * 4, 5));
      std::vector<std::byte> scale(2 * 8 * 2);
      for (size_t i = 1; i < scale.size(); i += 2) scale[i] = std::byte{0x3f};  // bf16 0.5
      w.write(scale);
      const int64_t dims[3] = {2, 8, 32};
      w.write(std::as_bytes(std::span(dims)));
      w.write(std::vector<std::byte>(8, std::byte{0x88}));
      w.commit();
    }
    std::ofstream(tmp.path / "config.json") << cfg;
    if (zp.size() == 3) {
      const Checkpoint ck = Checkpoint::open(tmp.path);
      std::vector<std::byte> out(ck.at(m + ".weight").decoded_bytes(DType::F32));
      CHECK(ck.decode_into(ck.at(m + ".weight"), out, DType::F32) == out.size());
    } else {
      try {
        (void)Checkpoint::open(tmp.path);
        FAIL("opened a 3-D weight with a zero point packed as one 2-D tensor");
      } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("weight_zero_point shape [2, 1] is not the [2, 1, 1]"));
      }
    }
  }
}

TEST_CASE("the 0.17.1 one-word packing of 3-bit experts is told by the config's version", "[ct][moe]") {
  const Checkpoint ck = Checkpoint::open(case_dir("v0171_w3a16_group32_asym"));
  const TensorInfo& t = ck.at("model.layers.0.mlp.experts.down_proj.weight");
  CHECK(t.quant.legacy_packing);
  CHECK(t.part("weight_zero_point")->shape == Shape{4, 7, 1});  // 64 rows, 10 codes a word (0.20: 6 words)
}
