// codecs — runtime instruction-set selection. The best ISA this CPU runs is detected once
// (CPUID on x86-64; NEON is baseline on AArch64), overridable with the environment variable
// CTSTREAM_FORCE_ISA=scalar|avx2|avx512|neon (an ISA the CPU or build lacks, or an unknown name,
// is reported once on stderr and the best one runs).
// Its kernels are one table (codecs/kernels.hpp).
#pragma once

namespace ctstream::codecs {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, neon = 3 };
inline constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon};

const char* isa_name(Isa isa) noexcept;
/// True when this build has kernels for `isa` and this CPU (and OS) can run them.
bool isa_supported(Isa isa) noexcept;
/// The ISA whose kernel table every dispatching entry point uses: the best supported, unless
/// overridden.
Isa active_isa() noexcept;
/// Overrides the active ISA for this process (tests, benchmarks); an unsupported one gives the best.
void set_active_isa(Isa isa) noexcept;

}  // namespace ctstream::codecs
