#include "codecs/dispatch.hpp"
#include "ctstream/version.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace ctstream::codecs {
namespace {

#if defined(__x86_64__)
// F16C is CPUID.1:ECX[29] (not every compiler's __builtin_cpu_supports knows the name).
bool has_f16c() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
bool has_avx2() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && has_f16c() && __builtin_cpu_supports("bmi2") &&
         __builtin_cpu_supports("fma");
}
// AVX-512 kernels use F, BW, VL, DQ (compiled with it), VBMI (byte permutes of the 8-bit dequant
// tables) and VBMI2 (expand/compress on bytes and words): Ice Lake, Zen 4 and later.
bool has_avx512() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") && has_f16c();
}
#endif

Isa best_supported() noexcept {
  for (Isa i : {Isa::avx512, Isa::avx2, Isa::neon})
    if (isa_supported(i)) return i;
  return Isa::scalar;
}

// CTSTREAM_FORCE_ISA names the kernels to run. A value that names none this CPU and build run is
// said once on stderr (a benchmark would otherwise report the best ISA's figures under the asked
// name), and the best supported ISA runs.
Isa initial() noexcept {
  const char* env = std::getenv("CTSTREAM_FORCE_ISA");
  if (!env) return best_supported();
  for (Isa i : kAllIsas)
    if (std::strcmp(env, isa_name(i)) == 0 && isa_supported(i)) return i;
  const Isa best = best_supported();
  char runs[64] = "";
  for (Isa i : kAllIsas)
    if (isa_supported(i)) {
      if (runs[0]) std::strncat(runs, ", ", sizeof runs - std::strlen(runs) - 1);
      std::strncat(runs, isa_name(i), sizeof runs - std::strlen(runs) - 1);
    }
  std::fprintf(stderr, "ctstream: CTSTREAM_FORCE_ISA=%s is not an ISA this CPU and build run (%s); using %s\n", env,
               runs, isa_name(best));
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
    case Isa::neon: return "neon";
  }
  return "unknown";
}

bool isa_supported(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return true;
#if defined(__x86_64__)
    case Isa::avx2: {
      static const bool ok = has_avx2();
      return ok;
    }
    case Isa::avx512: {
      static const bool ok = has_avx512();
      return ok;
    }
#endif
#if defined(__aarch64__)
    case Isa::neon: return true;  // Advanced SIMD is part of the AArch64 base architecture
#endif
    default: return false;
  }
}

Isa active_isa() noexcept { return static_cast<Isa>(current().load(std::memory_order_relaxed)); }

void set_active_isa(Isa isa) noexcept {
  if (!isa_supported(isa)) isa = best_supported();
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace ctstream::codecs

namespace ctstream {
const char* active_isa() noexcept { return codecs::isa_name(codecs::active_isa()); }
bool set_active_isa(std::string_view name) noexcept {
  for (codecs::Isa i : codecs::kAllIsas)
    if (name == codecs::isa_name(i) && codecs::isa_supported(i)) {
      codecs::set_active_isa(i);
      return true;
    }
  return false;
}
}  // namespace ctstream
