// AVX-512 (F/BW/VL) conversion kernels, masked tails instead of scalar loops. Bit-exact with
// codecs/half.hpp; tests/unit/test_convert.cpp checks on awkward sizes.
#include <immintrin.h>

#include "codecs/x86/kernels.hpp"

namespace ctstream::codecs::avx512 {
namespace {

inline __m512i round_f32_to_bf16_lanes(__m512i x) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  const __m512i q = _mm512_or_si512(x, _mm512_set1_epi32(0x00400000));
  return _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, r, q), 16);
}
// 32 rounded lanes (two registers of u32 < 65536) -> 32 u16 in order. vpackusdw + vpermq
// instead of vpmovdw, which is slow (2 uops, 1 per 2 cycles) on Zen 4.
inline __m512i pack32(__m512i a, __m512i b) {
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi32(a, b));
}
inline __mmask16 tail_mask(size_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

}  // namespace

void f32_to_bf16(const void* in, void* out, size_t n) noexcept {
  const float* s = static_cast<const float*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // full-width loads and stores; masks only in the tail below
    const __m512i a = round_f32_to_bf16_lanes(_mm512_loadu_si512(s + i));
    const __m512i b = round_f32_to_bf16_lanes(_mm512_loadu_si512(s + i + 16));
    _mm512_storeu_si512(d + i, pack32(a, b));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i x = _mm512_maskz_loadu_epi32(m, s + i);
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(round_f32_to_bf16_lanes(x)));
  }
}

void f32_to_f16(const void* in, void* out, size_t n) noexcept {
  const float* s = static_cast<const float*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 x = _mm512_maskz_loadu_ps(m, s + i);
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtps_ph(x, kRne));
  }
}

void bf16_to_f32(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint32_t* d = static_cast<uint32_t*>(out);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i));
    _mm512_mask_storeu_epi32(d + i, m, _mm512_slli_epi32(w, 16));
  }
}

void f16_to_f32(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  float* d = static_cast<float*>(out);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i)));
  }
}

void bf16_to_f16(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i)), 16);
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtps_ph(_mm512_castsi512_ps(w), kRne));
  }
}

void f16_to_bf16(const void* in, void* out, size_t n) noexcept {
  const uint16_t* s = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = round_f32_to_bf16_lanes(
        _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)))));
    const __m512i b = round_f32_to_bf16_lanes(
        _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16)))));
    _mm512_storeu_si512(d + i, pack32(a, b));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i x = _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i)));
    _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(round_f32_to_bf16_lanes(x)));
  }
}

}  // namespace ctstream::codecs::avx512
