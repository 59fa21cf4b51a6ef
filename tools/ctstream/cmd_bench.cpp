// ctstream bench PATH [--threads N] [--dtype bf16|fp16|fp32] [--budget BYTES] [--repeat K] [--cold]
//                     [--arena] [--pread] [--json] [--tp RANK/SIZE [--tp-dim D]]
// Loads every tensor into one reused caller buffer, or with --arena each into its own place of one
// arena (as an engine filling its parameters would), and reports output GB/s, time to first tensor, total time and peak
// RSS (getrusage). Without --budget each tensor is decoded straight into the caller's buffer (decode_into) and then
// released (its mapped file pages leave the process); with --budget a Stream decodes ahead on a worker within that
// budget and the consumer copies each item into the caller's buffer. With --tp a tensor-parallel rank's share is loaded
// instead: of every tensor with two or more dims, the slice RANK of SIZE along dim D (0: rows, the default); other
// tensors whole. On an s3:// / https:// PATH the JSON adds what was fetched ("remote": requests, bytes, cache peak).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "cli.hpp"

namespace cli {

int cmd_bench(int argc, char** argv) {
  Args a = parse(argc, argv, 2, with_open_switches({"--json", "--cold", "--arena"}),
                 {"--threads", "--dtype", "--repeat", "--budget", "--module-classes", "--tp", "--tp-dim"});
  if (a.pos.size() != 1) throw std::invalid_argument("bench needs exactly one PATH");
  const ctstream::DType out = parse_dtype(a.get("--dtype", "bf16"));
  const int repeat = static_cast<int>(parse_uint("--repeat", a.get("--repeat", "1"), 1, 1000000));
  const bool tty = stdout_is_terminal() && !a.has("--json");
  uint64_t tp_rank = 0, tp_size = 1;
  const auto tp_dim = static_cast<uint32_t>(parse_uint("--tp-dim", a.get("--tp-dim", "0"), 0, 7));
  if (a.has("--tp-dim") && !a.has("--tp")) throw std::invalid_argument("--tp-dim needs --tp RANK/SIZE");
  if (a.has("--tp")) {
    const std::string v = a.get("--tp");
    const size_t slash = v.find('/');
    if (slash == std::string::npos) throw std::invalid_argument("--tp takes RANK/SIZE, e.g. 0/2");
    // SIZE up to 2^20 keeps rank * n (n < 2^40 elements a dim) inside 64 bits
    tp_rank = parse_uint("--tp RANK", v.substr(0, slash)),
    tp_size = parse_uint("--tp SIZE", v.substr(slash + 1), 1, 1u << 20);
    if (tp_rank >= tp_size) throw std::invalid_argument("--tp RANK/SIZE needs RANK < SIZE");
    if (a.has("--budget")) throw std::invalid_argument("--tp decodes slices directly: no --budget");
  }
  const auto tp_slice = [&](const ctstream::TensorInfo& t) -> std::optional<ctstream::Slice> {
    if (tp_size == 1 || t.shape.size() < 2 || tp_dim >= t.shape.size()) return std::nullopt;
    const uint64_t n = t.shape[tp_dim];
    return ctstream::Slice{tp_dim, tp_rank * n / tp_size, (tp_rank + 1) * n / tp_size};
  };

  const double t_open0 = now_seconds();
  auto ckpt = ctstream::Checkpoint::open(a.pos[0], open_options(a));
  const double t_open = now_seconds() - t_open0;
  // The caller's memory exists before loading starts, 64-byte aligned as a torch tensor's storage
  // is (the kernels write large outputs with non-temporal stores, which take aligned lines only):
  // one buffer of the largest tensor's size reused by every tensor, or with --arena one place per
  // tensor in an arena of the whole output, as an engine's parameters (no tensor then writes
  // where the one before it left its lines in the cache).
  const auto dtype_of = [&](const ctstream::TensorInfo& t) {  // integer tensors come out as stored
    return t.format == ctstream::Format::dense && !ctstream::is_float_output(t.dtype) ? t.dtype : out;
  };
  if (tp_size > 1 && std::none_of(ckpt.tensors().begin(), ckpt.tensors().end(), [&](const ctstream::TensorInfo& t) {
        return t.shape.size() >= 2 && tp_dim < t.shape.size();
      }))
    throw std::invalid_argument("--tp-dim " + std::to_string(tp_dim) +
                                ": no tensor of rank 2 or more has that dimension");
  uint64_t largest = 0, total = 0;
  for (const auto& t : ckpt.tensors()) {
    largest = std::max(largest, t.decoded_bytes(dtype_of(t)));
    total += (t.decoded_bytes(dtype_of(t)) + 63) / 64 * 64;
  }
  const bool arena = a.has("--arena");
  const size_t cap = (std::max<uint64_t>(arena ? total : largest, 1) + 63) / 64 * 64;
  const std::unique_ptr<std::byte, decltype(&std::free)> mem(static_cast<std::byte*>(std::aligned_alloc(64, cap)),
                                                             &std::free);
  if (!mem) throw std::bad_alloc();
  const std::span<std::byte> all(mem.get(), cap);
  std::memset(all.data(), 0, all.size());

  struct Stat {
    uint64_t tensors = 0, in = 0, out = 0;
    double secs = 0;
  };
  std::map<std::string, Stat> by_format;
  double best = 1e300, first_tensor = 0;
  uint64_t out_bytes = 0, in_bytes = 0;
  for (int it = 0; it < repeat; ++it) {
    if (a.has("--cold"))
      for (const auto& t : ckpt.tensors()) ckpt.release(t, true);  // evict from the page cache too
    by_format.clear();
    out_bytes = in_bytes = 0;
    const double t0 = now_seconds();
    size_t i = 0;
    uint64_t at = 0;  // --arena: where the next tensor goes
    std::unique_ptr<ctstream::Stream> stream;
    if (a.has("--budget")) {
      ctstream::StreamOptions so;
      so.dtype = out;
      so.budget_bytes = ctstream::parse_bytes(a.get("--budget"));
      stream = std::make_unique<ctstream::Stream>(ckpt, so);
    }
    for (const auto& t : ckpt.tensors()) {
      const ctstream::DType d = dtype_of(t);
      const std::span<std::byte> buf = arena ? all.subspan(at, t.decoded_bytes(d)) : all.first(largest);
      at += (t.decoded_bytes(d) + 63) / 64 * 64;
      const double s = now_seconds();
      uint64_t n;
      if (stream) {
        auto item = stream->next();
        n = item->data.size();
        std::memcpy(buf.data(), item->data.data(), n);
      } else {
        n = ckpt.decode_into(t, buf, d, tp_slice(t));
        ckpt.release(t);  // as an engine should: the tensor's mapped file pages leave the process
      }
      const double e = now_seconds();
      if (it == 0 && i == 0) first_tensor = t_open + (e - s);  // open + first decode, not the caller's setup
      auto& st = by_format[std::string(ctstream::format_name(t.format))];
      st.tensors++, st.in += t.stored_bytes(), st.out += n, st.secs += e - s;
      out_bytes += n, in_bytes += t.stored_bytes();
      if (tty && (++i % 16 == 0 || i == ckpt.tensors().size())) {
        std::printf("\rpass %d/%d: %zu/%zu tensors", it + 1, repeat, i, ckpt.tensors().size());
        std::fflush(stdout);
      }
    }
    best = std::min(best, now_seconds() - t0);
  }
  if (tty) std::printf("\n");
  const uint64_t rss = peak_rss_bytes();
  const unsigned threads =
      ckpt.options().threads ? ckpt.options().threads : static_cast<unsigned>(omp_get_max_threads());
  if (a.has("--json")) {
    nlohmann::ordered_json j;
    j["path"] = ckpt.name();
    j["isa"] = ctstream::active_isa();
    j["threads"] = threads;
    j["dtype"] = std::string(ctstream::dtype_name(out));
    j["mode"] = a.has("--budget") ? "stream" : "direct";
    if (a.has("--budget")) j["budget_bytes"] = ctstream::parse_bytes(a.get("--budget"));
    j["largest_tensor_bytes"] = largest;
    j["tensors"] = ckpt.tensors().size();
    j["stored_bytes"] = in_bytes;
    j["output_bytes"] = out_bytes;
    j["open_seconds"] = t_open;
    j["first_tensor_seconds"] = first_tensor;
    j["load_seconds"] = best;
    j["output_gbps"] = out_bytes / best / 1e9;
    j["peak_rss_bytes"] = rss;
    if (a.has("--tp")) j["tp"] = {{"rank", tp_rank}, {"size", tp_size}, {"dim", tp_dim}};
    if (const auto r = ckpt.remote_stats(); r.file_bytes)
      j["remote"] = {{"requests", r.requests},
                     {"bytes_fetched", r.bytes_fetched},
                     {"peak_cached_bytes", r.peak_cached_bytes},
                     {"file_bytes", r.file_bytes}};
    for (const auto& [f, st] : by_format)
      j["formats"][f] = {{"tensors", st.tensors},
                         {"stored_bytes", st.in},
                         {"output_bytes", st.out},
                         {"seconds", st.secs},
                         {"output_gbps", st.secs > 0 ? st.out / st.secs / 1e9 : 0.0}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu tensors, stored %s -> %s %s; ISA %s, threads %u\n", ckpt.name().c_str(), ckpt.tensors().size(),
              human_bytes(in_bytes).c_str(), human_bytes(out_bytes).c_str(),
              std::string(ctstream::dtype_name(out)).c_str(), ctstream::active_isa(), threads);
  std::printf(
      "open %.2f ms, first tensor %.2f ms (open + its decode), load %.3f s (best of %d) = %.2f GB/s output, "
      "peak RSS %s\n",
      t_open * 1e3, first_tensor * 1e3, best, repeat, out_bytes / best / 1e9, human_bytes(rss).c_str());
  if (const auto r = ckpt.remote_stats(); r.file_bytes)
    std::printf("remote: %llu requests, %s fetched of %s (%.2fx), read-ahead cache peak %s\n",
                static_cast<unsigned long long>(r.requests), human_bytes(r.bytes_fetched).c_str(),
                human_bytes(r.file_bytes).c_str(), static_cast<double>(r.bytes_fetched) / r.file_bytes,
                human_bytes(r.peak_cached_bytes).c_str());
  std::printf("%-22s %8s %12s %12s %10s\n", "format", "tensors", "stored", "output", "GB/s");
  for (const auto& [f, st] : by_format)
    std::printf("%-22s %8llu %12s %12s %10.2f\n", f.c_str(), static_cast<unsigned long long>(st.tensors),
                human_bytes(st.in).c_str(), human_bytes(st.out).c_str(), st.secs > 0 ? st.out / st.secs / 1e9 : 0.0);
  return 0;
}

}  // namespace cli
