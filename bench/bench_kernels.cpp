// Kernel benchmarks: each codec's output bandwidth next to memcpy / memset of the same output
// bytes, in the same binary and run, on 1 and 2 threads, for every ISA this CPU supports.
// Run: build/bin/ctstream_bench_kernels [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "codecs/convert.hpp"
#include "codecs/half.hpp"

using namespace ctstream;
using codecs::Isa;

namespace {

constexpr size_t kRows = 4096, kCols = 4096, kN = kRows * kCols;

// Splits [0, n) into `threads` contiguous parts and runs fn(begin, count) on each.
template <class F>
void split(int threads, size_t n, F&& fn) {
#pragma omp parallel num_threads(threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num()), nt = static_cast<size_t>(omp_get_num_threads());
    const size_t b = n * t / nt, e = n * (t + 1) / nt;
    fn(b, e - b);
  }
}

std::vector<std::byte> random_floats(DType d, size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.f, 0.02f);
  std::vector<std::byte> v(n * dtype_bits(d) / 8);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t f = codecs::f32_bits(dist(rng));
    if (d == DType::F32) std::memcpy(&v[4 * i], &f, 4);
    else {
      uint16_t h = d == DType::BF16 ? codecs::f32_to_bf16(f) : codecs::f32_to_f16(f);
      std::memcpy(&v[2 * i], &h, 2);
    }
  }
  return v;
}

void BM_memcpy(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  const int threads = static_cast<int>(st.range(1));
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  for (auto _ : st) {
    split(threads, bytes, [&](size_t b, size_t n) { std::memcpy(dst.data() + b, src.data() + b, n); });
    benchmark::DoNotOptimize(dst.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
}

void BM_memset(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  const int threads = static_cast<int>(st.range(1));
  std::vector<std::byte> dst(bytes);
  for (auto _ : st) {
    split(threads, bytes, [&](size_t b, size_t n) { std::memset(dst.data() + b, 1, n); });
    benchmark::DoNotOptimize(dst.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
}

void BM_convert(benchmark::State& st, DType src, DType dst, Isa isa) {
  const int threads = static_cast<int>(st.range(0));
  if (!codecs::isa_supported(isa)) {
    st.SkipWithError("ISA not supported");
    return;
  }
  const auto in = random_floats(src, kN);
  std::vector<std::byte> out(kN * dtype_bits(dst) / 8);
  const auto fn = codecs::convert_kernel(src, dst, isa);
  const size_t isz = dtype_bits(src) / 8, osz = dtype_bits(dst) / 8;
  for (auto _ : st) {
    split(threads, kN, [&](size_t b, size_t n) { fn(in.data() + b * isz, out.data() + b * osz, n); });
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * out.size()));  // output bytes
  st.SetLabel(codecs::isa_name(isa));
}

}  // namespace

// Reference rooflines for each output size the codecs write (fp32 and 16-bit outputs).
BENCHMARK(BM_memcpy)->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4)}, {1, 2}})->UseRealTime();
BENCHMARK(BM_memset)->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4)}, {1, 2}})->UseRealTime();

#define CONVERT_BENCH(NAME, S, D)                                                                         \
  BENCHMARK_CAPTURE(BM_convert, NAME##_scalar, DType::S, DType::D, Isa::scalar)->Arg(1)->Arg(2)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_convert, NAME##_avx2, DType::S, DType::D, Isa::avx2)->Arg(1)->Arg(2)->UseRealTime();     \
  BENCHMARK_CAPTURE(BM_convert, NAME##_avx512, DType::S, DType::D, Isa::avx512)->Arg(1)->Arg(2)->UseRealTime();
CONVERT_BENCH(bf16_to_f32, BF16, F32)
CONVERT_BENCH(f32_to_bf16, F32, BF16)
CONVERT_BENCH(f16_to_f32, F16, F32)
CONVERT_BENCH(f32_to_f16, F32, F16)
CONVERT_BENCH(f16_to_bf16, F16, BF16)

BENCHMARK_MAIN();
