// codecs — runtime instruction-set dispatch. Chosen once (CPUID), overridable with the
// environment variable CTSTREAM_FORCE_ISA=scalar|avx2|avx512 (never above what the CPU has).
#pragma once

namespace ctstream::codecs {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2 };

const char* isa_name(Isa isa) noexcept;
/// True when this CPU (and OS) can run kernels of `isa`.
bool isa_supported(Isa isa) noexcept;
/// The ISA all dispatching entry points use: best supported, unless overridden.
Isa active_isa() noexcept;
/// Overrides the active ISA for this process (tests, benchmarks); clamps to what is supported.
void set_active_isa(Isa isa) noexcept;

}  // namespace ctstream::codecs
