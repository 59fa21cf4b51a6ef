// ctstream demo [DIR] [--small] [--threads N] [--pread] — the default job: what ctstream is for.
//  1. generates a dense bf16 Llama-shaped model (two shards + index + config.json; its 2-D
//     weights magnitude-pruned to 50%, as a sparse model would be);
//  2. writes int4 (pack-quantized, group 128), fp8 (float-quantized, channel) and
//     sparse-bitmask versions of it with the writer;
//  3. streams every version back, tensor by tensor, into one reused caller buffer as bf16 (open,
//     decode_into, release: what an engine filling its parameters does) and checks every value
//     against the dense original: dense and sparse-bitmask exactly; int4 and fp8 within the
//     format's error (about half a quantization step, see allowed_error), and byte-equal to the
//     scalar reference kernels' decode of the same file;
//  4. prints per version: size and ratio, decode GB/s next to a memcpy of the same output bytes
//     measured in the same run, time to first tensor, and peak RSS while streaming.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "synth.hpp"

namespace fs = std::filesystem;

namespace cli {
namespace {

using ctstream::DType;
using ctstream::Format;

float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint64_t weight_bytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") n += e.file_size();
  return n;
}

struct Version {
  std::string label;  // "int4 g128"
  fs::path dir;
  Format format = Format::dense;  // of the compressed weights
};

struct Result {
  uint64_t file_bytes = 0, out_bytes = 0;
  double open_s = 0, first_s = 0, decode_s = 0, memcpy_s = 0;
  uint64_t rss = 0;
  double max_err = 0, sum_e2 = 0, sum_x2 = 0;
  uint64_t bad = 0, ref_mismatch = 0;  // values outside the bound; bytes unlike the scalar decode
  bool ref_checked = false;
  std::string first_bad;
};

// Allowed |decoded - original| of one value of a quantized weight, from the writer's schemes
// (src/writer/quantize.cpp: the library's min-max observer and round-to-nearest, in bf16):
//  int4 symmetric group: scale = bf16(absmax_g / 7.5), code = clamp(round(bf16(x / scale)), -8, 7):
//    half a step, plus the bf16 rounding of x / scale before the integer rounding (up to 2^-6 of
//    a step at |x / scale| < 8) and of the scale (2^-8), plus the output's rounding (2^-8 |x|);
//  fp8 E4M3 channel: scale = absmax_row / 448; E4M3 keeps 3 mantissa bits (half an ulp: 2^-4
//    relative, a little more after the bf16 rounding of x / scale) down to its subnormals (half
//    a step: 2^-10 * scale); plus the output's rounding.
// absmax of the row bounds absmax_g of each of its groups.
double allowed_error(Format f, double x, double row_absmax) {
  const double out_round = std::ldexp(std::fabs(x), -8);
  if (f == Format::pack_quantized) return (0.5 + 1.0 / 64) * (row_absmax / 7.5) * (1 + 1.0 / 128) + out_round;
  if (f == Format::float_quantized)
    return std::ldexp(std::fabs(x), -4) * 1.01 + std::ldexp(row_absmax / 448.0, -10) + out_round;
  return 0;  // dense, sparse-bitmask: exact
}

Result stream_back(const Version& v, const Args& a, const SynthSpec& spec) {
  Result r;
  r.file_bytes = weight_bytes(v.dir);
  const bool rss_window = reset_peak_rss();
  const double t0 = now_seconds();
  auto ckpt = ctstream::Checkpoint::open(v.dir, open_options(a));
  r.open_s = now_seconds() - t0;
  uint64_t largest = 0, total = 0;
  for (const auto& t : ckpt.tensors()) {
    largest = std::max(largest, t.decoded_bytes(DType::BF16));
    total += t.decoded_bytes(DType::BF16);
  }
  std::vector<std::byte> buf(largest), ref;  // the one reused caller buffer
  std::vector<uint16_t> want;
  Progress bar("stream " + v.label, total);
  uint64_t done = 0;
  bool first = true;
  for (const auto& t : ckpt.tensors()) {
    const double s = now_seconds();
    const uint64_t n = ckpt.decode_into(t, buf, DType::BF16);
    const double e = now_seconds();
    ckpt.release(t);  // its mapped pages leave the process, as an engine's loader does
    r.decode_s += e - s;
    if (first) r.first_s = r.open_s + (e - s), first = false;
    r.out_bytes += n;
    // Check every value against the dense original (outside the timed region).
    want.resize(t.numel());
    fill_bf16(t.name, want.size(), want.data(), t.shape.size() == 2 ? spec.prune : 0.0);
    const uint64_t cols = t.shape.empty() ? 1 : t.shape.back();
    for (uint64_t row = 0; row * cols < want.size(); ++row) {
      double absmax = 0;
      for (uint64_t i = row * cols; i < (row + 1) * cols; ++i)
        absmax = std::max(absmax, std::fabs(double(bf16_value(want[i]))));
      for (uint64_t i = row * cols; i < (row + 1) * cols; ++i) {
        uint16_t h;
        std::memcpy(&h, buf.data() + 2 * i, 2);
        const double x = bf16_value(want[i]), y = bf16_value(h), err = std::fabs(y - x);
        r.max_err = std::max(r.max_err, err);
        r.sum_e2 += err * err, r.sum_x2 += x * x;
        if (!(err <= allowed_error(t.format, x, absmax)) || (err == 0 && h != want[i])) {  // -0 vs +0 too
          if (!r.bad++)
            r.first_bad = t.name + " [" + std::to_string(i) + "]: " + std::to_string(y) + " for " + std::to_string(x);
        }
      }
    }
    done += n;
    bar.update(done);
  }
  r.rss = rss_window ? peak_rss_bytes() : 0;

  // memcpy of the same output bytes into the same buffer, in this run: the roofline.
  std::vector<std::byte> src(largest, std::byte{1});
  for (int rep = 0; rep < 2; ++rep) {  // the first pass faults the source pages in
    const double s = now_seconds();
    for (const auto& t : ckpt.tensors()) std::memcpy(buf.data(), src.data(), t.decoded_bytes(DType::BF16));
    r.memcpy_s = now_seconds() - s;
  }

  // The same file through the scalar reference kernels: the SIMD decode must be byte-equal.
  const std::string isa = ctstream::active_isa();
  if (v.format != Format::dense && isa != "scalar" && ctstream::set_active_isa("scalar")) {
    r.ref_checked = true;
    ref.resize(largest);
    for (const auto& t : ckpt.tensors()) {
      const uint64_t n = ckpt.decode_into(t, ref, DType::BF16);
      ctstream::set_active_isa(isa);
      ckpt.decode_into(t, buf, DType::BF16);
      ctstream::set_active_isa("scalar");
      r.ref_mismatch += std::memcmp(ref.data(), buf.data(), n) != 0;
    }
    ctstream::set_active_isa(isa);
  }
  return r;
}

}  // namespace

// $XDG_CACHE_HOME/ctstream/demo, else ~/.cache/ctstream/demo; without a home, a new private
// directory under the temporary directory.
namespace {
fs::path demo_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return fs::path(x) / "ctstream" / "demo";
  if (const char* h = std::getenv("HOME"); h && *h == '/') return fs::path(h) / ".cache" / "ctstream" / "demo";
  std::string tmpl = (fs::temp_directory_path() / "ctstream-demo-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("demo: cannot create a directory under " + tmpl);
  return tmpl;
}
}  // namespace

int cmd_demo(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"--pread", "--small", "--overwrite"}, {"--threads"});
  // The demo writes dense/, int4/, fp8/ and sparse-bitmask/ into DIR. Its default DIR is its own
  // (the user's cache, never a shared /tmp name someone else may have planted), replaced on each
  // run; a DIR the user names must be new or empty unless --overwrite.
  if (a.pos.size() > 1) throw std::invalid_argument("demo takes at most one DIR");
  const bool own_dir = a.pos.empty();
  const fs::path dir = own_dir ? demo_dir() : fs::path(a.pos[0]);
  const bool overwrite = own_dir || a.has("--overwrite");
  {
    std::error_code ec;
    if (!overwrite && fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
      throw std::invalid_argument(dir.string() +
                                  " is not an empty directory: the demo writes dense/, int4/, fp8/ and sparse-bitmask/ "
                                  "there (--overwrite replaces those)");
  }
  fs::create_directories(dir);
  std::printf("ctstream %s demo — ISA %s, working dir %s\n", ctstream::version_string, ctstream::active_isa(),
              dir.c_str());

  // 1. The dense model.
  SynthSpec spec;
  if (a.has("--small")) spec.layers = 2, spec.hidden = 256, spec.intermediate = 768, spec.vocab = 2048;
  else spec.layers = 4, spec.hidden = 1024, spec.intermediate = 2816, spec.vocab = 8192;
  spec.shards = 2;
  spec.prune = 0.5;
  const fs::path dense_dir = dir / "dense";
  double t = now_seconds();
  {
    Progress bar("generate dense bf16 model", 0);
    spec.progress = [&bar](uint64_t done, uint64_t total) { bar.update(done, total); };
    write_synthetic_llama(dense_dir, spec, overwrite);
    spec.progress = nullptr;
  }
  std::printf("dense model: %zu tensors, %s of bf16 (2-D weights 50%% magnitude-pruned), written in %.2f s\n",
              llama_specs(spec).size(), human_bytes(weight_bytes(dense_dir)).c_str(), now_seconds() - t);

  // 2. The compressed versions, written by the writer (ctstream compress).
  std::vector<Version> versions{{"dense bf16", dense_dir, Format::dense},
                                {"int4 g128 (pack-quantized)", dir / "int4", Format::pack_quantized},
                                {"fp8 channel (float-quant.)", dir / "fp8", Format::float_quantized},
                                {"sparse-bitmask", dir / "sparse-bitmask", Format::sparse_bitmask}};
  for (size_t i = 1; i < versions.size(); ++i) {
    ctstream::CompressOptions opt;
    opt.format = versions[i].format;
    opt.overwrite = overwrite;
    opt.compute_errors = false;  // checked below, from the decoded values
    opt.open = open_options(a);
    Progress bar("write " + versions[i].label, 0);
    opt.progress = [&bar](const ctstream::CompressProgress& p) { bar.update(p.bytes_done, p.bytes_total); };
    t = now_seconds();
    ctstream::compress_checkpoint(dense_dir, versions[i].dir, opt);
    std::printf("wrote %-28s %s in %.2f s (%s)\n", versions[i].label.c_str(),
                human_bytes(weight_bytes(versions[i].dir)).c_str(), now_seconds() - t,
                ctstream::describe_scheme(opt).c_str());
  }

  // 3. + 4. Stream each back into one reused buffer, check, measure.
  std::vector<Result> results;
  results.reserve(versions.size());
  for (const auto& v : versions) results.push_back(stream_back(v, a, spec));

  const double dense_bytes = static_cast<double>(results[0].file_bytes);
  std::printf("\nstreamed back as bf16 into one reused buffer, tensor by tensor (open + decode_into + release):\n");
  std::printf("%-27s %10s %6s %12s %12s %7s %12s %10s  %s\n", "version", "on disk", "ratio", "decode GB/s",
              "memcpy GB/s", "ratio", "1st tensor", "peak RSS", "check");
  int rc = 0;
  for (size_t i = 0; i < versions.size(); ++i) {
    const Result& r = results[i];
    const double dec = r.out_bytes / r.decode_s / 1e9, mem = r.out_bytes / r.memcpy_s / 1e9;
    std::string check;
    if (r.bad) check = "FAILED: " + std::to_string(r.bad) + " values off (first " + r.first_bad + ")", rc = 1;
    else if (versions[i].format == Format::pack_quantized || versions[i].format == Format::float_quantized)
      check = "within the bound (max err " + std::to_string(r.max_err).substr(0, 8) + ", rel. RMS " +
              std::to_string(std::sqrt(r.sum_e2 / r.sum_x2)).substr(0, 6) + ")";
    else check = "exact";
    if (r.ref_checked) {
      if (r.ref_mismatch)
        check += "; FAILED: " + std::to_string(r.ref_mismatch) + " tensors differ from the scalar reference", rc = 1;
      else check += "; = scalar reference";
    }
    std::printf("%-27s %10s %5.2fx %12.2f %12.2f %6.2fx %9.1f ms %10s  %s\n", versions[i].label.c_str(),
                human_bytes(r.file_bytes).c_str(), dense_bytes / r.file_bytes, dec, mem, dec / mem, r.first_s * 1e3,
                r.rss ? human_bytes(r.rss).c_str() : "n/a", check.c_str());
  }
  std::printf(
      "\ndecode GB/s: bf16 bytes written per second of decode_into; ratio = decode / memcpy of the same\n"
      "bytes (the copy a loader of uncompressed weights does at best). 1st tensor = open + first decode.\n"
      "Peak RSS of this process while streaming that version (the dense original used for checking\n"
      "is generated one tensor at a time). Files kept in %s.\n",
      dir.c_str());
  return rc;
}

}  // namespace cli
