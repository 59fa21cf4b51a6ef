// Bitmask-expand and fused nibble-dequant kernels: every SIMD path against the scalar reference.
// Inputs the kernels read (mask, values, packed codes, scales, zero points) are placed so that
// they end exactly at a PROT_NONE page: reading one byte more than the scalar kernel does faults.
// Outputs carry a sentinel tail: writing past `cols` elements fails the comparison.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codecs/bitmask.hpp"
#include "codecs/dequant.hpp"
#include "codecs/element.hpp"
#include "codecs/half.hpp"
#include "codecs/minifloat.hpp"
#include "core/packing.hpp"
#include "ctstream/dtype.hpp"

using namespace ctstream;
using codecs::Isa;

namespace {

// Output starts for the streaming cases: the kernels' non-temporal stores (DequantSpec::stream)
// take whole lines, 16- or 32-byte pieces of them, or fall back to plain stores, so each streaming
// case runs at a line, 16 / 32 / 48 bytes past one (malloc's large buffers sit 16 past a page), and
// one element (esz bytes) past one.
std::vector<size_t> stream_shifts(size_t esz) { return {0, 16, 32, 48, esz}; }

// An output buffer whose row starts `shift` bytes past a 64-byte boundary, filled with 0xAB.
// untouched_before(): nothing was written ahead of the row.
struct OutBuf {
  std::vector<unsigned char> v;
  unsigned char* p;
  OutBuf(size_t n, size_t shift) : v(n + 64 + shift, 0xAB) {
    p = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63)) + shift;
  }
  bool untouched_before() const {
    return std::all_of(v.data(), static_cast<const unsigned char*>(p), [](unsigned char c) { return c == 0xAB; });
  }
  std::vector<unsigned char> row(size_t n) const { return {p, p + n}; }
};

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa i : codecs::kAllIsas)
    if (i != Isa::scalar && codecs::isa_supported(i)) v.push_back(i);
  return v;
}

// `bytes` bytes of copied data ending exactly where a PROT_NONE page begins.
class Guarded {
 public:
  Guarded(const void* data, size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    map_len_ = ((bytes + page - 1) / page + 1) * page;
    void* p = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<unsigned char*>(p);
    REQUIRE(mprotect(base_ + map_len_ - page, page, PROT_NONE) == 0);
    ptr_ = base_ + map_len_ - page - bytes;
    if (bytes) std::memcpy(ptr_, data, bytes);
  }
  ~Guarded() { munmap(base_, map_len_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  template <class T>
  const T* get() const {
    return reinterpret_cast<const T*>(ptr_);
  }

 private:
  unsigned char* base_ = nullptr;
  unsigned char* ptr_ = nullptr;
  size_t map_len_ = 0;
};

const size_t kBitmaskCols[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 4099};

}  // namespace

TEST_CASE("SIMD bitmask expand equals the scalar reference", "[codecs][simd]") {
  std::mt19937_64 rng(20240611);
  for (unsigned esz : {1u, 2u, 4u}) {
    const auto ref = codecs::bitmask_expand_kernel(esz, Isa::scalar);
    for (double density : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      std::bernoulli_distribution bit(density);
      for (size_t cols : kBitmaskCols) {
        const size_t mbytes = (cols + 7) / 8;
        std::vector<uint8_t> mask(mbytes, 0);
        for (size_t j = 0; j < cols; ++j)
          if (bit(rng)) mask[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
        if (cols % 8) mask[mbytes - 1] |= static_cast<uint8_t>(rng() << (cols % 8));  // padding bits are ignored
        const uint64_t count = codecs::bitmask_row_popcount(mask.data(), cols);
        std::vector<unsigned char> values(count * esz);
        for (auto& b : values) b = static_cast<unsigned char>(rng() | 1);  // non-zero, unlike the zero fill
        const Guarded gmask(mask.data(), mask.size()), gvalues(values.data(), values.size());

        std::vector<unsigned char> want(cols * esz + 64, 0xAB);
        REQUIRE(ref(gmask.get<uint8_t>(), gvalues.get<void>(), cols, want.data(), false) == count);
        for (Isa isa : simd_isas())
          for (int mode = 0; mode < 6; ++mode) {  // plain stores; streaming at each of stream_shifts()
            INFO(codecs::isa_name(isa) << " elem=" << esz << " density=" << density << " cols=" << cols << " mode "
                                       << mode);
            OutBuf ob(want.size(), mode > 0 ? stream_shifts(esz)[mode - 1] : 0);
            const auto fn = codecs::bitmask_expand_kernel(esz, isa);
            REQUIRE(fn(gmask.get<uint8_t>(), gvalues.get<void>(), cols, ob.p, mode > 0) == count);
            REQUIRE(ob.untouched_before());
            REQUIRE(ob.row(want.size()) == want);  // incl. the untouched sentinel tail
          }
      }
    }
  }
}

TEST_CASE("SIMD bitmask expand on random rows ending exactly at the guard page", "[codecs][simd]") {
  // Many random lengths and densities, so that the point where a kernel switches from whole-vector
  // loads to its tail path lands on every offset relative to the end of the values.
  std::mt19937_64 rng(424242);
  for (int trial = 0; trial < 600; ++trial) {
    const unsigned esz = 1u << (trial % 3);
    const size_t cols = 40 + rng() % 600;
    std::bernoulli_distribution bit(std::uniform_real_distribution<double>(0.02, 0.98)(rng));
    std::vector<uint8_t> mask((cols + 7) / 8, 0);
    for (size_t j = 0; j < cols; ++j)
      if (bit(rng)) mask[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    const uint64_t count = codecs::bitmask_row_popcount(mask.data(), cols);
    std::vector<unsigned char> values(count * esz);
    for (auto& b : values) b = static_cast<unsigned char>(rng() | 1);
    const Guarded gmask(mask.data(), mask.size()), gvalues(values.data(), values.size());
    std::vector<unsigned char> want(cols * esz + 64, 0xAB);
    codecs::bitmask_expand_kernel(esz, Isa::scalar)(gmask.get<uint8_t>(), gvalues.get<void>(), cols, want.data(),
                                                    false);
    for (Isa isa : simd_isas()) {
      INFO(codecs::isa_name(isa) << " elem=" << esz << " cols=" << cols << " trial=" << trial);
      std::vector<unsigned char> got(cols * esz + 64, 0xAB);
      REQUIRE(codecs::bitmask_expand_kernel(esz, isa)(gmask.get<uint8_t>(), gvalues.get<void>(), cols, got.data(),
                                                      trial % 2 == 1) == count);
      REQUIRE(std::memcmp(want.data(), got.data(), want.size()) == 0);
    }
  }
}

namespace {

// Every scale binade: each exponent field, both signs, five mantissas (zero, all ones, the bf16
// tie 0x8000 below and above an odd bf16, one random), NaNs left out (a NaN code times a NaN
// scale: which NaN comes out is the compiler's).
// Each SIMD nibble kernel equals the scalar one on a row (no zero points); returns the calls made.
int nibble_equals_scalar(const uint8_t* packed, size_t cols, const float* lut, const float* scale,
                         const codecs::DequantSpec& spec) {
  const size_t osz = dtype_bits(spec.out) / 8;
  std::vector<unsigned char> want(cols * osz), got(cols * osz);
  codecs::dequant_nibble_kernel(Isa::scalar)(packed, cols, lut, scale, nullptr, spec, want.data());
  int calls = 0;
  for (Isa isa : simd_isas()) {
    codecs::dequant_nibble_kernel(isa)(packed, cols, lut, scale, nullptr, spec, got.data());
    ++calls;
    INFO(codecs::isa_name(isa));
    REQUIRE(want == got);
  }
  return calls;
}

// Every exponent field, both signs; mantissas 0 and all ones (the binade's ends), a bf16 tie
// (0x8000, 0x18000), one past a tie (0x8001: a factor that loses its last bit rounds onto the tie),
// and one random.
std::vector<float> every_binade(std::mt19937_64& rng) {
  std::vector<float> v;
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t mant : {0u, 0x7FFFFFu, 0x8000u, 0x18000u, 0x8001u, static_cast<uint32_t>(rng()) & 0x7FFFFFu})
      for (uint32_t sign : {0u, 0x80000000u}) {
        const float sc = codecs::f32_from_bits(sign | e << 23 | mant);
        if (!std::isnan(sc)) v.push_back(sc);
      }
  return v;
}

// Scales: ordinary magnitudes plus values that overflow (to Inf in f32, bf16 or f16), land in the
// f16 / bf16 / f32 subnormal ranges, produce rounding ties, and the specials.
float random_scale(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const uint32_t r = static_cast<uint32_t>(rng());
  const float sign = (r & 1) ? -1.f : 1.f;
  switch ((r >> 1) % 12) {
    case 0: return sign * std::ldexp(1.f + u(rng), 126);                     // x * lut overflows f32
    case 1: return sign * (1e4f + 1e5f * u(rng));                            // f16 overflow / near max
    case 2: return sign * std::ldexp(1.f + u(rng), -20 - int(rng() % 8));    // f16 subnormals
    case 3: return sign * std::ldexp(1.f + u(rng), -130 - int(rng() % 14));  // bf16 / f32 subnormals
    case 4: return codecs::f32_from_bits((static_cast<uint32_t>(rng()) & 0xFFFF0000u) | 0x8000u);  // bf16 ties
    case 5: return codecs::f32_from_bits((static_cast<uint32_t>(rng()) & 0xFFFFE000u) | 0x1000u);  // f16 ties
    case 6: {
      const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, 65504.f, 65520.f, 3.3895314e38f};
      return specials[rng() % 8];
    }
    case 7: {  // NaNs with payloads (0x7FFFFFFF-like ones carry out of the mantissa if rounded naively)
      const uint32_t payload = (rng() & 1) ? 0x7FFFFFu : (static_cast<uint32_t>(rng()) & 0x7FFFFFu) | 1u;
      return codecs::f32_from_bits((r & 0x80000000u) | 0x7F800000u | payload);
    }
    default: return sign * 0.02f * u(rng);
  }
}

std::vector<float> int4_lut() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i - 8);
  return v;
}
std::vector<float> fp4_lut() {
  std::vector<float> v(16);
  for (uint8_t i = 0; i < 16; ++i) v[i] = codecs::e2m1_to_f32(i);
  return v;
}

}  // namespace

TEST_CASE("Packed int1-8 codes unpacked to int8 values: every ISA equals int_code(), reading only the row's bytes",
          "[codecs][simd]") {
  // The reference is element.hpp's int_code() (itself checked against the library's packing by
  // the [ct] fixtures); the row's ceil(cols * bits / 8) bytes (not its whole int32 words: a row
  // window may end mid-word) end at a PROT_NONE page, so a read past them faults.
  std::mt19937 rng(11);
  int calls = 0;
  for (unsigned bits = 1; bits <= 8; ++bits)
    for (size_t cols : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(64), size_t(65), size_t(127),
                        size_t(128), size_t(129), size_t(1000), size_t(4096), size_t(4103)}) {
      std::vector<uint8_t> row(detail::packed_words(cols, bits, true) * 4);
      for (auto& b : row) b = static_cast<uint8_t>(rng());
      std::vector<int8_t> want(cols);
      for (size_t i = 0; i < cols; ++i)
        want[i] = static_cast<int8_t>(codecs::int_code_value(codecs::int_code(row.data(), 4, bits, true, i), bits));
      const Guarded g(row.data(), (cols * bits + 7) / 8);
      for (Isa isa : codecs::kAllIsas) {
        if (!codecs::isa_supported(isa)) continue;
        std::vector<int8_t> got(cols + 64, 0x55);
        codecs::unpack_int8_kernel(isa)(g.get<uint8_t>(), bits, cols, got.data());
        ++calls;
        INFO(codecs::isa_name(isa) << " bits " << bits << " cols " << cols);
        CHECK(std::equal(want.begin(), want.end(), got.begin()));
        CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(cols), got.end(),
                          [](int8_t c) { return c == 0x55; }));
      }
    }
  REQUIRE(calls >= 8 * 13);
}

TEST_CASE(
    "Fused packed int1-8 dequant: every ISA equals dequant_f32_row over unpack_int_row, reading only the row's bytes",
    "[codecs][simd]") {
  // The reference is the generic path the [ct] fixtures validate against the library:
  // unpack_int_row's f32 values (int_code()) through dequant_f32_row. The kernel gets only the
  // row's ceil(cols * bits / 8) bytes, ending at a PROT_NONE page (a row window of the reader
  // starts at a byte inside a word and ends where its codes do); its outputs carry a sentinel tail.
  // Group sizes: 1 / 16 / 32 / 100 split 64-column steps (byte_chunk per group); 128 / 512 / cols
  // hold whole steps (tables; 7 and 8 bits: from 256 / 512 columns, or 64 with a memo).
  std::mt19937_64 rng(30);
  const DType types[] = {DType::BF16, DType::F16, DType::F32};
  std::vector<std::byte> memo(codecs::kDequantByteMemoBytes);
  int calls = 0;
  for (unsigned bits = 1; bits <= 8; ++bits)
    for (size_t cols : {size_t(1), size_t(9), size_t(63), size_t(64), size_t(65), size_t(127), size_t(128), size_t(129),
                        size_t(300), size_t(1000), size_t(4096 + 37)}) {
      const size_t nbytes = (cols * bits + 7) / 8;
      std::vector<uint8_t> words(detail::packed_words(cols, bits, true) * 4);
      for (auto& b : words) b = static_cast<uint8_t>(rng());
      std::vector<float> x(cols);
      codecs::unpack_int_row(words.data(), bits, true, cols, x.data());
      const Guarded gwords(words.data(), nbytes);
      for (uint64_t gs :
           {uint64_t(1), uint64_t(16), uint64_t(32), uint64_t(100), uint64_t(128), uint64_t(512), uint64_t(0)}) {
        const uint64_t g = gs ? gs : cols;
        if (g > cols && gs) continue;  // the same as gs = cols
        const size_t ngroups = (cols + g - 1) / g;
        std::vector<float> scale(ngroups), zp(ngroups);
        for (auto& s : scale) s = random_scale(rng);
        const int zrange = 1 << bits;  // zero points of the codes' range (and around it)
        for (auto& z : zp) z = static_cast<float>(static_cast<int>(rng() % (2 * zrange)) - zrange);
        const Guarded gscale(scale.data(), scale.size() * 4), gzp(zp.data(), zp.size() * 4);
        for (bool with_zp : {false, true})
          for (DType nat : types)
            for (DType out : types) {
              const codecs::DequantSpec spec{nat, out, g, true};
              const size_t osz = dtype_bits(out) / 8;
              std::vector<unsigned char> want(cols * osz + 64, 0xAB);
              codecs::dequant_f32_row(x.data(), cols, scale.data(), with_zp ? zp.data() : nullptr, nullptr, spec,
                                      Isa::scalar, want.data());
              for (Isa isa : codecs::kAllIsas) {
                if (!codecs::isa_supported(isa)) continue;
                for (int pass = 0; pass < 8; ++pass) {  // no memo, memo built, memo hit; streaming at stream_shifts()
                  codecs::DequantSpec sp = spec;
                  sp.stream = pass >= 3;
                  OutBuf ob(cols * osz + 64, pass >= 3 ? stream_shifts(osz)[pass - 3] : 0);
                  codecs::dequant_packed_kernel(isa)(gwords.get<uint8_t>(), bits, cols, gscale.get<float>(),
                                                     with_zp ? gzp.get<float>() : nullptr, sp,
                                                     pass == 0 || pass == 3 ? nullptr : memo.data(), ob.p);
                  ++calls;
                  INFO(codecs::isa_name(isa) << " bits " << bits << " cols " << cols << " gs " << g << " zp " << with_zp
                                             << " " << dtype_name(nat) << "->" << dtype_name(out) << " pass " << pass);
                  CHECK(ob.untouched_before());
                  const auto got = ob.row(cols * osz + 64);
                  size_t bad = SIZE_MAX;
                  for (size_t k = 0; k < got.size() && bad == SIZE_MAX; ++k)
                    if (got[k] != want[k]) bad = k / osz;
                  if (bad != SIZE_MAX) FAIL_CHECK("column " << bad << " differs");
                }
              }
            }
      }
    }
  REQUIRE(calls >= 8 * 11 * 5 * 2 * 9 * 5);
}

TEST_CASE("Fused packed 4- to 7-bit and int4 dequant: every scale binade, each SIMD kernel equals scalar",
          "[codecs][simd]") {
  // The AVX-512 kernel builds a group's table of 2^b entries from the products of the odd values
  // only (6 and 7 bits; bf16 outputs of bf16 or f32 products, no zero points) where the scale's
  // binade keeps every product normal and finite: every exponent field with bf16 ties and the
  // binade's ends, both signs, every code value (random codes over 1024 columns), at group size 128
  // and one group per row; and rows whose 128-column groups take every binade in turn, so in-range
  // and out-of-range tables alternate. The same for 4 and 5 bits and int4's u - 8 table (also with
  // -0.0 at code 8), whose tables are built per group from 16 or 32 products.
  std::mt19937_64 rng(33);
  int calls = 0;
  const size_t cols = 1024;
  {
    std::vector<uint8_t> packed(cols / 2);
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    const Guarded gpacked(packed.data(), packed.size());
    std::vector<float> offset(16), minus_zero(16);
    for (int i = 0; i < 16; ++i) offset[i] = minus_zero[i] = static_cast<float>(i - 8);
    minus_zero[8] = -0.f;
    for (float sc : every_binade(rng)) {
      const std::vector<float> scale(cols / 128, sc);
      const Guarded gscale(scale.data(), scale.size() * 4);
      for (const auto& lut : {offset, minus_zero})
        for (DType nat : {DType::BF16, DType::F32, DType::F16})
          for (uint64_t gs : {uint64_t(128), uint64_t(cols)}) {
            INFO("int4 scale bits 0x" << std::hex << codecs::f32_bits(sc) << std::dec << " " << dtype_name(nat)
                                      << " gs=" << gs << " -0.0: " << std::signbit(lut[8]));
            calls += nibble_equals_scalar(gpacked.get<uint8_t>(), cols, lut.data(), gscale.get<float>(),
                                          codecs::DequantSpec{nat, DType::BF16, gs});
          }
    }
  }
  for (unsigned bits : {4u, 5u, 6u, 7u}) {
    const size_t nbytes = cols * bits / 8;
    std::vector<uint8_t> words(nbytes);
    for (auto& b : words) b = static_cast<uint8_t>(rng());
    const Guarded gwords(words.data(), nbytes);
    auto check = [&](const std::vector<float>& scale, uint64_t gs, bool with_zp, const char* what, float z0 = 3.f) {
      const Guarded gscale(scale.data(), scale.size() * 4);
      const std::vector<float> zp(scale.size(), z0);
      for (DType nat : {DType::BF16, DType::F32, DType::F16})
        for (DType out : {DType::BF16, DType::F16}) {
          const codecs::DequantSpec spec{nat, out, gs, true};
          std::vector<unsigned char> want(cols * 2), got(cols * 2);
          const float* z = with_zp ? zp.data() : nullptr;
          codecs::dequant_packed_kernel(Isa::scalar)(gwords.get<uint8_t>(), bits, cols, gscale.get<float>(), z, spec,
                                                     nullptr, want.data());
          for (Isa isa : simd_isas()) {
            codecs::dequant_packed_kernel(isa)(gwords.get<uint8_t>(), bits, cols, gscale.get<float>(), z, spec, nullptr,
                                               got.data());
            ++calls;
            INFO(codecs::isa_name(isa) << " bits " << bits << " " << what << " " << dtype_name(nat) << "->"
                                       << dtype_name(out) << " gs=" << gs << " zp=" << with_zp << " " << z0);
            REQUIRE(want == got);
          }
        }
    };
    const std::vector<float> mixed = every_binade(rng);
    for (float sc : mixed) {
      INFO("scale bits 0x" << std::hex << codecs::f32_bits(sc));
      check(std::vector<float>(cols / 128, sc), 128, false, "one scale");
      check(std::vector<float>(1, sc), cols, false, "one group");
    }
    for (size_t at = 0; at + cols / 128 <= mixed.size(); at += cols / 128) {
      const std::vector<float> scale(mixed.begin() + static_cast<std::ptrdiff_t>(at),
                                     mixed.begin() + static_cast<std::ptrdiff_t>(at + cols / 128));
      check(scale, 128, false, "mixed");
      if (at % 64 == 0) check(scale, 128, true, "mixed, zero points");
      // Zero points whose sum with 2^(b-1) rounds in f32 (the AVX2 5-7-bit kernel folds that sum
      // into one constant only for integer ones): the kernels subtract them as the scalar one does.
      if (at == 0)
        for (float z : {0.1f, 1e-30f, -1e-30f}) check(scale, 128, true, "mixed, fractional zero points", z);
    }
  }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("SIMD fused nibble dequant equals the scalar reference", "[codecs][simd]") {
  std::mt19937_64 rng(7);
  std::vector<float> rand_lut(16);
  for (auto& f : rand_lut) f = std::normal_distribution<float>(0.f, 3.f)(rng);
  const std::vector<std::vector<float>> luts = {int4_lut(), fp4_lut(), rand_lut};
  const DType types[] = {DType::BF16, DType::F16, DType::F32};
  const size_t col_list[] = {1,  2,  3,  5,  15,  16,  17,  31,  32,  33,  47,
                             48, 63, 64, 65, 100, 127, 128, 129, 255, 301, 1001};
  const auto ref = codecs::dequant_nibble_kernel(Isa::scalar);
  int calls = 0;
  for (uint64_t gs : {uint64_t(1), uint64_t(3), uint64_t(16), uint64_t(24), uint64_t(32), uint64_t(48), uint64_t(100),
                      uint64_t(128), uint64_t(0) /* = cols */}) {
    for (size_t cols : col_list) {
      const uint64_t g = gs ? gs : cols;
      const size_t ngroups = (cols + g - 1) / g, nbytes = (cols + 1) / 2;
      std::vector<uint8_t> packed(nbytes);
      for (auto& b : packed) b = static_cast<uint8_t>(rng());
      std::vector<float> scale(ngroups), zp(ngroups);
      for (auto& s : scale) s = random_scale(rng);
      for (auto& z : zp)
        z = (rng() % 4) ? static_cast<float>(rng() % 16) : std::normal_distribution<float>(0.f, 4.f)(rng);
      const Guarded gpacked(packed.data(), packed.size()), gscale(scale.data(), scale.size() * 4),
          gzp(zp.data(), zp.size() * 4);
      for (const auto& lut : luts) {
        const Guarded glut(lut.data(), 64);
        for (bool with_zp : {false, true}) {
          const float* zptr = with_zp ? gzp.get<float>() : nullptr;
          for (DType nat : types) {
            for (DType out : types) {
              const codecs::DequantSpec spec{nat, out, g};
              const size_t osz = dtype_bits(out) / 8;
              std::vector<unsigned char> want(cols * osz + 64, 0xAB);
              ref(gpacked.get<uint8_t>(), cols, glut.get<float>(), gscale.get<float>(), zptr, spec, want.data());
              for (Isa isa : simd_isas())
                for (int mode = 0; mode < 6; ++mode) {  // plain stores; streaming at each of stream_shifts()
                  codecs::DequantSpec sp = spec;
                  sp.stream = mode > 0;
                  OutBuf ob(want.size(), mode > 0 ? stream_shifts(osz)[mode - 1] : 0);
                  codecs::dequant_nibble_kernel(isa)(gpacked.get<uint8_t>(), cols, glut.get<float>(),
                                                     gscale.get<float>(), zptr, sp, ob.p);
                  ++calls;
                  const auto got = ob.row(want.size());
                  CHECK(ob.untouched_before());
                  if (std::memcmp(want.data(), got.data(), want.size()) != 0) {
                    size_t bad = 0;
                    while (want[bad] == got[bad]) ++bad;
                    FAIL_CHECK(codecs::isa_name(isa)
                               << " mode " << mode << " " << dtype_name(nat) << "->" << dtype_name(out) << " gs=" << g
                               << " cols=" << cols << " zp=" << with_zp << " lut[1]=" << lut[1]
                               << " first differing column " << bad / osz);
                  }
                }
            }
          }
        }
      }
    }
  }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("SIMD fused nibble dequant on long rows hits every group position", "[codecs][simd]") {
  // A 4099-column row (not a multiple of any vector width) at the common group sizes.
  std::mt19937_64 rng(99);
  const auto lut = int4_lut();
  const size_t cols = 4099;
  std::vector<uint8_t> packed((cols + 1) / 2);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  const auto ref = codecs::dequant_nibble_kernel(Isa::scalar);
  for (uint64_t gs :
       {uint64_t(16), uint64_t(32), uint64_t(48), uint64_t(64), uint64_t(80), uint64_t(128), uint64_t(4099)}) {
    const size_t ngroups = (cols + gs - 1) / gs;
    std::vector<float> scale(ngroups), zp(ngroups);
    for (auto& s : scale) s = random_scale(rng);
    for (auto& z : zp) z = static_cast<float>(rng() % 16);
    const Guarded gpacked(packed.data(), packed.size()), gscale(scale.data(), scale.size() * 4),
        gzp(zp.data(), zp.size() * 4);
    for (bool with_zp : {false, true}) {
      for (DType out : {DType::BF16, DType::F32, DType::F16}) {
        const codecs::DequantSpec spec{out == DType::F16 ? DType::F16 : DType::BF16, out, gs};
        const size_t osz = dtype_bits(out) / 8;
        std::vector<unsigned char> want(cols * osz + 64, 0xAB);
        const float* zptr = with_zp ? gzp.get<float>() : nullptr;
        ref(gpacked.get<uint8_t>(), cols, lut.data(), gscale.get<float>(), zptr, spec, want.data());
        for (Isa isa : simd_isas()) {
          std::vector<unsigned char> got(cols * osz + 64, 0xAB);
          codecs::dequant_nibble_kernel(isa)(gpacked.get<uint8_t>(), cols, lut.data(), gscale.get<float>(), zptr, spec,
                                             got.data());
          INFO(codecs::isa_name(isa) << " out=" << dtype_name(out) << " gs=" << gs << " zp=" << with_zp);
          REQUIRE(std::memcmp(want.data(), got.data(), want.size()) == 0);
        }
      }
    }
  }
}

TEST_CASE("Fused 8-bit dequant (int8, fp8 E4M3): scalar equals the generic kernel, SIMD equals scalar",
          "[codecs][simd]") {
  // The scalar kernel is checked against dequant_f32_row over the codes' f32 values (the path
  // the fixtures validate against the library); each SIMD kernel against the scalar one, on rows
  // holding every code (NaN E4M3 codes included), awkward lengths and group sizes.
  std::mt19937_64 rng(8);
  const DType types[] = {DType::BF16, DType::F16, DType::F32};
  const auto ref = codecs::dequant_byte_kernel(Isa::scalar);
  // One table memo for the whole test, as a decode thread keeps one for every tensor: tables
  // left by earlier calls (other scales, code types, dtypes) must never be taken for a new key.
  std::vector<std::byte> memo(codecs::kDequantByteMemoBytes);
  int calls = 0;
  for (auto code : {codecs::ByteCode::i8, codecs::ByteCode::e4m3}) {
    // cols >= 512 with gs 0 (= cols) or 512 / 600 take the AVX-512 table path (groups of >= 512
    // columns), with full 64-column lookups and partial ones at group ends; groups of 64..511
    // take it only with a memo (built on the first call, found on the second).
    for (size_t cols : {size_t(1), size_t(7), size_t(8), size_t(15), size_t(16), size_t(17), size_t(100), size_t(256),
                        size_t(1001), size_t(4099)}) {
      for (uint64_t gs : {uint64_t(1), uint64_t(5), uint64_t(16), uint64_t(24), uint64_t(64), uint64_t(100),
                          uint64_t(128), uint64_t(512), uint64_t(600), uint64_t(0)}) {
        const uint64_t g = gs ? gs : cols;
        const size_t ngroups = (cols + g - 1) / g;
        std::vector<uint8_t> codes(cols);
        for (size_t j = 0; j < cols; ++j)
          codes[j] = static_cast<uint8_t>(cols >= 256 && j < 512 ? j * 97 + rng() % 2 : rng());
        std::vector<float> scale(ngroups), zp(ngroups), x(cols);
        for (auto& s : scale) s = random_scale(rng);
        for (auto& z : zp) z = static_cast<float>(static_cast<int>(rng() % 256) - 128);
        for (size_t j = 0; j < cols; ++j)
          x[j] = code == codecs::ByteCode::i8 ? static_cast<float>(static_cast<int8_t>(codes[j]))
                                              : codecs::e4m3_to_f32(codes[j]);
        const Guarded gcodes(codes.data(), codes.size()), gscale(scale.data(), scale.size() * 4),
            gzp(zp.data(), zp.size() * 4);
        for (bool with_zp : {false, true}) {
          if (with_zp && code == codecs::ByteCode::e4m3) continue;  // float zero points: generic kernel only
          const float* zptr = with_zp ? gzp.get<float>() : nullptr;
          for (DType nat : types) {
            for (DType out : types) {
              const codecs::DequantSpec spec{nat, out, g, code == codecs::ByteCode::i8};
              const size_t osz = dtype_bits(out) / 8;
              std::vector<unsigned char> want(cols * osz + 64, 0xAB), generic(cols * osz + 64, 0xAB);
              ref(gcodes.get<uint8_t>(), cols, code, gscale.get<float>(), zptr, spec, nullptr, want.data());
              codecs::dequant_f32_row(x.data(), cols, scale.data(), with_zp ? zp.data() : nullptr, nullptr, spec,
                                      codecs::Isa::scalar, generic.data());
              INFO((code == codecs::ByteCode::i8 ? "i8 " : "e4m3 ")
                   << dtype_name(nat) << "->" << dtype_name(out) << " gs=" << g << " cols=" << cols
                   << " zp=" << with_zp);
              // A NaN code times a NaN scale is NaN, but which operand's NaN comes out depends on
              // instruction operand order (in scalar code, the compiler's choice): there only
              // NaN-ness is required. Everything else, and the bytes past the row, exact.
              auto first_difference = [&](const std::vector<unsigned char>& got) -> size_t {
                auto is_nan = [&](const unsigned char* b) {
                  if (osz == 4)
                    return std::isnan(codecs::f32_from_bits(b[0] | b[1] << 8 | b[2] << 16 | uint32_t(b[3]) << 24));
                  const uint16_t h = static_cast<uint16_t>(b[0] | b[1] << 8);
                  return out == DType::BF16 ? (h & 0x7FFF) > 0x7F80 : (h & 0x7FFF) > 0x7C00;
                };
                for (size_t k = 0; k < want.size(); k += osz) {
                  if (std::memcmp(want.data() + k, got.data() + k, osz) == 0) continue;
                  const size_t j = k / osz;
                  if (j < cols && std::isnan(x[j]) && std::isnan(scale[j / g]) && is_nan(got.data() + k)) continue;
                  return j;
                }
                return SIZE_MAX;
              };
              REQUIRE(first_difference(generic) == SIZE_MAX);
              for (Isa isa : simd_isas())
                for (int pass = 0; pass < 8; ++pass) {  // no memo, memo built, memo hit; streaming at stream_shifts()
                  codecs::DequantSpec sp = spec;
                  sp.stream = pass >= 3;
                  OutBuf ob(cols * osz + 64, pass >= 3 ? stream_shifts(osz)[pass - 3] : 0);
                  codecs::dequant_byte_kernel(isa)(gcodes.get<uint8_t>(), cols, code, gscale.get<float>(), zptr, sp,
                                                   pass == 0 || pass == 3 ? nullptr : memo.data(), ob.p);
                  ++calls;
                  INFO(codecs::isa_name(isa) << " pass " << pass);
                  CHECK(ob.untouched_before());
                  const auto got = ob.row(cols * osz + 64);
                  const size_t bad = first_difference(got);
                  if (bad != SIZE_MAX)
                    FAIL_CHECK("column " << bad << " differs (code 0x" << std::hex << int(codes[bad < cols ? bad : 0])
                                         << std::dec << ")");
                }
            }
          }
        }
      }
    }
  }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("Fused E4M3 dequant: every scale binade, every code, each SIMD kernel equals scalar", "[codecs][simd]") {
  // Kernels that build per-scale tables (AVX2: bf16 bits of the product by a power of two plus an
  // exponent; AVX-512: 128-entry tables) take them only for the scales whose binade keeps that
  // exact, and the ordinary path for the rest: every binade, both signs, a few mantissas (bf16 ties
  // and the ends of the binade), over rows holding every code in every position of a 32-code step.
  std::mt19937_64 rng(30);
  const size_t cols = 1024;
  std::vector<uint8_t> codes(cols);
  for (size_t j = 0; j < cols; ++j) codes[j] = static_cast<uint8_t>(j < 512 ? j * 37 : rng());
  int calls = 0;
  for (float sc : every_binade(rng)) {
    const std::vector<float> scale(cols / 128, sc);
    for (DType nat : {DType::BF16, DType::F32, DType::F16})
      for (DType out : {DType::BF16, DType::F32, DType::F16}) {
        for (uint64_t gs : {uint64_t(128), uint64_t(cols)}) {
          const codecs::DequantSpec spec{nat, out, gs, false};
          const size_t osz = dtype_bits(out) / 8;
          std::vector<unsigned char> want(cols * osz), got(cols * osz);
          codecs::dequant_byte_kernel(Isa::scalar)(codes.data(), cols, codecs::ByteCode::e4m3, scale.data(), nullptr,
                                                   spec, nullptr, want.data());
          for (Isa isa : simd_isas()) {
            codecs::dequant_byte_kernel(isa)(codes.data(), cols, codecs::ByteCode::e4m3, scale.data(), nullptr, spec,
                                             nullptr, got.data());
            ++calls;
            INFO(codecs::isa_name(isa) << " scale bits 0x" << std::hex << codecs::f32_bits(sc) << std::dec << " "
                                       << dtype_name(nat) << "->" << dtype_name(out) << " gs=" << gs);
            REQUIRE(want == got);
          }
        }
      }
  }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE(
    "Fused E4M3 dequant to f16 of a bf16 product: steps in and out of the f16 tables' codes, each SIMD kernel "
    "equals scalar",
    "[codecs][simd]") {
  // The AVX2 kernel looks f16 words up by tables for the codes whose product is an f16 normal and
  // those whose exponent field is 0 or 1, and sends each 32-code step holding any other code (a
  // product under 2^-14 with e >= 2, a NaN code) to the ordinary path, choosing per block of 64
  // steps. Rows of two whole blocks, a partial one and a tail, whose steps draw their codes from a
  // window of 8 consecutive magnitudes at a random place (random signs): whatever a scale's
  // threshold, some steps lie wholly above it, some across it, some below; some steps hold a NaN
  // code. Every scale binade, both signs, channel and long groups.
  std::mt19937_64 rng(32);
  const size_t cols = 32 * 64 * 2 + 32 * 5 + 13;
  std::vector<uint8_t> codes(cols);
  for (size_t j = 0; j < cols; j += 32) {
    const size_t n = std::min<size_t>(32, cols - j), base = rng() % 121;  // magnitudes [base, base + 8)
    for (size_t k = 0; k < n; ++k) codes[j + k] = static_cast<uint8_t>((base + rng() % 8) | (rng() & 0x80));
    if (rng() % 8 == 0) codes[j + rng() % n] = static_cast<uint8_t>(0x7F | (rng() & 0x80));
  }
  const Guarded gcodes(codes.data(), cols);  // nothing past the codes is read
  const std::vector<float> binades = every_binade(rng);
  int calls = 0;
  for (float sc : binades)
    for (uint64_t gs : {uint64_t(1024), uint64_t(cols)}) {
      const std::vector<float> scale((cols + gs - 1) / gs, sc);
      const codecs::DequantSpec spec{DType::BF16, DType::F16, gs, false};
      std::vector<unsigned char> want(cols * 2 + 64, 0xAB);  // and 64 bytes past the row
      codecs::dequant_byte_kernel(Isa::scalar)(gcodes.get<uint8_t>(), cols, codecs::ByteCode::e4m3, scale.data(),
                                               nullptr, spec, nullptr, want.data());
      for (Isa isa : simd_isas())
        for (size_t shift : {size_t(0), size_t(2), size_t(16)})  // streamed stores at a line, and off one
          for (bool stream : {false, true}) {
            codecs::DequantSpec sp = spec;
            sp.stream = stream;
            OutBuf ob(cols * 2 + 64, shift);
            codecs::dequant_byte_kernel(isa)(gcodes.get<uint8_t>(), cols, codecs::ByteCode::e4m3, scale.data(), nullptr,
                                             sp, nullptr, ob.p);
            ++calls;
            INFO(codecs::isa_name(isa) << " scale bits 0x" << std::hex << codecs::f32_bits(sc) << std::dec
                                       << " gs=" << gs << " stream=" << stream << " shift=" << shift);
            CHECK(ob.untouched_before());
            REQUIRE(ob.row(cols * 2 + 64) == want);
          }
    }
  // Block weights' groups (128, 256 columns) through the table memo: built, then found by the next
  // row; then another scale's tables built by a bf16 call, and that scale's f16 outputs asked for
  // (the memo keys a table by everything it depends on: one of another output must not serve).
  for (size_t i = 0; i < binades.size(); ++i)
    for (uint64_t gs : {uint64_t(128), uint64_t(256)}) {
      const size_t n = cols / gs * gs;
      const std::vector<float> first(n / gs, binades[i]), second(n / gs, binades[(i + 7) % binades.size()]);
      for (Isa isa : simd_isas()) {
        std::vector<std::byte> memo(codecs::kDequantByteMemoBytes);
        const std::pair<DType, const std::vector<float>*> seq[] = {
            {DType::F16, &first}, {DType::F16, &first}, {DType::BF16, &second}, {DType::F16, &second}};
        for (const auto& [out, scale] : seq) {
          const codecs::DequantSpec spec{DType::BF16, out, gs, false};
          std::vector<unsigned char> want(n * 2), got(n * 2);
          codecs::dequant_byte_kernel(Isa::scalar)(codes.data(), n, codecs::ByteCode::e4m3, scale->data(), nullptr,
                                                   spec, nullptr, want.data());
          codecs::dequant_byte_kernel(isa)(codes.data(), n, codecs::ByteCode::e4m3, scale->data(), nullptr, spec,
                                           memo.data(), got.data());
          ++calls;
          INFO(codecs::isa_name(isa) << " memo, scale bits 0x" << std::hex << codecs::f32_bits((*scale)[0]) << std::dec
                                     << " gs=" << gs << " out " << dtype_name(out));
          REQUIRE(want == got);
        }
      }
    }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("Fused int8 dequant: every scale binade, zero points of every binade, each SIMD kernel equals scalar",
          "[codecs][simd]") {
  // The AVX2 kernel's bf16 path scales its factors by powers of two (scale * 2^-24 and 2^-8, zero
  // point * 2^24 and 2^8) where that is exact, and takes the ordinary path elsewhere: every scale
  // binade, both signs, a few mantissas, without a zero point and with one from a binade of its
  // own (the list walked in turn, so every binade of both meets both paths), over rows holding
  // every code; int8 codes and offset-binary ones (pack-quantized 8-bit, the top bit flipped).
  std::mt19937_64 rng(31);
  const size_t cols = 1024;
  std::vector<uint8_t> codes(cols);
  for (size_t j = 0; j < cols; ++j) codes[j] = static_cast<uint8_t>(j < 512 ? j * 37 : rng());
  const std::vector<float> scales = every_binade(rng), zps = every_binade(rng);
  int calls = 0;
  for (size_t i = 0; i < scales.size(); ++i) {
    const std::vector<float> scale(cols / 128, scales[i]), zp(cols / 128, zps[(i * 7) % zps.size()]);
    for (bool with_zp : {false, true})
      for (DType nat : {DType::BF16, DType::F32, DType::F16})
        for (DType out : {DType::BF16, DType::F32, DType::F16})
          for (uint64_t gs : {uint64_t(128), uint64_t(cols)}) {
            const codecs::DequantSpec spec{nat, out, gs, true};
            const size_t osz = dtype_bits(out) / 8;
            const float* z = with_zp ? zp.data() : nullptr;
            std::vector<unsigned char> want(cols * osz), got(cols * osz);
            codecs::dequant_byte_kernel(Isa::scalar)(codes.data(), cols, codecs::ByteCode::i8, scale.data(), z, spec,
                                                     nullptr, want.data());
            std::vector<unsigned char> want_packed(cols * osz);
            codecs::dequant_packed_kernel(Isa::scalar)(codes.data(), 8, cols, scale.data(), z, spec, nullptr,
                                                       want_packed.data());
            for (Isa isa : simd_isas()) {
              INFO(codecs::isa_name(isa) << " scale bits 0x" << std::hex << codecs::f32_bits(scales[i]) << " zp bits 0x"
                                         << (with_zp ? codecs::f32_bits(zp[0]) : 0u) << std::dec << " "
                                         << dtype_name(nat) << "->" << dtype_name(out) << " gs=" << gs);
              codecs::dequant_byte_kernel(isa)(codes.data(), cols, codecs::ByteCode::i8, scale.data(), z, spec, nullptr,
                                               got.data());
              REQUIRE(want == got);
              codecs::dequant_packed_kernel(isa)(codes.data(), 8, cols, scale.data(), z, spec, nullptr, got.data());
              REQUIRE(want_packed == got);
              calls += 2;
            }
          }
  }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("Fused E4M3 dequant with power-of-two scales (mxfp8's E8M0): each SIMD kernel equals scalar",
          "[codecs][simd]") {
  // The AVX-512 kernel decodes rows whose group scales are all positive powers of two in range
  // through one scale-1 table plus each group's exponent: every exponent field 0..255 in the
  // groups of one row, one row per exponent with all its groups there, rows with one group off a
  // power of two or negative, at group sizes from 32 (mxfp8) to 480, on guarded rows whose lengths
  // end mid-step (nothing past the codes or the scales is read).
  std::mt19937_64 rng(32);
  std::vector<uint8_t> codes(1000);
  for (size_t j = 0; j < codes.size(); ++j) codes[j] = static_cast<uint8_t>(j < 512 ? j * 37 : rng());
  int calls = 0;
  for (size_t cols : {size_t(1000), size_t(992), size_t(970), size_t(64), size_t(20)})
    for (uint64_t gs : {uint64_t(32), uint64_t(64), uint64_t(96), uint64_t(480)}) {
      const size_t groups = (cols + gs - 1) / gs;
      std::vector<std::vector<float>> rows;
      for (uint32_t e = 0; e < 256; e += 1) rows.push_back(std::vector<float>(groups, codecs::f32_from_bits(e << 23)));
      for (int r = 0; r < 8; ++r) {  // mixed exponents; then one group broken each way
        std::vector<float> v(groups);
        for (auto& x : v) x = std::ldexp(1.f, -20 + static_cast<int>(rng() % 30));
        rows.push_back(v);
        const size_t at = rng() % groups;
        v[at] = r % 2 ? -v[at] : v[at] * 1.5f;
        rows.push_back(v);
      }
      for (const auto& scale : rows) {
        const Guarded gcodes(codes.data(), cols), gscale(scale.data(), scale.size() * 4);
        for (DType nat : {DType::BF16, DType::F32, DType::F16})
          for (DType out : {DType::BF16, DType::F32, DType::F16}) {
            const codecs::DequantSpec spec{nat, out, gs, false};
            const size_t osz = dtype_bits(out) / 8;
            std::vector<unsigned char> want(cols * osz + 64, 0xAB);  // and 64 bytes past the row
            codecs::dequant_byte_kernel(Isa::scalar)(gcodes.get<uint8_t>(), cols, codecs::ByteCode::e4m3,
                                                     gscale.get<float>(), nullptr, spec, nullptr, want.data());
            for (Isa isa : simd_isas())
              for (bool stream : {false, true}) {
                codecs::DequantSpec sp = spec;
                sp.stream = stream;
                OutBuf ob(cols * osz + 64, stream ? 16 : 0);
                codecs::dequant_byte_kernel(isa)(gcodes.get<uint8_t>(), cols, codecs::ByteCode::e4m3,
                                                 gscale.get<float>(), nullptr, sp, nullptr, ob.p);
                ++calls;
                INFO(codecs::isa_name(isa) << " cols=" << cols << " gs=" << gs << " scale[0] bits 0x" << std::hex
                                           << codecs::f32_bits(scale[0]) << std::dec << " " << dtype_name(nat) << "->"
                                           << dtype_name(out) << " stream=" << stream);
                CHECK(ob.untouched_before());
                REQUIRE(ob.row(cols * osz + 64) == want);
              }
          }
      }
    }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("Fused fp4 (E2M1) dequant: every scale binade, and groups out of range among others", "[codecs][simd]") {
  // As above for the nibble kernel with the E2M1 table (nvfp4: 16-column groups, mxfp4: 32): the
  // x86 kernels build a group's table from bf16(scale) and bf16(1.5 scale) where the scale's binade
  // keeps that exact, in runs of 8 groups (AVX2) or up to 16 (AVX-512); f16 outputs of a bf16
  // product round those words (AVX2). Every binade with one scale for the row, then
  // rows whose groups mix in-range scales with an out-of-range one at every position of a run, on a row whose last run
  // is short (codes and scales end at a guard page: nothing past them is read).
  std::mt19937_64 rng(31);
  std::vector<uint8_t> packed(512);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i < 256 ? i : rng());
  int calls = 0;
  auto check = [&](size_t cols, const std::vector<float>& scale, uint64_t gs, const char* what) {
    const Guarded gpacked(packed.data(), (cols + 1) / 2), gscale(scale.data(), scale.size() * 4);
    // E2M1's table with +0.0 at code 8 too: a table that is not exactly E2M1's never takes that path
    std::vector<float> plus_zero = fp4_lut();
    plus_zero[8] = 0.f;
    for (const auto& lut : {fp4_lut(), plus_zero})
      for (DType nat : {DType::BF16, DType::F32, DType::F16})
        for (DType out : {DType::BF16, DType::F32, DType::F16}) {
          INFO(what << " " << dtype_name(nat) << "->" << dtype_name(out) << " gs=" << gs << " cols=" << cols);
          calls += nibble_equals_scalar(gpacked.get<uint8_t>(), cols, lut.data(), gscale.get<float>(),
                                        codecs::DequantSpec{nat, out, gs});
        }
  };
  for (uint64_t gs : {uint64_t(16), uint64_t(32)}) {
    const size_t cols = 1024;
    for (float sc : every_binade(rng)) {
      INFO("scale bits 0x" << std::hex << codecs::f32_bits(sc));
      check(cols, std::vector<float>(cols / gs, sc), gs, "one scale");
    }
    // 62.5 / 31.25 groups, 63.5 / 31.75: the last run of 8 (AVX-512: 16) is short, and of 16-column
    // groups (taken in pairs) an odd number is whole
    for (const size_t odd_cols : {size_t(1000), size_t(1016)}) {
      const size_t groups = (odd_cols + gs - 1) / gs;
      for (size_t bad = 0; bad <= groups; ++bad) {  // bad == groups: none
        std::vector<float> scale(groups);
        for (auto& s : scale)
          s = std::ldexp(1.f + static_cast<float>(rng() % 256) / 256.f, -12 + static_cast<int>(rng() % 8));
        const float outside[] = {0.f, INFINITY, std::ldexp(1.f, -140), std::ldexp(1.5f, 125)};
        if (bad < groups) scale[bad] = outside[bad % 4];
        INFO("out of range at group " << bad);
        check(odd_cols, scale, gs, "mixed");
      }
    }
  }
  REQUIRE((calls > 0 || simd_isas().empty()));
}

TEST_CASE("Fused 8-bit dequant: the table memo never serves a table of another key", "[codecs][simd]") {
  // Block weights: consecutive rows share scales, so tables are reused; every key field (scale,
  // zero point, code type, natural and output dtype) changing between calls on one memo must
  // give a fresh table. Each call is compared with the scalar kernel.
  std::mt19937_64 rng(21);
  const size_t cols = 1000, gs = 100, groups = 10;
  std::vector<uint8_t> codes(cols);
  for (auto& c : codes) c = static_cast<uint8_t>(rng() & 0xF7);  // no NaN codes
  auto scales = [&] {
    std::vector<float> v(groups);
    for (auto& s : v) s = std::ldexp(1.f + static_cast<float>(rng() % 128) / 128.f, -8 - static_cast<int>(rng() % 4));
    return v;
  };
  const std::vector<float> a = scales(), b = scales();
  std::vector<float> a1 = a;
  a1[3] = std::nextafter(a1[3], 1.f);  // one group, one ulp
  std::vector<float> zp0(groups, 3.f), zp1(groups, 3.f);
  zp1[7] = 4.f;
  struct Call {
    codecs::ByteCode code;
    DType nat, out;
    const std::vector<float>* scale;
    const std::vector<float>* zp;
  };
  const auto I8 = codecs::ByteCode::i8, E4 = codecs::ByteCode::e4m3;
  const Call calls[] = {{E4, DType::BF16, DType::BF16, &a, nullptr}, {E4, DType::BF16, DType::BF16, &a, nullptr},
                        {E4, DType::BF16, DType::BF16, &b, nullptr}, {E4, DType::BF16, DType::BF16, &a1, nullptr},
                        {E4, DType::BF16, DType::F16, &a1, nullptr}, {E4, DType::F16, DType::F16, &a1, nullptr},
                        {I8, DType::F16, DType::F16, &a1, nullptr},  {I8, DType::F16, DType::F16, &a1, &zp0},
                        {I8, DType::F16, DType::F16, &a1, &zp1},     {I8, DType::BF16, DType::BF16, &a1, &zp1},
                        {E4, DType::BF16, DType::BF16, &a, nullptr}};
  for (Isa isa : simd_isas()) {
    std::vector<std::byte> memo(codecs::kDequantByteMemoBytes);
    int k = 0;
    for (const Call& c : calls) {
      const codecs::DequantSpec spec{c.nat, c.out, gs, c.code == I8};
      const float* zp = c.zp ? c.zp->data() : nullptr;
      std::vector<unsigned char> want(cols * 2), got(cols * 2);
      codecs::dequant_byte_kernel(Isa::scalar)(codes.data(), cols, c.code, c.scale->data(), zp, spec, nullptr,
                                               want.data());
      codecs::dequant_byte_kernel(isa)(codes.data(), cols, c.code, c.scale->data(), zp, spec, memo.data(), got.data());
      INFO(codecs::isa_name(isa) << " call " << k++);
      REQUIRE(want == got);
    }
  }
}
