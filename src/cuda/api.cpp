// cuda — decode_into_device(): host-side checks (the CPU path's own: Checkpoint::validate, the
// output-size and slice rules), staging of the stored parts through a bounded pinned ring, and the
// kernel launch (kernels.cu). Built in every configuration; without CUDA only the refusal remains.
#include "ctstream/cuda.hpp"

#include <string>

#include "core/boundary.hpp"

#if CTSTREAM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/launch.hpp"
#include "format/format_table.hpp"
#include "reader/internal.hpp"
#endif

namespace ctstream::cuda {
namespace {

std::string file_of(const Checkpoint& ck, const TensorInfo& t) {
  if (t.parts.empty()) return "";
  const auto files = ck.files();
  return t.parts.front().file < files.size() ? files[t.parts.front().file].string() : "";
}

#if CTSTREAM_HAVE_CUDA
struct Probe {
  bool ok = false;
  std::string why;
};
const Probe& probe() noexcept {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      r.why = std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
      (void)cudaGetLastError();  // reset the runtime's last-error state for later calls
    } else if (n == 0) {
      r.why = "no CUDA device";
    } else {
      r.ok = true;
    }
    return r;
  }();
  return p;
}
#endif

std::string unavailable_reason() {
#if CTSTREAM_HAVE_CUDA
  return probe().why;
#else
  return "this ctstream was built without CUDA (CTSTREAM_CUDA=OFF)";
#endif
}

#if CTSTREAM_HAVE_CUDA
using detail::DenseJob;
using detail::QuantJob;
using detail::SliceMap;
using detail::ValueKind;

constexpr uint64_t kStagingSlot = 16ull << 20;  // two slots: at most 32 MiB of pinned host memory
constexpr uint64_t kAlign = 256;

class Cuda {
 public:
  Cuda(std::string file, std::string tensor) : file_(std::move(file)), tensor_(std::move(tensor)) {}
  void check(cudaError_t e, const char* call) const {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();
    const ErrorKind k = e == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::internal;
    throw Error(k, file_, tensor_, std::string("CUDA ") + call + ": " + cudaGetErrorString(e));
  }
  [[noreturn]] void fail(ErrorKind k, const std::string& msg) const { throw Error(k, file_, tensor_, msg); }

 private:
  std::string file_, tensor_;
};

// One stream-ordered device allocation, freed in stream order (after the kernels that use it).
class DeviceBuffer {
 public:
  DeviceBuffer(const Cuda& cu, uint64_t bytes, cudaStream_t s) : s_(s) {
    if (bytes) cu.check(cudaMallocAsync(&p_, bytes, s), "cudaMallocAsync");
  }
  ~DeviceBuffer() {
    if (p_) (void)cudaFreeAsync(p_, s_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
  cudaStream_t s_;
};

// Two pinned host slots and the events of the copies that last read them. Rings outlive one decode
// (RingPool): pinning 32 MiB takes milliseconds and cudaFreeHost synchronises the whole device, so
// a ring per call put both on every tensor of a model's load.
struct Ring {
  void* host[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  ~Ring() {
    for (int i = 0; i < 2; ++i) {
      if (done[i]) {
        (void)cudaEventSynchronize(done[i]);  // no copy may still read the slot we free
        (void)cudaEventDestroy(done[i]);
      }
      if (host[i]) (void)cudaFreeHost(host[i]);
    }
  }
};

// Free rings per device (an event belongs to the device it was created on); at most kKeepRings
// each are kept, so the pinned memory held between decodes is bounded (4 x 32 MiB per device).
// Never destroyed: no CUDA call may run after the runtime's own teardown at exit.
class RingPool {
 public:
  static RingPool& get() {
    static RingPool* pool = new RingPool;
    return *pool;
  }
  std::unique_ptr<Ring> acquire(const Cuda& cu) {
    int dev = 0;
    cu.check(cudaGetDevice(&dev), "cudaGetDevice");
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto& v = free_[dev];
      if (!v.empty()) {
        std::unique_ptr<Ring> r = std::move(v.back());
        v.pop_back();
        return r;
      }
    }
    auto r = std::make_unique<Ring>();
    for (int i = 0; i < 2; ++i) {
      cu.check(cudaMallocHost(&r->host[i], kStagingSlot), "cudaMallocHost");
      cu.check(cudaEventCreateWithFlags(&r->done[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    return r;
  }
  void release(std::unique_ptr<Ring> r) noexcept {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return;  // ~Ring frees it
    std::lock_guard<std::mutex> lk(mu_);
    auto& v = free_[dev];
    if (v.size() < kKeepRings) v.push_back(std::move(r));
  }

 private:
  static constexpr size_t kKeepRings = 4;
  std::mutex mu_;
  std::map<int, std::vector<std::unique_ptr<Ring>>> free_;
};

// file -> pinned slot -> async H2D, two slots in flight: a slot is refilled once the copy that
// last read it has finished (its event), so reading the next chunk overlaps the previous copy.
// A slot is filled by the checkpoint's threads in 1 MiB pieces (one thread reads the page cache
// at a fraction of the link's rate).
class Staging {
 public:
  Staging(const Cuda& cu, const Checkpoint& ck, cudaStream_t s)
      : cu_(cu), ck_(ck), s_(s), ring_(RingPool::get().acquire(cu)) {}
  ~Staging() { RingPool::get().release(std::move(ring_)); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Staged through the checkpoint's own descriptor (read_part: pread, both io modes), never by
  // reopening the path (a file replaced since open would feed other bytes than those validated)
  // nor by copying out of the mapping (a file shrunk by someone else meanwhile would SIGBUS).
  void upload(const TensorPart& p, uint8_t* dst) {
    for (uint64_t off = 0; off < p.nbytes; off += kStagingSlot) {
      const uint64_t n = std::min(kStagingSlot, p.nbytes - off);
      cu_.check(cudaEventSynchronize(ring_->done[next_]), "cudaEventSynchronize");
      auto* h = static_cast<std::byte*>(ring_->host[next_]);
      const uint64_t pieces = (n + kReadPiece - 1) / kReadPiece;
      reader::parallel_for(pieces, pieces > 1 ? ck_.impl().threads() : 1, [&](size_t k) {
        TensorPart chunk = p;
        chunk.offset += off + k * kReadPiece;
        chunk.nbytes = std::min(kReadPiece, n - k * kReadPiece);
        (void)ck_.read_part(chunk, std::span<std::byte>(h + k * kReadPiece, chunk.nbytes));
      });
      cu_.check(cudaMemcpyAsync(dst + off, h, n, cudaMemcpyHostToDevice, s_), "cudaMemcpyAsync");
      cu_.check(cudaEventRecord(ring_->done[next_], s_), "cudaEventRecord");
      next_ ^= 1;
    }
  }

 private:
  static constexpr uint64_t kReadPiece = 1ull << 20;
  const Cuda& cu_;
  const Checkpoint& ck_;
  cudaStream_t s_;
  std::unique_ptr<Ring> ring_;
  int next_ = 0;
};

SliceMap slice_map(const TensorInfo& t, const std::optional<Slice>& s, const std::vector<uint64_t>& out_shape) {
  SliceMap m;
  if (!s) {  // the whole tensor, one run
    m.dim = m.len = t.numel();
    return m;
  }
  for (unsigned d = 0; d < s->dim; ++d) m.outer *= t.shape[d];
  m.dim = t.shape[s->dim];
  for (size_t d = s->dim + 1; d < t.shape.size(); ++d) m.inner *= t.shape[d];
  m.start = s->start;
  m.len = out_shape[s->dim];  // output_shape() checked and clamped the slice
  return m;
}

uint64_t decode_device(const Checkpoint& ck, const TensorInfo& t, const Cuda& cu, void* dptr, uint64_t dbytes,
                       DType out, cudaStream_t stream, const std::optional<Slice>& slice) {
  ck.validate(t);  // every check of the stored data the CPU decode runs, before any device work
  reader::DecodePlan own;
  const reader::DecodePlan& plan = ck.impl().plan(t, own);  // what the CPU decoders read, too
  const std::vector<uint64_t> out_shape = ck.output_shape(t, slice);
  const uint64_t need = ck.output_bytes(t, out, slice);
  const SliceMap map = slice_map(t, slice, out_shape);
  const bool sliced = map.len != map.dim || map.outer != 1 || map.inner != 1;
  if (const std::string why = plan.refusal(out, sliced); !why.empty()) cu.fail(ErrorKind::unsupported, why);
  if (dbytes < need)
    cu.fail(ErrorKind::buffer_too_small,
            "device buffer holds " + std::to_string(dbytes) + " bytes, decode needs " + std::to_string(need));
  if (need == 0) return 0;
  if (!dptr) cu.fail(ErrorKind::invalid_argument, "device pointer is null");
  // The kernels store whole elements: a misaligned pointer would fault the context, not this call.
  if (const uint64_t esz = dtype_bits(out) / 8; esz > 1 && reinterpret_cast<uintptr_t>(dptr) % esz != 0)
    cu.fail(ErrorKind::invalid_argument,
            "device pointer is not aligned to the output's " + std::to_string(esz) + "-byte elements");

  if (t.format == Format::low_rank) {  // W = B @ A: computed by the host decoder, then uploaded
    std::vector<std::byte> host(need);
    (void)ck.decode_into(t, host, out, slice);
    cu.check(cudaMemcpyAsync(dptr, host.data(), need, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    cu.check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // before `host` goes
    return need;
  }

  Staging staging(cu, ck, stream);

  if (t.format == Format::dense) {
    const TensorPart& p = *plan.main;
    if (p.dtype == out && !sliced) {  // straight through: file -> pinned -> the caller's buffer
      staging.upload(p, static_cast<uint8_t*>(dptr));
      return need;
    }
    DeviceBuffer in(cu, p.nbytes, stream);
    staging.upload(p, in.get());
    DenseJob job;
    job.in = in.get();
    job.src = p.dtype;
    job.out = out;
    job.map = map;
    const char* what = "";
    cu.check(static_cast<cudaError_t>(detail::launch_dense(job, dptr, stream, &what)), what);
    return need;
  }

  // Compressed: every stored part goes to one device allocation, each at an aligned offset.
  using format::Role;
  const format::Geometry& g = plan.geo;
  const bool sparse = plan.codes == format::Codes::sparse;
  const uint64_t mbytes = (g.cols + 7) / 8;
  uint64_t total = 0;
  std::map<const TensorPart*, uint64_t> at;  // part -> offset
  for (const TensorPart& p : t.parts) {
    at[&p] = total;
    total += (p.nbytes + kAlign - 1) / kAlign * kAlign;
  }
  const uint64_t row_start_at = total;
  if (sparse) total += ((g.rows + 1) * 8 + kAlign - 1) / kAlign * kAlign;
  const uint64_t byte_offset_at = total;
  if (sparse) total += g.rows * mbytes * 4;
  DeviceBuffer dev(cu, total, stream);
  for (const TensorPart& p : t.parts) staging.upload(p, dev.get() + at[&p]);
  auto part = [&](Role role) -> const uint8_t* {
    const TensorPart* p = plan.part(role);
    return p ? dev.get() + at[p] : nullptr;
  };

  QuantJob job;
  job.rows = g.rows;
  job.cols = g.cols;
  job.out = out;
  job.map = map;
  job.bits = g.quant.num_bits;
  job.dense_pack = !g.quant.legacy_packing;
  if (!plan.main) cu.fail(ErrorKind::corrupt_tensor, "missing main part");  // validate() refused it already
  job.kind = plan.codes;
  job.values = dev.get() + at[plan.main];
  job.value_dtype = plan.main->dtype;
  switch (plan.codes) {
    case format::Codes::packed_int: job.row_bytes = g.row_bytes; break;
    case format::Codes::byte:
    case format::Codes::e2m1:
    case format::Codes::e2m3: break;
    case format::Codes::sparse:
      job.mask = part(Role::bitmask);
      job.row_start = reinterpret_cast<uint64_t*>(dev.get() + row_start_at);
      job.byte_offset = reinterpret_cast<uint32_t*>(dev.get() + byte_offset_at);
      break;
    case format::Codes::none:
    case format::Codes::marlin:
      cu.fail(ErrorKind::unsupported, "no device decoder for format " + std::string(format_name(t.format)));
  }
  if (t.quantized) {
    const TensorPart* sp = plan.part(Role::weight_scale);
    if (!sp) cu.fail(ErrorKind::corrupt_tensor, "missing part 'weight_scale'");
    job.quantized = true;
    job.scale = part(Role::weight_scale);
    job.scale_dtype = sp->dtype;
    job.e8m0 = plan.e8m0_scale;
    job.scale_cols = g.scale.cols;
    job.group_size = g.scale.group_size;
    job.row_div = g.scale.row_div;
    job.global_scale = part(Role::weight_global_scale);
    if (const TensorPart* zp = plan.part(Role::weight_zero_point)) {
      job.zp = part(Role::weight_zero_point);
      job.zp_dtype = zp->dtype;
      job.zp_slice_rows = g.zp.slice_rows;  // packed one 2-D slice at a time (MoE experts)
      job.zp_words = g.zp.words;
    }
    job.natural = t.dtype;
    job.exact_sub = plan.int_values;
    // Act-order: the CPU decoders' own reading of weight_g_idx (a -1 anywhere: plain order).
    if (!reader::load_act_order(ck.impl(), plan).empty())
      job.gidx = reinterpret_cast<const int32_t*>(part(Role::weight_g_idx));
  }
  const char* what = "";
  cu.check(static_cast<cudaError_t>(detail::launch_quant(job, dptr, stream, &what)), what);
  return need;
}
#endif

}  // namespace

bool available() noexcept {
#if CTSTREAM_HAVE_CUDA
  return probe().ok;
#else
  return false;
#endif
}

uint64_t decode_into_device(const Checkpoint& ckpt, const TensorInfo& t, void* device_ptr, uint64_t device_bytes,
                            DType out_dtype, void* cuda_stream, const std::optional<Slice>& slice) {
  const std::string file = file_of(ckpt, t);
  return ctstream::detail::at_boundary(file, t.name, [&]() -> uint64_t {
    if (!available())
      throw Error(ErrorKind::unsupported, file, t.name, "cannot decode into device memory: " + unavailable_reason());
#if CTSTREAM_HAVE_CUDA
    const Cuda cu(file, t.name);
    return decode_device(ckpt, t, cu, device_ptr, device_bytes, out_dtype, static_cast<cudaStream_t>(cuda_stream),
                         slice);
#else
    (void)device_ptr, (void)device_bytes, (void)out_dtype, (void)cuda_stream, (void)slice;
    return 0;
#endif
  });
}

}  // namespace ctstream::cuda
