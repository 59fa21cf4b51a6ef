// Conversion kernels: every SIMD path against the scalar reference (exhaustive over 16-bit
// inputs, random + special patterns for f32, awkward lengths), and the scalar reference against
// torch's own conversions (fixture tests/fixtures/st/convert.safetensors, see gen_safetensors.py).
#include <catch2/catch.hpp>
#include <cmath>

#include "codecs/convert.hpp"
#include "codecs/dequant.hpp"
#include "codecs/half.hpp"
#include "ctstream/ctstream.hpp"
#include "helpers.hpp"

using namespace ctstream;
using codecs::Isa;

namespace {

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa i : codecs::kAllIsas)
    if (i != Isa::scalar && codecs::isa_supported(i)) v.push_back(i);
  return v;
}

std::vector<uint32_t> f32_patterns() {
  std::vector<uint32_t> v = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                             0x7FBFFFFF, 0xFF812345, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x477FEFFF,
                             0x477FF000, 0x477FF001, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001, 0x32FFFFFF,
                             0x3F808000, 0x3F818000, 0xBF808000, 0x3F800001, 0x3F807FFF, 0x3F80FFFF, 0x38000000};
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) v.push_back(rng());
  // Exponents around the f16 subnormal / normal boundary, every rounding position.
  for (uint32_t e = 95; e <= 145; ++e)
    for (int k = 0; k < 64; ++k) v.push_back((e << 23) | (rng() & 0x7FFFFF) | (k & 1 ? 0x80000000u : 0u));
  return v;
}

template <class In>
void check_kernel(DType src, DType dst, const std::vector<In>& input) {
  const size_t out_sz = dtype_bits(dst) / 8;
  const auto ref_fn = codecs::convert_kernel(src, dst, Isa::scalar);
  for (Isa isa : simd_isas()) {
    const auto fn = codecs::convert_kernel(src, dst, isa);
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(15), size_t(16), size_t(17), size_t(31), size_t(33),
                     size_t(63), input.size()}) {
      n = std::min(n, input.size());
      std::vector<std::byte> want(n * out_sz + 64, std::byte{0xAB});
      ref_fn(input.data(), want.data(), n, false);
      // stream: non-temporal stores where the output is 64-, 32- or 16-byte aligned, plain stores
      // elsewhere (an output 2 bytes past a line); each the same bytes, nothing past n
      for (const bool stream : {false, true})
        for (const size_t at : {size_t(0), size_t(16), size_t(32), size_t(2)}) {
          std::vector<std::byte> buf(n * out_sz + 64 + 128, std::byte{0xAB});
          const auto base = (reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63};
          std::byte* got = buf.data() + (base - reinterpret_cast<uintptr_t>(buf.data())) + at;
          fn(input.data(), got, n, stream);
          codecs::store_fence();
          INFO(codecs::isa_name(isa) << " " << dtype_name(src) << "->" << dtype_name(dst) << " n=" << n
                                     << " stream=" << stream << " at=" << at);
          REQUIRE(std::memcmp(want.data(), got, want.size()) == 0);  // incl. no write past n
        }
    }
  }
}

}  // namespace

TEST_CASE("SIMD conversions equal the scalar reference bit for bit", "[convert][simd]") {
  std::vector<uint16_t> all16(65536);
  for (uint32_t i = 0; i < 65536; ++i) all16[i] = static_cast<uint16_t>(i);
  const auto f32 = f32_patterns();
  check_kernel(DType::F32, DType::BF16, f32);
  check_kernel(DType::F32, DType::F16, f32);
  check_kernel(DType::BF16, DType::F32, all16);
  check_kernel(DType::F16, DType::F32, all16);
  check_kernel(DType::BF16, DType::F16, all16);
  check_kernel(DType::F16, DType::BF16, all16);
}

TEST_CASE("scalar f16 widening is exact for every f16 value", "[convert]") {
  // Independent reference: the value is sign * m * 2^(e-25) computed with ldexp in double.
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const float got = codecs::f32_from_bits(codecs::f16_to_f32(static_cast<uint16_t>(h)));
    if (e == 0x1F) {
      REQUIRE((m ? std::isnan(got) : std::isinf(got)));
      continue;
    }
    const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m | 0x400), int(e) - 25);
    const double want = (h & 0x8000) ? -mag : mag;
    REQUIRE(double(got) == want);
    REQUIRE(std::signbit(got) == bool(h & 0x8000));
  }
}

TEST_CASE("scalar f32 narrowing equals torch on the fixture vectors", "[convert][fixture][dispatch]") {
  // Decodes src.<X> through the public API (active ISA) and compares with torch's .to(<Y>).
  auto ckpt = Checkpoint::open(th::fixtures() / "st" / "convert.safetensors");
  const std::pair<const char*, DType> names[] = {{"f32", DType::F32}, {"f16", DType::F16}, {"bf16", DType::BF16}};
  int compared = 0;
  for (const auto& [sn, sd] : names) {
    for (const auto& [dn, dd] : names) {
      if (sd == dd) continue;
      const auto& src = ckpt.at(std::string("src.") + sn);
      const auto& ref = ckpt.at(std::string("ref.") + sn + "_to_" + dn);
      REQUIRE(ref.dtype == dd);
      std::vector<std::byte> got(src.decoded_bytes(dd)), want(ref.decoded_bytes(dd));
      ckpt.decode_into(src, got, dd);
      ckpt.decode_into(ref, want, dd);
      REQUIRE(got.size() == want.size());
      const size_t esz = dtype_bits(dd) / 8;
      for (size_t i = 0; i < src.numel(); ++i) {
        uint32_t g = 0, w = 0;
        std::memcpy(&g, got.data() + i * esz, esz);
        std::memcpy(&w, want.data() + i * esz, esz);
        const DType out = dd;  // (a lambda may not capture a structured binding before C++20 in clang 14)
        auto as_f32 = [out](uint32_t v) {
          return codecs::f32_from_bits(out == DType::F32    ? v
                                       : out == DType::BF16 ? codecs::bf16_to_f32(uint16_t(v))
                                                            : codecs::f16_to_f32(uint16_t(v)));
        };
        INFO(sn << "->" << dn << " element " << i << " got 0x" << std::hex << g << " want 0x" << w);
        // torch canonicalises NaN payloads differently on its scalar and vector paths; NaN-ness is
        // what both promise, so NaN is compared as NaN and everything else bit for bit.
        if (std::isnan(as_f32(w))) REQUIRE(std::isnan(as_f32(g)));
        else REQUIRE(g == w);
        ++compared;
      }
    }
  }
  REQUIRE(compared > 100);
}

TEST_CASE("a row of stored scales as f32 equals stored_to_f32 of each element", "[convert]") {
  // The reader converts a row of scales (or zero points) at a time: every byte value of the
  // one-byte dtypes (tables), every 16-bit pattern of BF16 / F16 (conversion kernels, rows that end
  // off a vector), f32 patterns; the reference is the per-element stored_to_f32 (codecs/element.hpp).
  std::vector<uint8_t> bytes(256), words(65536 * 2);  // every byte; every 16-bit word, little-endian
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  for (size_t k = 0; k < 65536; ++k)
    words[2 * k] = static_cast<uint8_t>(k), words[2 * k + 1] = static_cast<uint8_t>(k >> 8);
  const std::vector<uint32_t> f32 = f32_patterns();
  struct Case {
    DType d;
    bool e8m0;
  };
  for (const Case c :
       {Case{DType::F8_E4M3, false}, Case{DType::F8_E8M0, false}, Case{DType::U8, true}, Case{DType::U8, false},
        Case{DType::I8, false}, Case{DType::BF16, false}, Case{DType::F16, false}, Case{DType::F32, false}}) {
    const size_t sz = dtype_bits(c.d) / 8;
    const uint8_t* in = c.d == DType::F32 ? reinterpret_cast<const uint8_t*>(f32.data())
                        : sz == 2         ? words.data()
                                          : bytes.data();
    const size_t total = c.d == DType::F32 ? f32.size() : sz == 1 ? 256 : 65536;
    for (size_t n : {total, total - 1, size_t(1), size_t(0)}) {
      std::vector<float> got(n + 1, -7.f);
      codecs::stored_row_to_f32(c.d, in, n, c.e8m0, got.data());
      for (size_t i = 0; i < n; ++i) {
        const float want = codecs::stored_to_f32(c.d, in + i * sz, c.e8m0);
        INFO(dtype_name(c.d) << " e8m0 " << c.e8m0 << " element " << i << " of " << n);
        REQUIRE(codecs::f32_bits(got[i]) == codecs::f32_bits(want));
      }
      REQUIRE(got[n] == -7.f);
    }
  }
}
