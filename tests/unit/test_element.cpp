// codecs/element.hpp — the per-element arithmetic shared by the CPU reference kernels and the CUDA
// kernels — against independent references: formulas built from the format definitions with
// std::ldexp (every F16 / BF16 / F8 / FP4 / FP6 / E8M0 pattern), a generic bit-stream reader for
// packed int codes (every width, both layouts), and the scalar and SIMD dequant kernels of every
// ISA this CPU has for the dequantization sequence. The fixtures (test_compressed.cpp) tie the
// same functions to the compressed-tensors library bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codecs/dequant.hpp"
#include "codecs/element.hpp"
#include "ctstream/dtype.hpp"

using namespace ctstream;
using codecs::Isa;

namespace {

// Same value, or both NaN with the same sign (payloads are checked separately where defined).
bool same_value(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) && std::signbit(got) == std::signbit(want);
  return static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
}

// A value of a sign / exponent / mantissa float format: (-1)^s * 2^(e - bias) * (1 + m / 2^mb),
// subnormal (e = 0): 2^(1 - bias) * m / 2^mb.
double minifloat(unsigned s, unsigned e, unsigned m, int bias, unsigned mbits) {
  const double frac = static_cast<double>(m) / static_cast<double>(1u << mbits);
  const double mag = e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0 + frac, static_cast<int>(e) - bias);
  return s ? -mag : mag;
}

// Round-to-nearest-even of finite f32 `x` to a format with `mbits` mantissa bits, `bias`,
// `emax` (largest finite exponent field) by exhaustive search over its finite values — slow and
// independent of any bit trick. Returns the code (sign included), or the Inf code past the max.
uint16_t rne_search(float x, int bias, unsigned ebits, unsigned mbits) {
  const unsigned sbit = 1u << (ebits + mbits);
  const unsigned emax = (1u << ebits) - 2;  // IEEE-like: all-ones exponent is Inf / NaN
  const double v = std::fabs(static_cast<double>(x));
  const unsigned sign = std::signbit(x) ? sbit : 0;
  // largest finite value and the halfway point to the next binade (rounds to Inf at or above)
  const double maxv = minifloat(0, emax, (1u << mbits) - 1, bias, mbits);
  const double inf_edge = maxv + std::ldexp(0.5, static_cast<int>(emax) - bias - static_cast<int>(mbits));
  if (v >= inf_edge) return static_cast<uint16_t>(sign | ((emax + 1) << mbits));
  // positive codes are ordered by value: the last one not above v, and the one after it
  unsigned lo = 0, hi = (emax + 1) << mbits;  // invariant: value(lo) <= v < value(hi) (hi may be Inf)
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (minifloat(0, mid >> mbits, mid & ((1u << mbits) - 1), bias, mbits) <= v) lo = mid;
    else hi = mid;
  }
  unsigned best = lo;
  if (hi <= ((emax << mbits) | ((1u << mbits) - 1))) {
    const double dl = v - minifloat(0, lo >> mbits, lo & ((1u << mbits) - 1), bias, mbits);
    const double dh = minifloat(0, hi >> mbits, hi & ((1u << mbits) - 1), bias, mbits) - v;
    if (dh < dl || (dh == dl && (hi & 1u) == 0)) best = hi;
  }
  return static_cast<uint16_t>(sign | best);
}

std::vector<uint32_t> f32_samples() {
  std::vector<uint32_t> v = {0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x477FEFFF,
                             0x477FF000, 0x477FF001, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001, 0x32FFFFFF,
                             0x3F808000, 0x3F818000, 0xBF808000, 0x3F800001, 0x3F807FFF, 0x3F80FFFF, 0x7F7F8000};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const uint32_t u = rng();
    if ((u & 0x7F800000u) != 0x7F800000u) v.push_back(u);
  }
  for (uint32_t e = 100; e <= 145; ++e)  // around the f16 subnormal / normal / overflow boundaries
    for (int k = 0; k < 16; ++k) v.push_back((e << 23) | (rng() & 0x7FFFFF) | (k & 1 ? 0x80000000u : 0u));
  return v;
}

}  // namespace

TEST_CASE("element: F16 and BF16 to F32, every pattern", "[element]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const unsigned s = h >> 15;
    INFO("pattern 0x" << std::hex << h);
    // F16: 5-bit exponent (bias 15), 10-bit mantissa; all-ones exponent is Inf / NaN
    const unsigned e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double want16 = e == 0x1F ? (m ? (s ? -NAN : NAN) : (s ? -INFINITY : INFINITY)) : minifloat(s, e, m, 15, 10);
    const float got16 = codecs::f32_from_bits(codecs::f16_to_f32(static_cast<uint16_t>(h)));
    REQUIRE(same_value(got16, want16));
    if (e == 0x1F && m)  // NaN payload: the quiet bit set, the rest of the payload kept (F16C)
      REQUIRE(codecs::f16_to_f32(static_cast<uint16_t>(h)) == ((s << 31) | 0x7FC00000u | (m << 13)));
    // BF16: 8-bit exponent (bias 127), 7-bit mantissa
    const unsigned be = (h >> 7) & 0xFF, bm = h & 0x7F;
    const double wantb =
        be == 0xFF ? (bm ? (s ? -NAN : NAN) : (s ? -INFINITY : INFINITY)) : minifloat(s, be, bm, 127, 7);
    REQUIRE(same_value(codecs::f32_from_bits(codecs::bf16_to_f32(static_cast<uint16_t>(h))), wantb));
  }
}

TEST_CASE("element: F32 to F16 and BF16 round to nearest even, NaN and Inf kept", "[element]") {
  for (uint32_t u : f32_samples()) {
    const float x = codecs::f32_from_bits(u);
    INFO("f32 0x" << std::hex << u);
    REQUIRE(codecs::f32_to_f16(u) == rne_search(x, 15, 5, 10));
    // BF16 spans F32's range: search only the neighbours (the two codes around truncation)
    const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
    // (magnitudes from the fields; exponent field 255 with mantissa 0 stands for 2^128, the
    // overflow threshold of round-to-nearest: rounding there gives Inf)
    auto mag = [](uint16_t c) { return minifloat(0, (c >> 7) & 0xFF, c & 0x7F, 127, 7); };
    const double ax = std::fabs(static_cast<double>(x));
    const double dl = std::fabs(mag(lo) - ax), dh = std::fabs(mag(hi) - ax);
    const uint16_t want = dl < dh || (dl == dh && (lo & 1u) == 0) ? lo : hi;
    REQUIRE(codecs::f32_to_bf16(u) == want);
  }
  for (uint32_t sign : {0u, 0x80000000u}) {
    REQUIRE(codecs::f32_to_f16(sign | 0x7F800000u) == ((sign >> 16) | 0x7C00u));
    REQUIRE(codecs::f32_to_bf16(sign | 0x7F800000u) == ((sign >> 16) | 0x7F80u));
    for (uint32_t payload : {1u, 0x2000u, 0x400000u, 0x7FFFFFu}) {  // NaN stays NaN, sign kept
      const uint32_t nan = sign | 0x7F800000u | payload;
      const uint16_t h = codecs::f32_to_f16(nan), b = codecs::f32_to_bf16(nan);
      REQUIRE(((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0));
      REQUIRE(((b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0));
      REQUIRE((h >> 15) == (sign >> 31));
      REQUIRE((b >> 15) == (sign >> 31));
    }
  }
}

TEST_CASE("element: the 8-, 6- and 4-bit float formats and E8M0, every code", "[element]") {
  for (unsigned v = 0; v < 256; ++v) {
    INFO("code 0x" << std::hex << v);
    const unsigned s = v >> 7;
    // float8_e4m3fn: bias 7, S.1111.111 is NaN, no Inf
    const unsigned e4 = (v >> 3) & 0xF, m3 = v & 7;
    REQUIRE(same_value(codecs::e4m3_to_f32(static_cast<uint8_t>(v)),
                       (e4 == 15 && m3 == 7) ? (s ? -NAN : NAN) : minifloat(s, e4, m3, 7, 3)));
    // float8_e5m2: bias 15, IEEE Inf / NaN
    const unsigned e5 = (v >> 2) & 0x1F, m2 = v & 3;
    REQUIRE(same_value(codecs::e5m2_to_f32(static_cast<uint8_t>(v)),
                       e5 == 31 ? (m2 ? (s ? -NAN : NAN) : (s ? -INFINITY : INFINITY)) : minifloat(s, e5, m2, 15, 2)));
    // fnuz variants: bias 8 / 16, 0x80 the only NaN, no -0
    REQUIRE(same_value(codecs::e4m3fnuz_to_f32(static_cast<uint8_t>(v)), v == 0x80 ? NAN : minifloat(s, e4, m3, 8, 3)));
    REQUIRE(
        same_value(codecs::e5m2fnuz_to_f32(static_cast<uint8_t>(v)), v == 0x80 ? NAN : minifloat(s, e5, m2, 16, 2)));
    // E8M0 scale: 2^(v - 127), 255 -> +Inf (compressed-tensors' bf16 overflow); fnu: 255 is NaN
    REQUIRE(
        same_value(codecs::e8m0_to_f32(static_cast<uint8_t>(v)), v == 255 ? INFINITY : std::ldexp(1.0, int(v) - 127)));
    REQUIRE(
        same_value(codecs::e8m0fnu_to_f32(static_cast<uint8_t>(v)), v == 255 ? NAN : std::ldexp(1.0, int(v) - 127)));
  }
  for (unsigned v = 0; v < 64; ++v) {  // FP6 E2M3: bias 1, no Inf / NaN
    INFO("fp6 code " << v);
    REQUIRE(same_value(codecs::e2m3_to_f32(static_cast<uint8_t>(v)), minifloat(v >> 5, (v >> 3) & 3, v & 7, 1, 3)));
  }
  for (unsigned v = 0; v < 16; ++v) {  // FP4 E2M1: bias 1; only the low nibble counts
    INFO("fp4 code " << v);
    const double want = minifloat(v >> 3, (v >> 1) & 3, v & 1, 1, 1);
    REQUIRE(same_value(codecs::e2m1_to_f32(static_cast<uint8_t>(v)), want));
    REQUIRE(same_value(codecs::e2m1_to_f32(static_cast<uint8_t>(v | 0xF0)), want));
  }
}

TEST_CASE("element: packed int codes, every width, both layouts", "[element]") {
  std::mt19937 rng(11);
  for (unsigned bits = 1; bits <= 8; ++bits) {
    for (bool dense : {true, false}) {
      for (uint64_t cols : {1u, 7u, 31u, 32u, 33u, 100u, 257u}) {
        const uint64_t words = dense ? (cols * bits + 31) / 32 : (cols + 32 / bits - 1) / (32 / bits);
        std::vector<uint32_t> w(words + 1);
        for (auto& x : w) x = rng();
        std::vector<uint8_t> bytes(w.size() * 4);
        std::memcpy(bytes.data(), w.data(), bytes.size());
        // stream bit k of the little-endian words
        auto bit = [&](uint64_t k) { return (w[k / 32] >> (k % 32)) & 1u; };
        std::vector<float> row(cols);
        codecs::unpack_int_row(bytes.data(), bits, dense, cols, row.data());
        for (uint64_t i = 0; i < cols; ++i) {
          const uint64_t first = dense ? i * bits : (i / (32 / bits)) * 32 + (i % (32 / bits)) * bits;
          uint32_t want = 0;
          for (unsigned b = 0; b < bits; ++b) want |= bit(first + b) << b;
          INFO("bits " << bits << (dense ? " dense" : " legacy") << " cols " << cols << " code " << i);
          REQUIRE(codecs::int_code(bytes.data(), 4, bits, dense, i) == want);
          const float value = static_cast<float>(static_cast<int>(want) - (1 << (bits - 1)));
          REQUIRE(codecs::int_code_value(want, bits) == value);
          REQUIRE(row[i] == value);  // the scalar reference unpacks through the same functions
        }
        // a column of a matrix packed along rows: word k at stride G words (zero points)
        const uint64_t G = 3;
        std::vector<uint8_t> strided(bytes.size() * G);
        for (size_t k = 0; k < w.size(); ++k) std::memcpy(&strided[k * G * 4 + 4], &bytes[k * 4], 4);
        for (uint64_t i = 0; i < cols; ++i)
          REQUIRE(codecs::int_code(strided.data() + 4, 4 * G, bits, dense, i) ==
                  codecs::int_code(bytes.data(), 4, bits, dense, i));
      }
    }
  }
}

TEST_CASE("element: dequant_element is the arithmetic of every dequant kernel", "[element]") {
  std::mt19937 rng(5);
  const size_t cols = 96, group = 32, groups = cols / group;
  auto rnd_bf16 = [&] {  // a scale: a random finite BF16 value of moderate magnitude
    const uint16_t h = static_cast<uint16_t>((rng() & 0x8000u) | ((118u + rng() % 16u) << 7) | (rng() & 0x7Fu));
    return codecs::f32_from_bits(codecs::bf16_to_f32(h));
  };
  for (DType S : {DType::BF16, DType::F16, DType::F32}) {
    for (DType D : {DType::BF16, DType::F16, DType::F32}) {
      const size_t osz = dtype_bits(D) / 8;
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> scale(groups), zp(groups);
        for (auto& s : scale) s = rnd_bf16();
        for (auto& z : zp) z = static_cast<float>(static_cast<int>(rng() % 16) - 8);
        std::vector<uint8_t> codes(cols), nib(cols / 2);
        for (auto& c : codes) c = static_cast<uint8_t>(rng());
        for (auto& c : nib) c = static_cast<uint8_t>(rng());
        float lut[16];
        for (int k = 0; k < 16; ++k) lut[k] = static_cast<float>(k - 8);
        const codecs::DequantSpec spec{S, D, group, true};
        for (bool with_zp : {false, true}) {
          const float* z = with_zp ? zp.data() : nullptr;
          std::vector<uint8_t> want_nib(cols * osz), want_i8(cols * osz), want_e4(cols * osz);
          for (size_t j = 0; j < cols; ++j) {
            const size_t g = j / group;
            const uint32_t a =
                codecs::dequant_element(lut[(nib[j / 2] >> (4 * (j % 2))) & 0xF], scale[g], with_zp, zp[g], true, S, D);
            const uint32_t b = codecs::dequant_element(static_cast<float>(static_cast<int8_t>(codes[j])), scale[g],
                                                       with_zp, zp[g], true, S, D);
            const uint32_t c = codecs::dequant_element(codecs::e4m3_to_f32(codes[j]), scale[g], false, 0.f, true, S, D);
            std::memcpy(&want_nib[j * osz], &a, osz);
            std::memcpy(&want_i8[j * osz], &b, osz);
            std::memcpy(&want_e4[j * osz], &c, osz);
          }
          for (Isa isa : codecs::kAllIsas) {
            if (!codecs::isa_supported(isa)) continue;
            INFO(codecs::isa_name(isa) << " S=" << dtype_name(S) << " D=" << dtype_name(D) << " zp=" << with_zp);
            std::vector<uint8_t> got(cols * osz);
            codecs::dequant_nibble_kernel(isa)(nib.data(), cols, lut, scale.data(), z, spec, got.data());
            REQUIRE(got == want_nib);
            codecs::dequant_byte_kernel(isa)(codes.data(), cols, codecs::ByteCode::i8, scale.data(), z, spec, nullptr,
                                             got.data());
            REQUIRE(got == want_i8);
            std::vector<float> x(cols);
            for (size_t j = 0; j < cols; ++j) x[j] = static_cast<float>(static_cast<int8_t>(codes[j]));
            codecs::dequant_f32_row(x.data(), cols, scale.data(), z, nullptr, spec, isa, got.data());
            REQUIRE(got == want_i8);
            codecs::dequant_byte_kernel(isa)(codes.data(), cols, codecs::ByteCode::e4m3, scale.data(), nullptr, spec,
                                             nullptr, got.data());
            // NaN codes: compare as NaN of the output dtype, everything else bit for bit
            for (size_t j = 0; j < cols; ++j)
              if (!std::isnan(codecs::e4m3_to_f32(codes[j])))
                REQUIRE(std::memcmp(&got[j * osz], &want_e4[j * osz], osz) == 0);
          }
        }
        // fp8 zero points: the subtraction is rounded to S (generic kernel, int_values = false)
        std::vector<float> x(cols), fzp(groups);
        for (size_t j = 0; j < cols; ++j) x[j] = codecs::e4m3_to_f32(static_cast<uint8_t>(codes[j] & 0x7E));
        for (auto& z : fzp) z = codecs::e4m3_to_f32(static_cast<uint8_t>(rng() & 0x7E));
        const codecs::DequantSpec fspec{S, D, group, false};
        std::vector<uint8_t> got(cols * osz);
        codecs::dequant_f32_row(x.data(), cols, scale.data(), fzp.data(), nullptr, fspec, Isa::scalar, got.data());
        for (size_t j = 0; j < cols; ++j) {
          const size_t g = j / group;
          // independent: round x - z to S through the conversions, then the product, then S -> D
          float d = x[j] - fzp[g];
          if (S != DType::F32) d = codecs::f32_from_bits(codecs::round_to(codecs::f32_bits(d), S));
          const float p = d * scale[g];
          const uint32_t want = codecs::dequant_finish(p, S, D);
          const uint32_t el = codecs::dequant_element(x[j], scale[g], true, fzp[g], false, S, D);
          REQUIRE(el == want);
          REQUIRE(std::memcmp(&got[j * osz], &want, osz) == 0);
        }
      }
    }
  }
}

TEST_CASE("element: mask ranks and FP6 codes", "[element]") {
  for (unsigned b = 0; b < 256; ++b)
    for (unsigned j = 0; j < 8; ++j) {
      unsigned want = 0;
      for (unsigned k = 0; k < j; ++k) want += (b >> k) & 1u;
      REQUIRE(codecs::mask_rank_in_byte(static_cast<uint8_t>(b), j) == want);
    }
  std::mt19937 rng(3);
  std::vector<uint8_t> row(3 * 8);
  for (auto& x : row) x = static_cast<uint8_t>(rng());
  for (uint64_t j = 0; j < 32; ++j) {  // code j = stream bits [6j, 6j + 6) of each 3-byte group
    uint32_t want = 0;
    const uint64_t base = (j / 4) * 24 + (j % 4) * 6;
    for (unsigned k = 0; k < 6; ++k) want |= ((row[(base + k) / 8] >> ((base + k) % 8)) & 1u) << k;
    REQUIRE(codecs::fp6_code(row.data(), j) == want);
  }
}
