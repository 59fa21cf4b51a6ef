// Low-rank checkpoints: the fixtures of tests/fixtures/gen/gen_low_rank.py (a model decomposed by
// ptdeco) read as the original architecture. Each product against torch's float64 product within
// the bound stored beside it (2 r u |B||A|) plus half an ulp of the output dtype; slices against
// the full decode; the stored view; the threads setting changes nothing; errors at open.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>

#include "ctstream/ctstream.hpp"
#include "format/low_rank.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

std::vector<double> f64(const Checkpoint& ck, const std::string& name) {
  const TensorInfo& t = ck.at(name);
  std::vector<double> v(t.numel());
  ck.decode_into(t, std::as_writable_bytes(std::span(v)), DType::F64);
  return v;
}

std::vector<float> as_f32(const Checkpoint& ck, const TensorInfo& t, DType out, const std::optional<Slice>& s = {}) {
  const uint64_t n = ck.output_bytes(t, out, s);
  std::vector<std::byte> buf(n);
  REQUIRE(ck.decode_into(t, buf, out, s) == n);
  std::vector<float> v(n * 8 / dtype_bits(out));
  if (out == DType::F32) std::memcpy(v.data(), buf.data(), n);
  else {  // widened here by their bit patterns, independently of the library's conversions
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, buf.data() + 2 * i, 2);
      if (out == DType::BF16) {
        const uint32_t b = static_cast<uint32_t>(h) << 16;
        std::memcpy(&v[i], &b, 4);
      } else {  // finite F16 (the products are)
        const int e = (h >> 10) & 31, m = h & 1023;
        const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
        v[i] = static_cast<float>((h & 0x8000) ? -mag : mag);
      }
    }
  }
  return v;
}

void check_products(const fs::path& dir, DType out) {
  const Checkpoint ck = Checkpoint::open(dir);
  const Checkpoint ex = Checkpoint::open(dir.parent_path() / ("expected_" + dir.filename().string() + ".safetensors"));
  const double half_ulp = out == DType::F32 ? 0.0 : out == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double sub = out == DType::F16 ? std::ldexp(1.0, -25) : 0.0;
  size_t low_rank = 0;
  for (const TensorInfo& t : ck.tensors()) {
    INFO(t.name);
    if (t.format != Format::low_rank) continue;
    ++low_rank;
    REQUIRE(t.factors.size() == 2);
    CHECK(t.shape == ex.at(t.name).shape);
    const auto want = f64(ex, t.name), bound = f64(ex, t.name + ".bound");
    const auto got = as_f32(ck, t, out);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i)
      REQUIRE(std::abs(got[i] - want[i]) <= bound[i] + half_ulp * std::abs(want[i]) + sub);
  }
  CHECK(low_rank == 5);
}

}  // namespace

TEST_CASE("low-rank fixtures read as the original architecture", "[low_rank]") {
  for (const char* c : {"fp32", "bf16"}) {
    const fs::path d = th::fixtures() / "lowrank" / c;
    for (DType out : {DType::F32, DType::BF16, DType::F16}) check_products(d, out);
    const Checkpoint ck = Checkpoint::open(d);
    const Checkpoint ex = Checkpoint::open(d.parent_path() / (std::string("expected_") + c + ".safetensors"));
    // every tensor that is not a product: byte-identical to torch's (renamed bias included)
    for (const TensorInfo& t : ck.tensors()) {
      if (t.format == Format::low_rank) continue;
      const TensorInfo& e = ex.at(t.name);
      std::vector<std::byte> a(t.decoded_bytes(t.dtype)), b(e.decoded_bytes(e.dtype));
      ck.decode_into(t, a, t.dtype);
      ex.decode_into(e, b, e.dtype);
      CHECK(a == b);
    }
    CHECK(ck.find("fc1.0.weight") == nullptr);
    CHECK(ck.find("fc1.bias") != nullptr);
    CHECK(ck.at("conv.weight").shape == Shape{32, 24, 3, 3});
    CHECK_NOTHROW(ck.validate(ck.at("conv.weight")));
  }
}

TEST_CASE("low-rank slices equal the full decode, any thread count", "[low_rank]") {
  const fs::path d = th::fixtures() / "lowrank" / "fp32";
  OpenOptions one;
  one.threads = 1;
  const Checkpoint ck = Checkpoint::open(d), ck1 = Checkpoint::open(d, one);
  for (const char* name : {"fc1.weight", "conv.weight"}) {
    const TensorInfo& t = ck.at(name);
    const auto full = as_f32(ck, t, DType::F32);
    CHECK(as_f32(ck1, ck1.at(name), DType::F32) == full);
    for (unsigned dim = 0; dim < t.shape.size(); ++dim) {
      const uint64_t n = t.shape[dim], start = n / 3, stop = n - n / 4;
      const auto got = as_f32(ck, t, DType::F32, Slice{dim, start, stop});
      // the same window of the full tensor, by index arithmetic
      uint64_t outer = 1, inner = 1;
      for (unsigned k = 0; k < dim; ++k) outer *= t.shape[k];
      for (size_t k = dim + 1; k < t.shape.size(); ++k) inner *= t.shape[k];
      std::vector<float> want;
      for (uint64_t o = 0; o < outer; ++o)
        for (uint64_t j = start; j < stop; ++j)
          for (uint64_t i = 0; i < inner; ++i) want.push_back(full[(o * n + j) * inner + i]);
      INFO(name << " dim " << dim);
      CHECK(got == want);
    }
  }
}

TEST_CASE("a low-rank decode into a buffer at any byte address gives the same bytes", "[low_rank]") {
  // decode_into takes any std::byte buffer: an F32 product is never stored through a misaligned
  // float* (UBSan's report, before), whatever the alignment.
  const Checkpoint ck = Checkpoint::open(th::fixtures() / "lowrank" / "fp32");
  for (const TensorInfo& t : ck.tensors()) {
    if (t.format != Format::low_rank) continue;
    INFO(t.name);
    for (DType d : {DType::F32, DType::BF16}) {
      const uint64_t n = ck.output_bytes(t, d);
      std::vector<std::byte> aligned(n), odd(n + 3);
      REQUIRE(ck.decode_into(t, aligned, d) == n);
      for (size_t shift = 1; shift < 4; ++shift) {
        REQUIRE(ck.decode_into(t, std::span(odd).subspan(shift, n), d) == n);
        CHECK(std::memcmp(odd.data() + shift, aligned.data(), n) == 0);
      }
    }
  }
}

TEST_CASE("low-rank stored view and refusals", "[low_rank]") {
  const fs::path d = th::fixtures() / "lowrank" / "fp32";
  OpenOptions o;
  o.low_rank = LowRank::stored;
  const Checkpoint st = Checkpoint::open(d, o);
  CHECK(st.find("fc1.0.weight") != nullptr);
  CHECK(st.find("fc1.weight") == nullptr);
  for (const auto& t : st.tensors()) CHECK(t.format == Format::dense);
  const Checkpoint ck = Checkpoint::open(d);
  std::vector<std::byte> buf(ck.at("fc1.weight").decoded_bytes(DType::F32));
  CHECK(th::error_kind([&] { ck.decode_into(ck.at("fc1.weight"), buf, DType::I32); }) == ErrorKind::unsupported);
  CHECK(th::error_kind([&] { ck.decode_into(ck.at("fc1.weight"), std::span(buf).first(8), DType::F32); }) ==
        ErrorKind::buffer_too_small);
  CHECK(th::error_kind([&] { (void)ck.stored_view(ck.at("fc1.weight")); }) == ErrorKind::unsupported);
  // A config that does not match the stored factors: refused at open, naming decompose_config.json.
  const fs::path bad = fs::temp_directory_path() / ("ctstream_lowrank_" + std::to_string(::getpid()));
  fs::remove_all(bad);
  fs::create_directories(bad);
  fs::copy_file(d / "model.safetensors", bad / "model.safetensors");
  auto cfg = th::read_json(d / "decompose_config.json");
  cfg["fc1"]["modules"]["0"]["out_features"] = 1000;
  std::ofstream(bad / "decompose_config.json") << cfg.dump();
  try {
    (void)Checkpoint::open(bad);
    FAIL("opened");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_config);
    CHECK(e.file().find("decompose_config.json") != std::string::npos);
  }
  CHECK_NOTHROW(Checkpoint::open(bad, o));
  fs::remove_all(bad);
}

TEST_CASE("decompose_config.json round trip through the one description", "[low_rank]") {
  const auto text = [] {
    std::ifstream f(th::fixtures() / "lowrank" / "fp32" / "decompose_config.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  const auto mods = format::parse_decompose_config(text, "x");
  REQUIRE(mods.size() == 5);
  const auto again = format::parse_decompose_config(format::decompose_config_json(mods), "y");
  REQUIRE(again.size() == mods.size());
  for (size_t i = 0; i < mods.size(); ++i) {
    CHECK(again[i].name == mods[i].name);
    CHECK(again[i].weight_shape() == mods[i].weight_shape());
    CHECK(again[i].a_shape() == mods[i].a_shape());
    CHECK(again[i].bias == mods[i].bias);
    CHECK(again[i].conv_attrs == mods[i].conv_attrs);
  }
}

TEST_CASE("a low-rank product far larger than its factors is refused at open (decompression bomb)", "[low_rank]") {
  // Rank-1 factors of a 16384 x 16384 Linear: 64 KiB of factors would claim 2^28 elements (and
  // 2^28 multiply-adds) for whoever asks for the weight. Rank 8 of 1024 x 1024 (gain 64) is fine.
  th::TempDir tmp("lrbomb");
  for (auto [n, r, ok] : {std::tuple<uint64_t, uint64_t, bool>{16384, 1, false}, {1024, 8, true}}) {
    const fs::path d = tmp.path / std::to_string(n);
    fs::create_directories(d);
    {
      SafetensorsWriter w(d / "model.safetensors",
                          {{"m.0.weight", DType::F32, {r, n}}, {"m.1.weight", DType::F32, {n, r}}});
      w.write(std::vector<std::byte>(2 * n * r * 4, std::byte{0}));
      w.commit();
    }
    std::ofstream(d / "decompose_config.json")
        << R"({"m": {"type": "Sequential", "modules": {"0": {"type": "Linear", "in_features": )" << n
        << R"(, "out_features": )" << r << R"(, "bias": false}, "1": {"type": "Linear", "in_features": )" << r
        << R"(, "out_features": )" << n << R"(, "bias": false}}}})";
    INFO(n << " x " << n << " rank " << r);
    if (ok) {
      CHECK(Checkpoint::open(d).at("m.weight").numel() == n * n);
    } else {
      CHECK(th::error_kind([&] { (void)Checkpoint::open(d); }) == ErrorKind::corrupt_tensor);
      OpenOptions stored;  // the factors as stored stay readable
      stored.low_rank = LowRank::stored;
      CHECK(Checkpoint::open(d, stored).tensors().size() == 2);
    }
  }
}
