#include "codecs/dispatch.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ctstream/version.hpp"

namespace ctstream::codecs {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C is CPUID.1:ECX[29] (not every compiler's __builtin_cpu_supports knows the name).
bool has_f16c() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

Isa best_supported() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // AVX-512 kernels use F, BW, VL, DQ (compiled with it), VBMI (byte permutes of the 8-bit
  // dequant tables) and VBMI2 (expand/compress on bytes and words): Ice Lake, Zen 4 and later.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") && has_f16c())
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && has_f16c() && __builtin_cpu_supports("bmi2") &&
      __builtin_cpu_supports("fma"))
    return Isa::avx2;
#endif
  return Isa::scalar;
}

Isa initial() noexcept {
  Isa best = best_supported();
  if (const char* env = std::getenv("CTSTREAM_FORCE_ISA")) {
    Isa want = best;
    if (std::strcmp(env, "scalar") == 0) want = Isa::scalar;
    else if (std::strcmp(env, "avx2") == 0) want = Isa::avx2;
    else if (std::strcmp(env, "avx512") == 0) want = Isa::avx512;
    return static_cast<int>(want) <= static_cast<int>(best) ? want : best;
  }
  return best;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{static_cast<int>(initial())};
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

bool isa_supported(Isa isa) noexcept { return static_cast<int>(isa) <= static_cast<int>(best_supported()); }

Isa active_isa() noexcept { return static_cast<Isa>(current().load(std::memory_order_relaxed)); }

void set_active_isa(Isa isa) noexcept {
  if (!isa_supported(isa)) isa = best_supported();
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace ctstream::codecs

namespace ctstream {
const char* active_isa() noexcept { return codecs::isa_name(codecs::active_isa()); }
}  // namespace ctstream
