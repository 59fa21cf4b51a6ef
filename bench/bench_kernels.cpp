// Kernel benchmarks: each codec's output bandwidth next to memcpy / memset of the same output
// bytes, in the same binary and run, on 1 and 2 threads, for every ISA this CPU supports.
// Run: build/bin/ctstream_bench_kernels [--benchmark_filter=...]
// After the usual table it prints each kernel's memory roofline ratio: the bytes it reads
// (compressed input as stored: codes, scales in their 16-bit storage dtype, zero points, masks)
// plus the bytes it writes, per second, over memset's bytes per second on the same output size
// and thread count in the same run (RooflineReporter). 1.0 = the kernel moves its bytes as fast
// as this machine writes memory; include BM_memset in the filter to get the ratios. Where the
// machine's bandwidth drifts during a run (a VM's 2-thread rows can move 2x in minutes), add
// --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
// --benchmark_report_aggregates_only=true: every repetition of every row, memset's included, runs
// in one shuffled order, and the ratios are of medians.
#include <benchmark/benchmark.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codecs/bitmask.hpp"
#include "codecs/convert.hpp"
#include "codecs/dequant.hpp"
#include "codecs/dispatch.hpp"
#include "codecs/encode.hpp"
#include "codecs/half.hpp"
#include "codecs/minifloat.hpp"
#include "core/packing.hpp"

using namespace ctstream;
using codecs::Isa;

namespace {

constexpr size_t kRows = 4096, kCols = 4096, kN = kRows * kCols;
constexpr size_t kColsWide = 14336;    // MLP weight width (e.g. 4096 x 14336)
constexpr size_t kColsWideF32 = 7168;  // the same output bytes in f32 (112 MiB)

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

// What one iteration moves: read from the compressed input, written to the output. The
// RooflineReporter reads these counters.
void traffic(benchmark::State& st, double read, double written, int threads) {
  st.counters["read_B"] = read;
  st.counters["written_B"] = written;
  st.counters["threads"] = threads;
}

// A 64-byte aligned output of n bytes, as a torch tensor's storage (a std::vector this large sits
// 16 bytes past a page boundary), or `shift` bytes past the line, to measure an output that is
// not (Stores::at16: the kernels then stream in 16- or 32-byte pieces).
struct Output {
  explicit Output(size_t n, size_t shift = 0)
      : buf(n + 64 + shift),
        bytes(reinterpret_cast<std::byte*>(((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63)) + shift),
              n) {}
  std::byte* data() const { return bytes.data(); }
  size_t size() const { return bytes.size(); }
  std::vector<std::byte> buf;
  std::span<std::byte> bytes;
};

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

// How a kernel row writes its output. reader: as the reader (non-temporal stores from
// codecs::kStreamStoresFrom output bytes); at16: the same into an output 16 bytes past a line, as
// glibc's malloc and std::vector place large buffers (a C caller's); plain: never non-temporal;
// staged: the kernel decodes kStageCols columns at a time into an L1-resident scratch (plain
// stores), which `rep movsb` then copies out -- the store path that could reach memset's bandwidth
// where 16-64 byte vector stores measure well below it (the Xeon of bench/RESULTS.md), at the cost
// of reading each line once more.
enum class Stores { reader, at16, plain, staged };
constexpr size_t kStageCols = 2048;  // a multiple of every group size below: 8 KiB of f32 at most

bool streams(Stores how, size_t out_bytes) {
  return (how == Stores::reader || how == Stores::at16) && out_bytes >= codecs::kStreamStoresFrom;
}
size_t shift(Stores how) { return how == Stores::at16 ? 16 : 0; }

void copy_out(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
  std::memcpy(dst, src, n);
#endif
}

// One row of `cols` outputs of `osz` bytes at dst: decode(c0, n, out) writes columns [c0, c0 + n)
// at out, once for the whole row, or per kStageCols columns into the scratch (Stores::staged).
template <class F>
void write_row(Stores how, size_t cols, size_t osz, std::byte* dst, F&& decode) {
  if (how != Stores::staged) return decode(size_t{0}, cols, dst);
  alignas(64) static thread_local std::byte scratch[kStageCols * 4];
  for (size_t c0 = 0; c0 < cols; c0 += kStageCols) {
    const size_t n = std::min(kStageCols, cols - c0);
    decode(c0, n, scratch);
    copy_out(dst + c0 * osz, scratch, n * osz);
  }
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
  traffic(st, static_cast<double>(bytes), static_cast<double>(bytes), threads);
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
  traffic(st, 0, static_cast<double>(bytes), threads);
}

#if defined(__x86_64__)
// More yardsticks beside memset (which glibc runs as `rep stosb` for large sizes): the output
// written with 16-byte vector stores, plain (each line read for ownership first) or non-temporal
// (what the kernels' DequantSpec::stream mode issues), or copied with `rep movsb` in 16 KiB blocks
// from one L1-resident block (what a kernel could do after decoding a block into scratch). The
// bandwidth a kernel's own stores can reach at this size and thread count, e.g. when memset's
// lines stay in a last-level cache larger than the output.
enum class Store { plain, stream, movsb };
void BM_store(benchmark::State& st, Store how) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  const int threads = static_cast<int>(st.range(1));
  std::vector<std::byte> buf(bytes + 64);
  auto* dst = reinterpret_cast<__m128i*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
  constexpr size_t kBlock = 16 << 10;
  for (auto _ : st) {
    split(threads, bytes / 16, [&](size_t b, size_t n) {
      __m128i v = _mm_set1_epi8(1);
      if (how == Store::movsb) {
        alignas(64) static thread_local unsigned char src[kBlock] = {1};
        auto* d = reinterpret_cast<unsigned char*>(dst + b);
        for (size_t left = n * 16; left > 0;) {
          size_t c = left < kBlock ? left : kBlock;
          const unsigned char* s = src;
          left -= c;
          asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(c) : : "memory");
        }
        return;
      }
      for (size_t i = b; i < b + n; ++i) {
        asm("" : "+x"(v));  // no loop the compiler would turn back into a memset call
        if (how == Store::stream) _mm_stream_si128(dst + i, v);
        else _mm_store_si128(dst + i, v);
      }
      if (how == Store::stream) _mm_sfence();
    });
    benchmark::DoNotOptimize(dst);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
  traffic(st, 0, static_cast<double>(bytes), threads);
}
#endif

// stream as the reader converts a large dense tensor (reader/decode_dense.cpp): non-temporal stores.
void BM_convert(benchmark::State& st, DType src, DType dst, Isa isa) {
  const int threads = static_cast<int>(st.range(0));
  const auto in = random_floats(src, kN);
  Output out(kN * dtype_bits(dst) / 8);
  const auto fn = codecs::convert_kernel(src, dst, isa);
  const size_t isz = dtype_bits(src) / 8, osz = dtype_bits(dst) / 8;
  const bool nt = streams(Stores::reader, out.size());
  for (auto _ : st) {
    split(threads, kN, [&](size_t b, size_t n) {
      fn(in.data() + b * isz, out.data() + b * osz, n, nt);
      codecs::store_fence();
    });
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * out.size()));  // output bytes
  traffic(st, static_cast<double>(in.size()), static_cast<double>(out.size()), threads);
  st.SetLabel(codecs::isa_name(isa));
}

// Fused int4 dequant of a rows x cols weight, group size 128, bf16 scales (as f32, one per row
// and group), optional integer zero points: one kernel call per row, rows split across threads.
// fp4 (nvfp4: group 16, fp8 scales; mxfp4: group 32, E8M0 scales): the same kernel with the E2M1
// table; scale_bytes = the stored size of one scale.
void BM_dequant_nibble(benchmark::State& st, size_t rows, size_t cols, bool with_zp, DType natural, DType dst, bool fp4,
                       size_t kGroup, size_t scale_bytes, Isa isa, Stores how = Stores::reader) {
  const int threads = static_cast<int>(st.range(0));
  const size_t groups = (cols + kGroup - 1) / kGroup;
  std::mt19937 rng(2);
  std::vector<uint8_t> packed(rows * cols / 2);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> sd(0.001f, 0.02f);
  std::vector<float> scale(rows * groups), zp(with_zp ? rows * groups : 0), lut(16);
  for (auto& s : scale) s = codecs::f32_from_bits(codecs::bf16_to_f32(codecs::f32_to_bf16(codecs::f32_bits(sd(rng)))));
  for (auto& z : zp) z = static_cast<float>(rng() % 16);
  for (int i = 0; i < 16; ++i) lut[i] = fp4 ? codecs::e2m1_to_f32(static_cast<uint8_t>(i)) : static_cast<float>(i - 8);
  const size_t osz = dtype_bits(dst) / 8;
  Output out(rows * cols * osz, shift(how));
  const codecs::DequantSpec spec{natural, dst, kGroup, false, streams(how, out.size())};
  const auto fn = codecs::dequant_nibble_kernel(isa);
  for (auto _ : st) {
    split(threads, rows, [&](size_t b, size_t n) {
      for (size_t r = b; r < b + n; ++r)
        write_row(how, cols, osz, out.data() + r * cols * osz, [&](size_t c0, size_t k, std::byte* o) {
          const size_t g0 = r * groups + c0 / kGroup;
          fn(packed.data() + (r * cols + c0) / 2, k, lut.data(), scale.data() + g0, with_zp ? zp.data() + g0 : nullptr,
             spec, o);
        });
      codecs::store_fence();  // as the reader: once per run of rows
    });
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * out.size()));  // output bytes
  // As stored: scales of scale_bytes, 4-bit packed zero points.
  traffic(st, static_cast<double>(packed.size() + scale.size() * scale_bytes + zp.size() / 2),
          static_cast<double>(out.size()), threads);
  st.SetLabel(codecs::isa_name(isa));
}

// Fused 8-bit dequant (float-quantized fp8 E4M3 / int-quantized int8) of a rows x cols weight to
// bf16 with bf16 scales: channel strategy (one scale per row: the long-group table path on
// AVX-512), or groups of `group` columns whose scales repeat for `block_rows` rows (fp8 128x128
// blocks: the kernel gets a per-thread table memo, as the reader gives it for block weights).
// weights: fp8 codes of weights drawn from N(0, 0.02) (the usual initializer range; trained weights
// keep that magnitude), quantized as the library does for the channel strategy (scale =
// max |row| / 448, code = e4m3(w / scale)) or mxfp8 (groups of 32, E8M0 scales as
// generate_mx_scales makes them): the spread of exponents real checkpoints hold, where the
// other rows' codes are uniform bytes. The AVX2 f16 kernel's fast steps depend on it (codes whose
// output is an f16 normal, most of a real row's).
void BM_dequant_byte(benchmark::State& st, size_t rows, size_t cols, codecs::ByteCode code, size_t group,
                     size_t block_rows, DType dst, Isa isa, Stores how = Stores::reader, bool e8m0 = false,
                     bool weights = false) {
  const int threads = static_cast<int>(st.range(0));
  const size_t gs = group ? group : cols, groups = (cols + gs - 1) / gs;
  std::mt19937 rng(4);
  std::vector<uint8_t> codes(rows * cols);
  for (auto& b : codes) b = static_cast<uint8_t>(code == codecs::ByteCode::e4m3 ? (rng() & 0xF7) : rng());  // no NaNs
  std::uniform_real_distribution<float> sd(0.001f, 0.02f);
  std::vector<float> scale(rows * groups);
  for (auto& s : scale)  // bf16 scales, or mxfp8's E8M0: powers of two (2^-10 .. 2^-6 here)
    s = e8m0 ? std::ldexp(1.f, -10 + static_cast<int>(rng() % 5))
             : codecs::f32_from_bits(codecs::bf16_to_f32(codecs::f32_to_bf16(codecs::f32_bits(sd(rng)))));
  if (block_rows > 1)
    for (size_t r = 0; r < rows; ++r)
      for (size_t g = 0; g < groups; ++g) scale[r * groups + g] = scale[(r - r % block_rows) * groups + g];
  if (weights) {  // channel (one group a row), or mxfp8's groups with E8M0 scales
    std::normal_distribution<float> nd(0.f, 0.02f);
    std::vector<float> w(cols);
    for (size_t r = 0; r < rows; ++r) {
      for (auto& x : w) x = nd(rng);
      for (size_t g = 0; g < groups; ++g) {
        const size_t c0 = g * gs, c1 = std::min(cols, c0 + gs);
        float amax = 0.f;
        for (size_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[c]));
        float s;
        if (e8m0) {  // 2^(floor(log2 amax) - 8), amax first rounded to a power of two with E2M1's
          // mantissa (src/writer/quantize.cpp mx_scale, after the library's generate_mx_scales)
          int e = std::ilogb(amax);
          if (amax >= 1.75f * std::ldexp(1.f, e)) ++e;
          s = std::ldexp(1.f, e - 8);
        } else {
          s = codecs::f32_from_bits(codecs::bf16_to_f32(codecs::f32_to_bf16(codecs::f32_bits(amax / 448.f))));
        }
        scale[r * groups + g] = s;
        for (size_t c = c0; c < c1; ++c) codes[r * cols + c] = codecs::f32_to_e4m3(w[c] / s);
      }
    }
  }
  const size_t osz = dtype_bits(dst) / 8;
  Output out(rows * cols * osz, shift(how));
  const codecs::DequantSpec spec{DType::BF16, dst, gs, code == codecs::ByteCode::i8, streams(how, out.size())};
  const auto fn = codecs::dequant_byte_kernel(isa);
  for (auto _ : st) {
    split(threads, rows, [&](size_t b, size_t n) {
      thread_local std::vector<std::byte> memo(codecs::kDequantByteMemoBytes);
      for (size_t r = b; r < b + n; ++r)
        write_row(how, cols, osz, out.data() + r * cols * osz, [&](size_t c0, size_t k, std::byte* o) {
          // A chunk of a channel-strategy row (gs = cols) keeps the row's one scale.
          fn(codes.data() + r * cols + c0, k, code, scale.data() + r * groups + c0 / gs, nullptr, spec,
             block_rows > 1 ? memo.data() : nullptr, o);
        });
      codecs::store_fence();
    });
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * out.size()));  // output bytes
  // As stored: one bf16 (E8M0: one byte) scale per group (block scales: one per block_rows rows).
  const size_t stored_scales = (block_rows > 1 ? (rows + block_rows - 1) / block_rows : rows) * groups;
  traffic(st, static_cast<double>(codes.size() + stored_scales * (e8m0 ? 1 : 2)), static_cast<double>(out.size()),
          threads);
  st.SetLabel(codecs::isa_name(isa));
}

// pack-quantized int2..int8 but int4 (the 0.18+ dense packing), group 128, bf16 scales: what the
// reader runs for them, the fused packed kernel (two_pass: the row's codes unpacked to int8
// values, then the 8-bit kernel, the composition it replaced).
// rows < kRows: a compute probe, inputs and output L2-resident (no roofline: memory is not involved).
void BM_dequant_packed(benchmark::State& st, unsigned bits, size_t cols, DType d, bool two_pass, Isa isa,
                       size_t rows = kRows) {
  const int threads = static_cast<int>(st.range(0));
  constexpr size_t kGroup = 128;
  const size_t groups = cols / kGroup, n_out = rows * cols;
  const size_t row_bytes = detail::packed_words(cols, bits, true) * 4, osz = dtype_bits(d) / 8;
  std::mt19937 rng(5);
  std::vector<uint8_t> packed(rows * row_bytes);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> sd(0.001f, 0.02f);
  std::vector<float> scale(rows * groups);
  for (auto& s : scale) s = codecs::f32_from_bits(codecs::bf16_to_f32(codecs::f32_to_bf16(codecs::f32_bits(sd(rng)))));
  const Output out(n_out * osz);
  const codecs::DequantSpec spec{DType::BF16, d, kGroup, true, streams(Stores::reader, out.size())};
  const auto fused = codecs::dequant_packed_kernel(isa);  // what the reader calls
  const auto unpack = codecs::unpack_int8_kernel(isa);    // two_pass: the composition it replaced
  const auto dequant = codecs::dequant_byte_kernel(isa);
  for (auto _ : st) {
    split(threads, rows, [&](size_t b, size_t n) {
      thread_local std::vector<int8_t> codes;
      codes.resize(cols);
      for (size_t r = b; r < b + n; ++r) {
        if (!two_pass) {
          fused(packed.data() + r * row_bytes, bits, cols, scale.data() + r * groups, nullptr, spec, nullptr,
                out.data() + r * cols * osz);
          continue;
        }
        unpack(packed.data() + r * row_bytes, bits, cols, codes.data());
        dequant(reinterpret_cast<const uint8_t*>(codes.data()), cols, codecs::ByteCode::i8, scale.data() + r * groups,
                nullptr, spec, nullptr, out.data() + r * cols * osz);
      }
      codecs::store_fence();
    });
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * out.size()));
  traffic(st, static_cast<double>(packed.size() + scale.size() * 2), static_cast<double>(out.size()), threads);
  st.SetLabel(codecs::isa_name(isa));
}

// Sparse-bitmask bf16 expanded to a dense 4096 x 4096 bf16 row by row, rows split across threads:
// each element kept with probability 1/2 (bitmask), or exactly 2 of every 4 (2:4: the same kernel,
// a structured mask).
// dst = F16 / F32: the reader's form for another output dtype (reader/decode_compressed.cpp,
// SparseDecoder): each row's values converted into a row buffer, then expanded into the output.
void BM_bitmask_bf16(benchmark::State& st, bool two_four, size_t cols, Isa isa, Stores how = Stores::reader,
                     DType dst = DType::BF16) {
  const int threads = static_cast<int>(st.range(0));
  const size_t mrow = cols / 8;
  std::mt19937_64 rng(3);
  std::vector<uint8_t> mask(kRows * mrow);
  static constexpr uint8_t kTwoOfFour[6] = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
  for (auto& b : mask)
    b = two_four ? static_cast<uint8_t>(kTwoOfFour[rng() % 6] | kTwoOfFour[rng() % 6] << 4)
                 : static_cast<uint8_t>(rng());
  std::vector<size_t> offset(kRows + 1, 0);  // first value of each row
  for (size_t r = 0; r < kRows; ++r)
    offset[r + 1] = offset[r] + codecs::bitmask_row_popcount(mask.data() + r * mrow, cols);
  const auto values = random_floats(DType::BF16, offset[kRows]);
  const size_t osz = dtype_bits(dst) / 8;
  Output out(kRows * cols * osz, shift(how));
  const auto fn = codecs::bitmask_expand_kernel(2, isa);
  const auto conv = dst == DType::BF16 ? nullptr : codecs::convert_kernel(DType::BF16, dst, isa);
  const auto expand_out = codecs::bitmask_expand_kernel(static_cast<unsigned>(osz), isa);
  const bool nt = streams(how, out.size());
  for (auto _ : st) {
    split(threads, kRows, [&](size_t b, size_t n) {
      thread_local std::vector<std::byte> dense;
      dense.resize(cols * osz);
      for (size_t r = b; r < b + n; ++r) {
        size_t v = offset[r];  // the row's next value
        if (conv) {
          conv(values.data() + 2 * v, dense.data(), offset[r + 1] - v, false);
          expand_out(mask.data() + r * mrow, dense.data(), cols, out.data() + r * cols * osz, nt);
          continue;
        }
        write_row(how, cols, 2, out.data() + r * cols * 2, [&](size_t c0, size_t k, std::byte* o) {
          v += fn(mask.data() + r * mrow + c0 / 8, values.data() + 2 * v, k, o, nt);
        });
      }
      codecs::store_fence();
    });
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * out.size()));  // output bytes
  traffic(st, static_cast<double>(mask.size() + values.size()), static_cast<double>(out.size()), threads);
  st.SetLabel(codecs::isa_name(isa));
}

// Reference rooflines for each output size the codecs write (fp32 and 16-bit outputs).
// Sizes: 4096x4096 16-bit and f32 outputs, and the 4096x14336 16-bit output of the dequant bench.
BENCHMARK(BM_memcpy)
    ->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4), int64_t(kRows* kColsWide * 2)}, {1, 2}})
    ->UseRealTime();
BENCHMARK(BM_memset)
    ->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4), int64_t(kRows* kColsWide * 2)}, {1, 2}})
    ->UseRealTime();
#if defined(__x86_64__)
BENCHMARK_CAPTURE(BM_store, plain, Store::plain)
    ->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4), int64_t(kRows* kColsWide * 2)}, {1, 2}})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_store, stream, Store::stream)
    ->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4), int64_t(kRows* kColsWide * 2)}, {1, 2}})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_store, movsb, Store::movsb)
    ->ArgsProduct({{int64_t(kN * 2), int64_t(kN * 4), int64_t(kRows* kColsWide * 2)}, {1, 2}})
    ->UseRealTime();
#endif

// Every kernel once per ISA this build has and this CPU runs (codecs::kAllIsas), named <case>_<isa>.
void register_kernels() {
  using codecs::ByteCode;
  for (const Isa isa : codecs::kAllIsas) {
    if (!codecs::isa_supported(isa)) continue;
    const std::string tag = std::string("_") + codecs::isa_name(isa);
    const auto add = [&](const std::string& name, auto&& fn, bool two_threads = true) {
      auto* b = benchmark::RegisterBenchmark((name + tag).c_str(), fn)->Arg(1)->UseRealTime();
      if (two_threads) b->Arg(2);
    };
    struct Conv {
      const char* name;
      DType s, d;
    };
    for (const Conv c :
         {Conv{"BM_convert/bf16_to_f32", DType::BF16, DType::F32},
          Conv{"BM_convert/f32_to_bf16", DType::F32, DType::BF16},
          Conv{"BM_convert/f16_to_f32", DType::F16, DType::F32}, Conv{"BM_convert/f32_to_f16", DType::F32, DType::F16},
          Conv{"BM_convert/f16_to_bf16", DType::F16, DType::BF16},
          Conv{"BM_convert/bf16_to_f16", DType::BF16, DType::F16}})
      add(c.name, [c, isa](benchmark::State& st) { BM_convert(st, c.s, c.d, isa); });
    // Every kernel at a 32 MiB and a 112 MiB output (4096 x 4096 / 4096 x 14336 16-bit, 4096 x 4096
    // / 4096 x 7168 f32), as the reader runs it; int4 and fp4 with bf16 scales (natural = out =
    // BF16) unless named, nvfp4 (group 16, fp8 scales) and mxfp4 (group 32, E8M0 scales) through
    // the same kernel with the E2M1 table.
    struct Int4 {
      const char* name;
      size_t cols;
      bool zp;
      DType nat, d;
      bool fp4 = false;
      size_t group = 128, scale_bytes = 2;
    };
    const std::vector<Int4> int4s = {
        Int4{"BM_dequant_int4/int4_g128_bf16_4096x4096", kCols, false, DType::BF16, DType::BF16},
        Int4{"BM_dequant_int4/int4_g128_zp_bf16_4096x4096", kCols, true, DType::BF16, DType::BF16},
        Int4{"BM_dequant_int4/int4_g128_bf16_4096x14336", kColsWide, false, DType::BF16, DType::BF16},
        Int4{"BM_dequant_int4/int4_g128_zp_bf16_4096x14336", kColsWide, true, DType::BF16, DType::BF16},
        Int4{"BM_dequant_int4/int4_g128_bf16_to_f32_4096x4096", kCols, false, DType::BF16, DType::F32},
        Int4{"BM_dequant_int4/int4_g128_bf16_to_f32_4096x7168", kColsWideF32, false, DType::BF16, DType::F32},
        Int4{"BM_dequant_int4/int4_g128_f16_4096x4096", kCols, false, DType::F16, DType::F16},
        Int4{"BM_dequant_int4/int4_g128_f16_4096x14336", kColsWide, false, DType::F16, DType::F16},
        Int4{"BM_dequant_int4/nvfp4_g16_bf16_4096x4096", kCols, false, DType::BF16, DType::BF16, true, 16, 1},
        Int4{"BM_dequant_int4/nvfp4_g16_bf16_4096x14336", kColsWide, false, DType::BF16, DType::BF16, true, 16, 1},
        Int4{"BM_dequant_int4/nvfp4_g16_bf16_to_f32_4096x4096", kCols, false, DType::BF16, DType::F32, true, 16, 1},
        Int4{"BM_dequant_int4/mxfp4_g32_bf16_4096x4096", kCols, false, DType::BF16, DType::BF16, true, 32, 1},
        Int4{"BM_dequant_int4/mxfp4_g32_bf16_4096x14336", kColsWide, false, DType::BF16, DType::BF16, true, 32, 1},
        // every output of the bf16 checkpoints: f16 (an engine that runs fp16) and f32
        Int4{"BM_dequant_int4/int4_g128_bf16_to_f16_4096x4096", kCols, false, DType::BF16, DType::F16},
        Int4{"BM_dequant_int4/nvfp4_g16_bf16_to_f16_4096x4096", kCols, false, DType::BF16, DType::F16, true, 16, 1},
        Int4{"BM_dequant_int4/mxfp4_g32_bf16_to_f16_4096x4096", kCols, false, DType::BF16, DType::F16, true, 32, 1},
        Int4{"BM_dequant_int4/mxfp4_g32_bf16_to_f32_4096x4096", kCols, false, DType::BF16, DType::F32, true, 32, 1}};
    const auto add_int4 = [&](const Int4& c, Stores how, const char* suffix = "") {
      add(std::string(c.name) + suffix, [c, isa, how](benchmark::State& st) {
        BM_dequant_nibble(st, kRows, c.cols, c.zp, c.nat, c.d, c.fp4, c.group, c.scale_bytes, isa, how);
      });
    };
    for (const Int4& c : int4s) add_int4(c, Stores::reader);
    // 8-bit codes with bf16 scales: channel (one scale per row), group 128, or fp8 128 x 128 blocks.
    struct Byte {
      const char* name;
      size_t cols;
      ByteCode code;
      size_t group, block_rows;
      DType d = DType::BF16;
      bool e8m0 = false;  // mxfp8: E8M0 (power-of-two) scales of one byte
      bool weights = false;
    };
    const std::vector<Byte> bytes = {
        Byte{"BM_dequant_byte/fp8_channel_bf16_4096x4096", kCols, ByteCode::e4m3, 0, 0},
        Byte{"BM_dequant_byte/fp8_channel_bf16_4096x14336", kColsWide, ByteCode::e4m3, 0, 0},
        Byte{"BM_dequant_byte/fp8_block128_bf16_4096x4096", kCols, ByteCode::e4m3, 128, 128},
        Byte{"BM_dequant_byte/fp8_block128_bf16_4096x14336", kColsWide, ByteCode::e4m3, 128, 128},
        Byte{"BM_dequant_byte/int8_channel_bf16_4096x4096", kCols, ByteCode::i8, 0, 0},
        Byte{"BM_dequant_byte/int8_channel_bf16_4096x14336", kColsWide, ByteCode::i8, 0, 0},
        Byte{"BM_dequant_byte/int8_group128_bf16_4096x4096", kCols, ByteCode::i8, 128, 0},
        Byte{"BM_dequant_byte/int8_group128_bf16_4096x14336", kColsWide, ByteCode::i8, 128, 0},
        Byte{"BM_dequant_byte/fp8_channel_f16_4096x4096", kCols, ByteCode::e4m3, 0, 0, DType::F16},
        Byte{"BM_dequant_byte/fp8_channel_f16_4096x14336", kColsWide, ByteCode::e4m3, 0, 0, DType::F16},
        Byte{"BM_dequant_byte/fp8w_channel_f16_4096x4096", kCols, ByteCode::e4m3, 0, 0, DType::F16, false, true},
        Byte{"BM_dequant_byte/fp8w_channel_f16_4096x14336", kColsWide, ByteCode::e4m3, 0, 0, DType::F16, false, true},
        Byte{"BM_dequant_byte/fp8_channel_f32_4096x4096", kCols, ByteCode::e4m3, 0, 0, DType::F32},
        Byte{"BM_dequant_byte/fp8_channel_f32_4096x7168", kColsWideF32, ByteCode::e4m3, 0, 0, DType::F32},
        Byte{"BM_dequant_byte/mxfp8_g32_bf16_4096x4096", kCols, ByteCode::e4m3, 32, 0, DType::BF16, true},
        Byte{"BM_dequant_byte/mxfp8_g32_bf16_4096x14336", kColsWide, ByteCode::e4m3, 32, 0, DType::BF16, true},
        // f16 and f32 outputs of the bf16 checkpoints (fp8 channel's are above)
        Byte{"BM_dequant_byte/fp8_block128_f16_4096x4096", kCols, ByteCode::e4m3, 128, 128, DType::F16},
        Byte{"BM_dequant_byte/fp8_block128_f32_4096x4096", kCols, ByteCode::e4m3, 128, 128, DType::F32},
        Byte{"BM_dequant_byte/int8_channel_f16_4096x4096", kCols, ByteCode::i8, 0, 0, DType::F16},
        Byte{"BM_dequant_byte/int8_channel_f32_4096x4096", kCols, ByteCode::i8, 0, 0, DType::F32},
        Byte{"BM_dequant_byte/int8_group128_f16_4096x4096", kCols, ByteCode::i8, 128, 0, DType::F16},
        Byte{"BM_dequant_byte/mxfp8_g32_f16_4096x4096", kCols, ByteCode::e4m3, 32, 0, DType::F16, true},
        Byte{"BM_dequant_byte/mxfp8_g32_f32_4096x4096", kCols, ByteCode::e4m3, 32, 0, DType::F32, true},
        // mxfp8 of N(0, 0.02) weights: where the uniform codes above give f16-subnormal outputs in
        // most 64-column steps, these give them in one step of seven
        Byte{"BM_dequant_byte/mxfp8w_g32_f16_4096x4096", kCols, ByteCode::e4m3, 32, 0, DType::F16, true, true}};
    const auto add_byte = [&](const Byte& c, Stores how, const char* suffix = "") {
      add(
          std::string(c.name) + suffix,
          [c, isa, how](benchmark::State& st) {
            BM_dequant_byte(st, kRows, c.cols, c.code, c.group, c.block_rows, c.d, isa, how, c.e8m0, c.weights);
          },
          isa != Isa::scalar);
    };
    for (const Byte& c : bytes) add_byte(c, Stores::reader);
    const auto add_bitmask = [&](bool two_four, size_t cols, Stores how, const char* suffix = "") {
      add(std::string(two_four ? "BM_bitmask_bf16/sparse24_4096x" : "BM_bitmask_bf16/sparse50_4096x") +
              std::to_string(cols) + suffix,
          [two_four, cols, isa, how](benchmark::State& st) { BM_bitmask_bf16(st, two_four, cols, isa, how); });
    };
    for (const bool two_four : {false, true})
      for (const size_t cols : {kCols, kColsWide}) add_bitmask(two_four, cols, Stores::reader);
    // bf16 values to f16 and f32 outputs (the reader expands a row, then converts it)
    for (const auto& [d, name] : {std::pair{DType::F16, "f16"}, std::pair{DType::F32, "f32"}})
      add(std::string("BM_bitmask_bf16/sparse50_to_") + name + "_4096x4096",
          [d, isa](benchmark::State& st) { BM_bitmask_bf16(st, false, kCols, isa, Stores::reader, d); });
    // Key rows again with the other store paths (AVX-512): _at16 (Stores::at16), _plainstores,
    // DequantSpec::stream off (an A/B of the non-temporal stores in one binary), and _staged
    // (Stores::staged). Read with care:
    // here every iteration rewrites one buffer, which a large last-level cache may hold; a load
    // writes each tensor once (`ctstream bench --arena` measures that).
    if (isa == Isa::avx512) {
      for (const auto& [how, suffix] : {std::pair{Stores::at16, "_at16"}, std::pair{Stores::plain, "_plainstores"},
                                        std::pair{Stores::staged, "_staged"}}) {
        for (const size_t i : {0, 2, 4}) add_int4(int4s[i], how, suffix);  // int4 bf16 32 / 112 MiB, f32 32 MiB
        // fp8 channel, f32, and block (not staged: its memo keys tables by the group's index within a
        // call, so each chunk would rebuild the tables of the one before)
        for (const size_t i : {0, 1, 10, 3})
          if (i != 3 || how != Stores::staged) add_byte(bytes[i], how, suffix);
        add_bitmask(false, kCols, how, suffix);
      }
    }
    // BM_dequant_packed: the fused kernel (the reader's path); BM_dequant_packed_2pass: unpack_int8
    // then the 8-bit kernel, the path it replaced (same binary, for A/B).
    struct Packed {
      unsigned bits;
      DType d;
      const char* out;
      size_t cols = kCols;
    };
    for (const Packed c : {Packed{2, DType::BF16, "bf16"},
                           Packed{3, DType::BF16, "bf16"},
                           Packed{5, DType::BF16, "bf16"},
                           Packed{6, DType::BF16, "bf16"},
                           Packed{7, DType::BF16, "bf16"},
                           Packed{8, DType::BF16, "bf16"},
                           Packed{3, DType::F16, "f16"},
                           Packed{6, DType::F16, "f16"},
                           Packed{3, DType::F32, "bf16_to_f32"},
                           Packed{6, DType::F32, "bf16_to_f32"},
                           Packed{2, DType::F16, "f16"},
                           Packed{5, DType::F16, "f16"},
                           Packed{7, DType::F16, "f16"},
                           Packed{8, DType::F16, "f16"},
                           Packed{2, DType::F32, "bf16_to_f32"},
                           Packed{8, DType::F32, "bf16_to_f32"},
                           Packed{2, DType::BF16, "bf16", kColsWide},
                           Packed{3, DType::BF16, "bf16", kColsWide},
                           Packed{5, DType::BF16, "bf16", kColsWide},
                           Packed{6, DType::BF16, "bf16", kColsWide},
                           Packed{7, DType::BF16, "bf16", kColsWide},
                           Packed{8, DType::BF16, "bf16", kColsWide},
                           Packed{3, DType::F16, "f16", kColsWide},
                           Packed{3, DType::F32, "bf16_to_f32", kColsWideF32},
                           Packed{6, DType::F32, "bf16_to_f32", kColsWideF32}})
      for (bool two_pass : {false, true}) {
        if (two_pass && c.cols != kCols) continue;  // the A/B at one size
        add(std::string(two_pass ? "BM_dequant_packed_2pass" : "BM_dequant_packed") + "/int" + std::to_string(c.bits) +
                "_g128_" + c.out + "_4096x" + std::to_string(c.cols),
            [c, two_pass, isa](benchmark::State& st) { BM_dequant_packed(st, c.bits, c.cols, c.d, two_pass, isa); });
      }
    // The fused kernel's compute rate: 16 rows (128 KiB of output) decoded over and over in L2.
    // A kernel whose rate here is not well above what memory asks of it (memset's bandwidth over
    // its traffic per output byte) cannot reach the roofline however its stores go.
    for (const unsigned bits : {2u, 3u, 6u, 7u})
      add("BM_dequant_packed_l2/int" + std::to_string(bits) + "_g128_bf16_16x4096",
          [bits, isa](benchmark::State& st) { BM_dequant_packed(st, bits, kCols, DType::BF16, false, isa, 16); });
    // The same probe for the 4-bit kernels: int4 g128, nvfp4, mxfp4 (int4s 0, 8 and 11).
    for (const auto& [i, name] :
         {std::pair{size_t(0), "int4_g128"}, std::pair{size_t(8), "nvfp4_g16"}, std::pair{size_t(11), "mxfp4_g32"}})
      add(std::string("BM_dequant_int4_l2/") + name + "_bf16_16x4096", [c = int4s[i], isa](benchmark::State& st) {
        BM_dequant_nibble(st, 16, kCols, c.zp, c.nat, c.d, c.fp4, c.group, c.scale_bytes, isa);
      });
    // The same probe for the 8-bit kernels: fp8 channel and 128 x 128 blocks, int8 channel.
    for (const auto& [i, name] : {std::pair{size_t(0), "fp8_channel"}, std::pair{size_t(2), "fp8_block128"},
                                  std::pair{size_t(4), "int8_channel"}})
      add(std::string("BM_dequant_byte_l2/") + name + "_bf16_16x4096", [c = bytes[i], isa](benchmark::State& st) {
        BM_dequant_byte(st, 16, c.cols, c.code, c.group, c.block_rows, c.d, isa);
      });
  }
}

// The console table, then each kernel's roofline ratio against memset of its output size and
// thread count from the same run (the median where --benchmark_repetitions gives aggregates).
class RooflineReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || !r.counters.count("written_B")) continue;
      if (r.run_type == Run::RT_Aggregate ? r.aggregate_name != "median" : r.repetitions > 1) continue;
      const double secs = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      rows_.push_back({r.run_name.function_name, r.counters.at("read_B").value, r.counters.at("written_B").value,
                       static_cast<int>(r.counters.at("threads").value), secs});
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::map<std::pair<double, int>, double> memset_bw;  // (output bytes, threads) -> bytes / s
    for (const Row& r : rows_)
      if (r.name == "BM_memset") memset_bw[{r.written, r.threads}] = r.written / r.secs;
    std::printf("\nroofline: (bytes read + written) / s over memset's bytes / s, same output size and threads\n");
    std::printf("%-58s %3s %8s %8s %9s %9s %6s\n", "kernel", "thr", "out MiB", "traffic", "GB/s", "memset", "ratio");
    for (const Row& r : rows_) {
      if (r.name == "BM_memset" || r.name == "BM_memcpy") continue;
      const auto m = memset_bw.find({r.written, r.threads});
      const double bw = (r.read + r.written) / r.secs;
      std::printf("%-58s %3d %8.0f %8.3f %9.1f %9s %6s\n", r.name.c_str(), r.threads, r.written / (1 << 20),
                  (r.read + r.written) / r.written, bw / 1e9,
                  m == memset_bw.end() ? "-" : std::to_string(m->second / 1e9).substr(0, 5).c_str(),
                  m == memset_bw.end() ? "-" : std::to_string(bw / m->second).substr(0, 4).c_str());
    }
  }

 private:
  struct Row {
    std::string name;
    double read, written;
    int threads;
    double secs;
  };
  std::vector<Row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
  register_kernels();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RooflineReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
