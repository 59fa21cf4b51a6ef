// cuda — the decode kernels. Each thread decodes output elements with the functions of
// codecs/element.hpp, the ones the CPU scalar reference kernels call, so a fixture the host build
// decodes bit-exactly decodes to the same bits here. Geometry (group sizes, scale rows, packing)
// arrives in the job, taken by api.cpp from the format table: nothing is re-derived here.
#include <cuda_runtime.h>

#include "codecs/element.hpp"
#include "cuda/launch.hpp"

namespace ctstream::cuda::detail {
namespace {

namespace c = ctstream::codecs;

constexpr unsigned kThreads = 256;

unsigned blocks_for(uint64_t n) {
  const uint64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535u * 16u ? b : 65535u * 16u);  // grid-stride loops cover the rest
}

// The logical element output element o decodes (SliceMap).
__device__ inline uint64_t logical_index(const SliceMap& m, uint64_t o) {
  const uint64_t inner_i = o % m.inner, rest = o / m.inner;
  const uint64_t len_i = rest % m.len, outer_i = rest / m.len;
  return (outer_i * m.dim + m.start + len_i) * m.inner + inner_i;
}

__device__ inline unsigned dtype_bytes(DType d) {
  switch (d) {
    case DType::U8:
    case DType::I8:
    case DType::BOOL:
    case DType::F8_E5M2:
    case DType::F8_E4M3:
    case DType::F8_E8M0:
    case DType::F8_E4M3FNUZ:
    case DType::F8_E5M2FNUZ: return 1;
    case DType::I16:
    case DType::U16:
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I32:
    case DType::U32:
    case DType::F32: return 4;
    case DType::C64:
    case DType::F64:
    case DType::I64:
    case DType::U64: return 8;
    default: return 0;  // sub-byte dtypes: copied whole by the host, never here
  }
}

__device__ inline void store_out(void* out, uint64_t o, DType d, uint32_t bits) {
  if (d == DType::F32) static_cast<uint32_t*>(out)[o] = bits;
  else static_cast<uint16_t*>(out)[o] = static_cast<uint16_t>(bits);
}

__global__ void dense_kernel(DenseJob job, void* out, uint64_t n) {
  const bool copy = job.src == job.out;
  const unsigned esz = copy ? dtype_bytes(job.src) : 0;
  for (uint64_t o = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; o < n; o += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t e = logical_index(job.map, o);
    if (copy) {
      const uint8_t* s = job.in + e * esz;
      uint8_t* d = static_cast<uint8_t*>(out) + o * esz;
      for (unsigned k = 0; k < esz; ++k) d[k] = s[k];
    } else {
      store_out(out, o, job.out, c::narrow_f32(c::f32_bits(c::widen_element(job.src, job.in, e)), job.out));
    }
  }
}

// ---- sparse: where each row's values start -------------------------------------------------------

// One thread per row: byte_offset[r][k] = set bits of row r's mask bytes before k; row_start[r+1]
// = set bits of row r (the padding bits past `cols` were checked clear on the host).
__global__ void mask_row_counts(QuantJob job) {
  const uint64_t mb = (job.cols + 7) / 8;
  for (uint64_t r = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; r < job.rows;
       r += uint64_t{gridDim.x} * blockDim.x) {
    uint32_t run = 0;
    for (uint64_t k = 0; k < mb; ++k) {
      job.byte_offset[r * mb + k] = run;
      run += static_cast<uint32_t>(__popc(job.mask[r * mb + k]));
    }
    job.row_start[r + 1] = run;
  }
}

// One block turns row_start[1..rows] (counts) into prefix sums (row_start[0] = 0): each thread
// sums a contiguous run of rows, thread 0 scans the per-thread totals, each thread rewrites its run.
__global__ void row_prefix_sums(uint64_t* row_start, uint64_t rows) {
  __shared__ uint64_t part[kThreads];
  const uint64_t per = (rows + kThreads - 1) / kThreads;
  const uint64_t b = threadIdx.x * per, e = b + per < rows ? b + per : rows;
  uint64_t s = 0;
  for (uint64_t r = b; r < e; ++r) s += row_start[r + 1];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t run = 0;
    for (unsigned t = 0; t < kThreads; ++t) {
      const uint64_t v = part[t];
      part[t] = run;
      run += v;
    }
    row_start[0] = 0;
  }
  __syncthreads();
  uint64_t run = part[threadIdx.x];
  for (uint64_t r = b; r < e; ++r) {
    run += row_start[r + 1];
    row_start[r + 1] = run;
  }
}

// ---- quantized / sparse elements -----------------------------------------------------------------

// The f32 value of element (r, c) before dequantization; `raw` gets the stored bits of a sparse
// value (for copies), `present` whether the mask keeps it.
__device__ inline float value_of(const QuantJob& j, uint64_t r, uint64_t c, uint32_t& raw, bool& present) {
  present = true;
  switch (j.kind) {
    case ValueKind::packed_int:
      return c::int_code_value(c::int_code(j.values + r * j.row_bytes, 4, j.bits, j.dense_pack, c), j.bits);
    case ValueKind::byte: return c::stored_to_f32(j.value_dtype, j.values + r * j.cols + c, false);
    case ValueKind::e2m1: {
      const uint8_t b = j.values[(r * j.cols + c) / 2];
      return c::e2m1_to_f32(static_cast<uint8_t>(c % 2 ? b >> 4 : b & 0xF));
    }
    case ValueKind::none:
    case ValueKind::marlin: break;  // never launched (api.cpp refuses them)
    case ValueKind::e2m3: return c::e2m3_to_f32(c::fp6_code(j.values + r * (j.cols / 4 * 3), c));
    case ValueKind::sparse: {
      const uint64_t mb = (j.cols + 7) / 8;
      const uint8_t m = j.mask[r * mb + c / 8];
      const unsigned bit = static_cast<unsigned>(c % 8);
      const unsigned vsz = dtype_bytes(j.value_dtype);
      raw = 0;
      if (!((m >> bit) & 1u)) {
        present = false;
        uint8_t zero[4] = {0, 0, 0, 0};  // an absent element is a zero code (the CPU expands zeros)
        return c::stored_to_f32(j.value_dtype, zero, false);
      }
      const uint64_t idx = j.row_start[r] + j.byte_offset[r * mb + c / 8] + c::mask_rank_in_byte(m, bit);
      const uint8_t* p = j.values + idx * vsz;
      for (unsigned k = 0; k < vsz; ++k) raw |= static_cast<uint32_t>(p[k]) << (8 * k);
      return j.quantized ? c::stored_to_f32(j.value_dtype, p, false) : c::widen_element(j.value_dtype, p, 0);
    }
  }
  return 0.f;
}

__global__ void quant_kernel(QuantJob j, void* out, uint64_t n) {
  const unsigned ssz = dtype_bytes(j.scale_dtype);
  const unsigned zsz = dtype_bytes(j.zp_dtype);
  for (uint64_t o = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; o < n; o += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t e = logical_index(j.map, o);
    const uint64_t r = e / j.cols, col = e % j.cols;
    uint32_t raw = 0;
    bool present = true;
    const float x = value_of(j, r, col, raw, present);
    if (!j.quantized) {  // sparse values as stored, or converted among F32 / F16 / BF16
      if (j.value_dtype == j.out) {
        const unsigned vsz = dtype_bytes(j.out);
        uint8_t* d = static_cast<uint8_t*>(out) + o * vsz;
        for (unsigned k = 0; k < vsz; ++k) d[k] = static_cast<uint8_t>(raw >> (8 * k));
      } else {
        store_out(out, o, j.out, c::narrow_f32(c::f32_bits(x), j.out));
      }
      continue;
    }
    const uint64_t g = j.gidx ? static_cast<uint64_t>(j.gidx[col]) : col / j.group_size;
    const uint64_t sr = r / j.row_div;
    float s = c::stored_to_f32(j.scale_dtype, j.scale + (sr * j.scale_cols + g) * ssz, j.e8m0);
    // nvfp4: the stored global scale divides the scale in f32 (IEEE division: -prec-div=true)
    if (j.global_scale) s = s / c::f32_from_bits(c::load_le32(j.global_scale));
    float z = 0.f;
    if (j.zp) {
      // I32: packed along rows one 2-D slice at a time (format::ZeroPointPacking): column g of
      // slice sr / zp_slice_rows is a code stream over that slice's scale rows.
      z = j.zp_dtype == DType::I32
              ? c::int_code_value(c::int_code(j.zp + ((sr / j.zp_slice_rows) * j.zp_words * j.scale_cols + g) * 4,
                                              4 * j.scale_cols, j.bits, j.dense_pack, sr % j.zp_slice_rows),
                                  j.bits)
              : c::f32_from_bits(c::round_to(  // rounded to S, as the CPU path (Scales::load_zp)
                    c::f32_bits(c::stored_to_f32(j.zp_dtype, j.zp + (sr * j.scale_cols + g) * zsz, false)), j.natural));
    }
    store_out(out, o, j.out, c::dequant_element(x, s, j.zp != nullptr, z, j.exact_sub, j.natural, j.out));
  }
}

int report(cudaError_t e, const char* call, const char** what) {
  if (e != cudaSuccess && what) *what = call;
  return static_cast<int>(e);
}

}  // namespace

int launch_dense(const DenseJob& job, void* out, void* stream, const char** what) noexcept {
  const uint64_t n = job.map.out_elems();
  if (n == 0) return 0;
  dense_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(job, out, n);
  return report(cudaGetLastError(), "dense_kernel launch", what);
}

int launch_quant(const QuantJob& job, void* out, void* stream, const char** what) noexcept {
  const auto s = static_cast<cudaStream_t>(stream);
  const uint64_t n = job.map.out_elems();
  if (n == 0) return 0;
  if (job.kind == ValueKind::sparse) {
    mask_row_counts<<<blocks_for(job.rows), kThreads, 0, s>>>(job);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return report(e, "mask_row_counts launch", what);
    row_prefix_sums<<<1, kThreads, 0, s>>>(job.row_start, job.rows);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return report(e, "row_prefix_sums launch", what);
  }
  quant_kernel<<<blocks_for(n), kThreads, 0, s>>>(job, out, n);
  return report(cudaGetLastError(), "quant_kernel launch", what);
}

}  // namespace ctstream::cuda::detail
