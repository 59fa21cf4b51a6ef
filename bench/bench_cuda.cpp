// ctstream_bench_cuda: a whole checkpoint decoded into GPU memory, against the link it crosses.
//
//   ctstream_bench_cuda [--reps N] [--pread] CKPT...
//
// For each checkpoint (files warm in the page cache: read once before timing), every tensor is
// decoded by ctstream::cuda::decode_into_device into one device arena in its natural dtype, on one
// stream, and the stream synchronised: "load" is the wall time until the whole model is in device
// memory. The same run measures the yardsticks on this machine:
//   h2d(stored)  pinned host -> device copy of as many bytes as the checkpoint stores
//                (the link's limit for the bytes ctstream moves: load / h2d(stored) = 1 is the roofline)
//   h2d(output)  the same for the decoded size (what copying an uncompressed model would cost at
//                best: load < h2d(output) means the compressed load beats the dense copy)
//   pread        the checkpoint's stored bytes read from the warm page cache into pinned memory on
//                one thread (the host side of the staging path)
// Medians of --reps runs (default 5) after one warm-up. Prints one Markdown row per checkpoint.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ctstream/ctstream.hpp"
#include "ctstream/cuda.hpp"

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <class F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

void warm(const ctstream::Checkpoint& ck) {
  std::vector<char> buf(64 << 20);
  for (const auto& f : ck.files()) {
    std::ifstream in(f, std::ios::binary);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    }
  }
}

constexpr uint64_t kAlign = 256;
uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  ctstream::OpenOptions opt;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--pread") opt.io = ctstream::IoMode::pread;
    else paths.push_back(a);
  }
  if (paths.empty()) {
    std::fprintf(stderr, "usage: %s [--reps N] [--pread] CKPT...\n", argv[0]);
    return 2;
  }
  if (!ctstream::cuda::available()) {
    std::puts("SKIP: no usable CUDA device");
    return 4;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s; medians of %d runs; io %s\n\n", prop.name, reps,
              opt.io == ctstream::IoMode::pread ? "pread" : "mmap");
  std::puts(
      "| checkpoint | tensors | stored GiB | output GiB | load s | output GB/s | h2d(stored) s | load / h2d(stored) | "
      "h2d(output) s | h2d(output) / load | pread 1t s |");
  std::puts("|---|---|---|---|---|---|---|---|---|---|---|");

  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (const std::string& path : paths) {
    const auto ck = ctstream::Checkpoint::open(path, opt);
    uint64_t stored = 0, out = 0;
    for (const auto& t : ck.tensors()) {
      for (const auto& p : t.parts) stored += p.nbytes;
      out += align_up(ck.output_bytes(t, t.dtype));
    }
    warm(ck);
    void* arena = nullptr;
    check(cudaMalloc(&arena, out), "cudaMalloc arena");
    const double load = median_seconds(reps, [&] {
      uint64_t off = 0;
      for (const auto& t : ck.tensors()) {
        const uint64_t n = ck.output_bytes(t, t.dtype);
        ctstream::cuda::decode_into_device(ck, t, static_cast<char*>(arena) + off, n, t.dtype, stream);
        off += align_up(n);
      }
      check(cudaStreamSynchronize(stream), "sync");
    });

    // Yardsticks: pinned -> device copies of the stored and output sizes, in 64 MiB pieces.
    const uint64_t host_bytes = std::max(stored, out);
    void* pinned = nullptr;
    check(cudaMallocHost(&pinned, host_bytes), "cudaMallocHost");
    std::memset(pinned, 1, host_bytes);
    auto h2d = [&](uint64_t bytes) {
      return median_seconds(reps, [&] {
        for (uint64_t off = 0; off < bytes; off += 64ull << 20) {
          const uint64_t n = std::min<uint64_t>(64ull << 20, bytes - off);
          check(cudaMemcpyAsync(static_cast<char*>(arena) + off, static_cast<char*>(pinned) + off, n,
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync");
        }
        check(cudaStreamSynchronize(stream), "sync");
      });
    };
    const double h2d_stored = h2d(std::min(stored, out));
    const double h2d_out = h2d(out);
    const double pread1 = median_seconds(reps, [&] {
      uint64_t off = 0;
      for (const auto& t : ck.tensors())
        for (const auto& p : t.parts) {
          (void)ck.read_part(p, std::span<std::byte>(static_cast<std::byte*>(pinned) + off, p.nbytes));
          off += p.nbytes;
        }
    });
    check(cudaFreeHost(pinned), "cudaFreeHost");
    check(cudaFree(arena), "cudaFree");
    const double gib = 1024.0 * 1024 * 1024;
    std::printf("| %s | %zu | %.3f | %.3f | %.4f | %.1f | %.4f | %.2f | %.4f | %.2f | %.4f |\n", path.c_str(),
                ck.tensors().size(), stored / gib, out / gib, load, out / load / 1e9, h2d_stored, load / h2d_stored,
                h2d_out, h2d_out / load, pread1);
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return 0;
}
