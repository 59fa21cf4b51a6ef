// Every fixture decodes on the device bit-identically to the CPU decode (decode_into, itself
// checked bit-exact against the compressed-tensors / safetensors libraries by tests/unit): every
// tensor of every compressed-tensors case (ct/) and every dense fixture (st/), in its natural
// dtype and as BF16 / F16 / F32, whole and sliced along each dimension, both io modes. Where the
// CPU refuses a request, the device path must refuse it with the same error kind.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "ctstream/cuda.hpp"
#include "helpers.hpp"

using namespace ctstream;
namespace fs = std::filesystem;

namespace {

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t n) { REQUIRE(cudaMalloc(&p, n ? n : 1) == cudaSuccess); }
  ~DeviceMem() { cudaFree(p); }
};

// Compares one request; returns 1 when both sides decoded (0 when both refused alike).
int compare(const Checkpoint& ck, const TensorInfo& t, DType d, const std::optional<Slice>& s, cudaStream_t stream) {
  INFO("tensor " << t.name << " (" << format_name(t.format) << ") as " << dtype_name(d)
                 << (s ? " slice dim " + std::to_string(s->dim) + " [" + std::to_string(s->start) + ", " +
                             std::to_string(s->stop) + ")"
                       : std::string()));
  std::vector<std::byte> want;
  std::optional<ErrorKind> cpu_err;
  uint64_t n = 0;
  try {
    want.resize(ck.output_bytes(t, d, s));
    n = ck.decode_into(t, want, d, s);
  } catch (const Error& e) {
    cpu_err = e.kind();
  }
  const uint64_t cap = want.size() + 64;
  DeviceMem dev(cap);
  REQUIRE(cudaMemset(dev.p, 0xA5, cap) == cudaSuccess);
  const auto dev_err = th::error_kind([&] {
    const uint64_t m = cuda::decode_into_device(ck, t, dev.p, cap, d, stream, s);
    REQUIRE(m == n);
  });
  REQUIRE(dev_err == cpu_err);
  if (cpu_err) return 0;
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  std::vector<std::byte> got(cap);
  REQUIRE(cudaMemcpy(got.data(), dev.p, cap, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (uint64_t i = n; i < cap; ++i) REQUIRE(got[i] == std::byte{0xA5});  // nothing past the output
  got.resize(n);
  want.resize(n);
  if (got != want) {
    for (uint64_t i = 0; i < n; ++i)
      if (got[i] != want[i]) FAIL("first differing byte " << i << " of " << n);
  }
  return 1;
}

int compare_all(const Checkpoint& ck, cudaStream_t stream) {
  int done = 0;
  for (const TensorInfo& t : ck.tensors()) {
    std::vector<DType> outs = {t.dtype};
    for (DType d : {DType::BF16, DType::F16, DType::F32})
      if (d != t.dtype) outs.push_back(d);
    for (DType d : outs) {
      done += compare(ck, t, d, std::nullopt, stream);
      for (unsigned dim = 0; dim < t.shape.size(); ++dim) {
        const uint64_t len = t.shape[dim];
        done += compare(ck, t, d, Slice{dim, len / 3, len - len / 4}, stream);
        if (len > 1) done += compare(ck, t, d, Slice{dim, 1, 2}, stream);
      }
    }
  }
  return done;
}

}  // namespace

TEST_CASE("every compressed-tensors fixture decodes on the device bit-identically to the CPU", "[device][ct]") {
  cudaStream_t stream;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  const fs::path root = th::fixtures() / "ct";
  size_t cases = 0;
  int decoded = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "expected")) continue;
    INFO("case " << entry.path().filename().string());
    OpenOptions o;
    o.io = cases % 2 ? IoMode::pread : IoMode::mmap;  // both staging paths
    decoded += compare_all(Checkpoint::open(entry.path(), o), stream);
    ++cases;
  }
  CHECK(cases >= 70);
  CHECK(decoded > 1000);
  cudaStreamDestroy(stream);
}

TEST_CASE("3-D MoE experts with packed zero points decode on the device bit-identically to the CPU",
          "[device][ct][moe]") {
  // The per-expert zero-point packing (format::ZeroPointPacking) on the device path, every dim sliced.
  cudaStream_t stream;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  int decoded = 0;
  for (const char* name :
       {"w4a16_group32_asym", "w4a16_channel_asym", "w8a16_channel_asym", "v0171_w3a16_group32_asym"})
    for (IoMode io : {IoMode::mmap, IoMode::pread}) {
      INFO("case " << name);
      OpenOptions o;
      o.io = io;
      decoded += compare_all(Checkpoint::open(th::fixtures() / "ct_moe" / name, o), stream);
    }
  CHECK(decoded > 100);
  cudaStreamDestroy(stream);
}

TEST_CASE("every dense fixture decodes on the device bit-identically to the CPU", "[device][dense]") {
  size_t files = 0;
  int decoded = 0;
  for (const auto& entry : fs::recursive_directory_iterator(th::fixtures() / "st")) {
    if (entry.path().extension() != ".safetensors") continue;
    INFO("file " << entry.path().string());
    decoded += compare_all(Checkpoint::open(entry.path()), nullptr);
    ++files;
  }
  CHECK(files >= 3);
  CHECK(decoded > 50);
}

TEST_CASE("low-rank tensors decode on the device bit-identically to the CPU", "[device][lowrank]") {
  // W = B @ A is computed by the host decoder and uploaded: the device gets the CPU's bits.
  cudaStream_t stream;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  int decoded = 0;
  for (const char* name : {"bf16", "fp32"}) {
    INFO("case " << name);
    const Checkpoint ck = Checkpoint::open(th::fixtures() / "lowrank" / name);
    REQUIRE(std::any_of(ck.tensors().begin(), ck.tensors().end(),
                        [](const TensorInfo& t) { return t.format == Format::low_rank; }));
    decoded += compare_all(ck, stream);
  }
  CHECK(decoded > 50);
  cudaStreamDestroy(stream);
}

TEST_CASE("a device pointer misaligned for the output's elements is refused, not faulted on", "[device]") {
  const Checkpoint ck = Checkpoint::open(th::fixtures() / "ct" / "v012_pack_w4_g32_sym_bf16");
  const TensorInfo& t = ck.tensors()[0];
  const uint64_t need = ck.output_bytes(t, DType::F32);
  DeviceMem dev(need + 8);
  for (DType d : {DType::BF16, DType::F32}) {
    auto* odd = static_cast<char*>(dev.p) + 1;
    REQUIRE(th::error_kind([&] { (void)cuda::decode_into_device(ck, t, odd, need, d); }) ==
            ErrorKind::invalid_argument);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the context is still usable
  REQUIRE(cuda::decode_into_device(ck, t, dev.p, need + 8, DType::F32) == need);
}
