// AVX-512 (F/BW/VL) conversion kernels: full-width loads and stores in the main loops, masked
// loads/stores only for the tail (masked accesses in the main loop measured markedly slower from
// DRAM on this Zen CPU). Bit-exact with codecs/half.hpp; tests/unit/test_convert.cpp checks on
// awkward sizes.
#include <immintrin.h>

#include "codecs/isa_kernels.hpp"
#include "codecs/x86/stores.hpp"

namespace ctstream::codecs::avx512 {
namespace {

// Each lane's RNE bf16 in its high 16 bits (low 16 bits: junk); NaN -> quietened. Written with
// vptestmd / masked add / vcmpps(unord) / masked or: the former srl/and/add/and/vpcmpud/or/blend
// version (GCC folded the same load into four of them) ran at half this speed on Zen 4, in cache.
inline __m512i round_f32_to_bf16_hi(__m512i x) {
  const __mmask16 odd = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x10000));
  __m512i r = _mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF));
  r = _mm512_mask_add_epi32(r, odd, r, _mm512_set1_epi32(1));
  const __mmask16 nan = _mm512_cmp_ps_mask(_mm512_castsi512_ps(x), _mm512_castsi512_ps(x), _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
}
inline __m512i round_f32_to_bf16_lanes(__m512i x) { return _mm512_srli_epi32(round_f32_to_bf16_hi(x), 16); }
// The high halves of 32 lanes (a then b) as 32 u16 in order: one vpermt2w, then one full-width
// store (instead of vpmovdw + a masked 32-byte store per 16 lanes).
inline __m512i pack_hi32(__m512i a, __m512i b) {
  const __m512i odd_words =
      _mm512_setr_epi32(0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015, 0x001B0019, 0x001F001D,
                        0x00230021, 0x00270025, 0x002B0029, 0x002F002D, 0x00330031, 0x00370035, 0x003B0039, 0x003F003D);
  return _mm512_permutex2var_epi16(a, odd_words, b);
}
inline __mmask16 tail_mask(size_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

}  // namespace

template <bool NT>
void f32_to_bf16_run(const void* in, void* out, size_t n) noexcept {
  const float* s = static_cast<const float*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // full-width loads and stores; masks only in the tail below
    const __m512i a = round_f32_to_bf16_hi(_mm512_loadu_si512(s + i));
    const __m512i b = round_f32_to_bf16_hi(_mm512_loadu_si512(s + i + 16));
    x86::put512<NT>(d + i, pack_hi32(a, b));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i x = _mm512_maskz_loadu_epi32(m, s + i);
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(round_f32_to_bf16_lanes(x)));
  }
}

template <bool NT>
void f32_to_f16_run(const void* in, void* out, size_t n) noexcept {
  const float* s = static_cast<const float*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)  // a whole line a store (two 32-byte halves streamed measured 8 % slower)
    x86::put512<NT>(d + i, _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(_mm512_loadu_ps(s + i), kRne)),
                                              _mm512_cvtps_ph(_mm512_loadu_ps(s + i + 16), kRne), 1));
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 x = _mm512_maskz_loadu_ps(m, s + i);
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtps_ph(x, kRne));
  }
}

template <bool NT>
void bf16_to_f32_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint32_t* d = static_cast<uint32_t*>(out);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    x86::put512<NT>(d + i, _mm512_slli_epi32(w, 16));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i));
    _mm512_mask_storeu_epi32(d + i, m, _mm512_slli_epi32(w, 16));
  }
}

template <bool NT>
void f16_to_f32_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  float* d = static_cast<float*>(out);
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    x86::put512<NT>(d + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i)));
  }
}

template <bool NT>
void bf16_to_f16_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  const auto f16_of = [s](size_t k) {  // elements k .. k + 15
    const __m512i w =
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k))), 16);
    return _mm512_cvtps_ph(_mm512_castsi512_ps(w), kRne);
  };
  for (; i + 32 <= n; i += 32)  // a whole line a store, as f32_to_f16
    x86::put512<NT>(d + i, _mm512_inserti64x4(_mm512_castsi256_si512(f16_of(i)), f16_of(i + 16), 1));
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i)), 16);
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtps_ph(_mm512_castsi512_ps(w), kRne));
  }
}

template <bool NT>
void f16_to_bf16_run(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = round_f32_to_bf16_hi(
        _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)))));
    const __m512i b = round_f32_to_bf16_hi(
        _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16)))));
    x86::put512<NT>(d + i, pack_hi32(a, b));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i x = _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i)));
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(round_f32_to_bf16_lanes(x)));
  }
}

// stream: non-temporal stores where aligned (codecs/x86/stores.hpp), the masked tail plain.
void f32_to_bf16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f32_to_bf16_run<true>(in, out, n) : f32_to_bf16_run<false>(in, out, n);
}
void f32_to_f16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f32_to_f16_run<true>(in, out, n) : f32_to_f16_run<false>(in, out, n);
}
void bf16_to_f32(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? bf16_to_f32_run<true>(in, out, n) : bf16_to_f32_run<false>(in, out, n);
}
void f16_to_f32(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f16_to_f32_run<true>(in, out, n) : f16_to_f32_run<false>(in, out, n);
}
void bf16_to_f16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? bf16_to_f16_run<true>(in, out, n) : bf16_to_f16_run<false>(in, out, n);
}
void f16_to_bf16(const void* in, void* out, size_t n, bool stream) noexcept {
  stream ? f16_to_bf16_run<true>(in, out, n) : f16_to_bf16_run<false>(in, out, n);
}

}  // namespace ctstream::codecs::avx512
