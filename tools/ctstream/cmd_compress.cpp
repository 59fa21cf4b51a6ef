// ctstream compress IN OUT_DIR --format F [--bits N] [--group-size G] [--strategy S] [--block RxC]
//                   [--asymmetric] [--dtype bf16] [--targets T]... [--ignore T]... [--shard-size 5GB]
//                   [--prune-24] [--weight-only] [--no-fuse-global-scale] [--overwrite] [--no-copy]
//                   [--no-errors] [--report FILE.json] [--quiet] [--pread] [--threads N]
//                   [--rank R | --energy E]  (--format low-rank)
// Writes a compressed-tensors checkpoint (library API: include/ctstream/writer.hpp). A progress bar
// on a terminal (stderr), plain lines otherwise; a summary on stdout; the per-tensor report as
// JSON with --report. Ctrl-C stops between tensors and leaves nothing behind (exit 130).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"

namespace cli {
namespace {

/// The writer's rules on options (CompressOptions::validate, the format / strategy names) throw
/// Error{invalid_argument}; typed on the command line they are usage errors (exit 2, "see ctstream
/// --help"), as the CLI's own parse errors are.
template <class F>
auto usage_rule(F&& rule) {
  try {
    return rule();
  } catch (const ctstream::Error& e) {
    if (e.kind() != ctstream::ErrorKind::invalid_argument) throw;
    throw std::invalid_argument(e.what());
  }
}

std::string fmt_time(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const long t = std::lround(s);
  char b[32];
  if (t >= 3600) std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}

std::string fmt_db(double v) {
  if (!std::isfinite(v)) return "exact";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f dB", v);
  return b;
}

}  // namespace

const char* kHelp =
    "usage: ctstream compress IN OUT_DIR [options]\n"
    "  IN is a .safetensors file or a model directory; OUT_DIR must not exist or be empty (or --overwrite).\n"
    "  --format F            pack-quantized (default) | int-quantized | float-quantized | nvfp4-pack-quantized |\n"
    "                        mxfp4-pack-quantized | mxfp8-quantized | sparse-bitmask | sparse-24-bitmask | dense |\n"
    "                        low-rank (mx: E8M0 scales per 32 values)\n"
    "  --rank R, --energy E  low-rank (ptdeco layout): keep R singular values per weight, or the fewest that\n"
    "                        hold the fraction E of its energy (weights whose factors would not be smaller stay\n"
    "                        dense); compress the output again (e.g. int-quantized) to quantize the factors\n"
    "  --bits N              weight bits (pack/int: 1..8, default 4 / 8)\n"
    "  --strategy S          tensor | channel | group | block (default: pack group, int/float channel)\n"
    "  --group-size G        group size (default 128, MX formats 32 and only 32; implies --strategy group)\n"
    "  --block RxC           block strategy, e.g. 128x128 (float-quantized, int-quantized; implies --strategy\n"
    "                        block). A size for a strategy that does not use it is an error\n"
    "  --asymmetric          asymmetric INT quantization (zero points); --symmetric: the default\n"
    "  --weight-only         int/float-quantized without the dynamic activation scheme\n"
    "  --dtype D             convert float tensors first (required for dense: bf16 | fp16 | fp32)\n"
    "  --targets T, --ignore T   module names or re:patterns (repeatable; --target = --targets);\n"
    "                        default target Linear = 2-D weights except embeddings, norms and lm_head\n"
    "  --prune-24            sparse-24-bitmask: keep the 2 largest of every 4 (else non-2:4 tensors are an error)\n"
    "  --no-fuse-global-scale  nvfp4: per-layer global scales instead of shared q/k/v and gate/up ones\n"
    "  --shard-size SIZE     largest shard (default 5GB)\n"
    "  --report FILE.json    per-tensor sizes and quantization error (max abs, SNR dB); outside IN and\n"
    "                        OUT_DIR, an existing file replaced only with --overwrite\n"
    "  --overwrite --no-copy --no-errors --quiet --pread --threads N\n";

namespace {

/// Splits --targets / --ignore (repeatable) off argv; the rest goes to the generic parser.
std::vector<char*> collect_targets(int argc, char** argv, std::vector<std::string>& targets,
                                   std::vector<std::string>& ignore) {
  std::vector<char*> rest{argv[0], argv[1]};
  // --targets / --ignore may repeat: collect them before the generic parser sees the rest.
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    for (const char* flag : {"--targets", "--target", "--ignore"}) {
      const std::string f = flag;
      if (s == f || s.rfind(f + "=", 0) == 0) {
        std::string v;
        if (s == f) {
          if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
          v = argv[++i];
        } else {
          v = s.substr(f.size() + 1);
        }
        (f == "--ignore" ? ignore : targets).push_back(v);
        s.clear();
        break;
      }
    }
    if (!s.empty()) rest.push_back(argv[i]);
  }
  return rest;
}

/// The options a command line gives, checked by the writer's rules (usage errors, exit 2).
ctstream::CompressOptions options_from(const Args& a, std::vector<std::string> targets,
                                       std::vector<std::string> ignore) {
  ctstream::CompressOptions opt;
  opt.format = usage_rule([&] { return ctstream::writer_format_from_name(a.get("--format", "pack-quantized")); });
  // 0 is the option's "unset" inside the library: refused here rather than read as the default
  if (a.has("--bits")) opt.num_bits = static_cast<unsigned>(parse_uint("--bits", a.get("--bits"), 1, 64));
  if (a.has("--strategy"))
    opt.strategy = usage_rule([&] { return ctstream::writer_strategy_from_name(a.get("--strategy")); });
  if (a.has("--group-size")) {
    opt.group_size = parse_uint("--group-size", a.get("--group-size"));
    if (!opt.strategy) opt.strategy = ctstream::QuantStrategy::group;
  }
  if (a.has("--block")) {
    const std::string b = a.get("--block");
    const auto x = b.find('x');
    if (x == std::string::npos) throw std::invalid_argument("--block needs ROWSxCOLS, e.g. 128x128");
    opt.block_rows = parse_uint("--block", b.substr(0, x));
    opt.block_cols = parse_uint("--block", b.substr(x + 1));
    if (!opt.strategy) opt.strategy = ctstream::QuantStrategy::block;
  }
  if (a.has("--asymmetric") && a.has("--symmetric"))
    throw std::invalid_argument("--asymmetric and --symmetric exclude each other");
  opt.symmetric = !a.has("--asymmetric");
  if (a.has("--dtype")) opt.dtype = parse_dtype(a.get("--dtype"));
  if (a.has("--rank")) opt.rank = parse_uint("--rank", a.get("--rank"), 1);  // 0 would mean "not given"
  if (a.has("--energy")) {
    const std::string e = a.get("--energy");
    size_t pos = 0;
    try {
      opt.energy = std::stod(e, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != e.size() || e.empty())
      throw std::invalid_argument("--energy needs a fraction in (0, 1], got '" + e + "'");
  }
  if (a.has("--shard-size")) opt.shard_bytes = ctstream::parse_bytes(a.get("--shard-size"));
  opt.prune_24 = a.has("--prune-24");
  opt.input_activations = !a.has("--weight-only");
  opt.fuse_global_scales = !a.has("--no-fuse-global-scale");
  opt.overwrite = a.has("--overwrite");
  opt.copy_other_files = !a.has("--no-copy");
  opt.compute_errors = !a.has("--no-errors");
  opt.targets = std::move(targets);
  opt.ignore = std::move(ignore);
  opt.open = open_options(a);
  usage_rule([&] { opt.validate(); });

  return opt;
}

/// One progress line: a bar with an ETA on a terminal, plain lines otherwise (stderr).
void print_progress(const ctstream::CompressProgress& p, bool tty) {
  const bool scan = p.phase == ctstream::CompressProgress::Phase::scan;
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
                                    : static_cast<double>(p.tensors_done) / std::max<size_t>(1, p.tensors_total);
  if (tty) {
    const int width = 24;
    const int fill = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(fill), '=');
    if (fill < width) bar += '>' + std::string(static_cast<size_t>(width - fill - 1), ' ');
    const double eta = frac > 0 ? p.elapsed_s * (1 - frac) / frac : -1;
    std::string name = p.tensor.size() > 40 ? "..." + p.tensor.substr(p.tensor.size() - 37) : p.tensor;
    std::fprintf(stderr, "\r\033[K%s [%s] %zu/%zu tensors  %s/%s  ETA %s  %s", scan ? "scan " : "write", bar.c_str(),
                 p.tensors_done, p.tensors_total, human_bytes(p.bytes_done).c_str(), human_bytes(p.bytes_total).c_str(),
                 fmt_time(eta).c_str(), name.c_str());
    if (!scan && p.tensors_done == p.tensors_total) std::fprintf(stderr, "\n");
  } else {
    std::fprintf(stderr, "%s [%zu/%zu] %s/%s %s\n", scan ? "scan" : "compress", p.tensors_done, p.tensors_total,
                 human_bytes(p.bytes_done).c_str(), human_bytes(p.bytes_total).c_str(), p.tensor.c_str());
  }
  std::fflush(stderr);
}

/// The summary on stdout: files, sizes, the error of the lossy tensors, the other files.
void print_summary(const ctstream::CompressReport& rep, const ctstream::CompressOptions& opt, const std::string& out,
                   const std::string& scheme) {
  std::string counts;
  for (const auto& [k, v] : rep.format_counts) counts += (counts.empty() ? "" : ", ") + std::to_string(v) + " " + k;
  std::printf("wrote %s: %zu files, %zu tensors (%s), scheme %s, %.2f s\n", out.c_str(), rep.files.size(),
              rep.tensors.size(), counts.c_str(), scheme.c_str(), rep.seconds);
  std::printf("size: input %s -> output %s (ratio %.2fx)\n", human_bytes(rep.input_bytes).c_str(),
              human_bytes(rep.output_bytes).c_str(), rep.ratio());
  const ctstream::TensorReport* worst_err = nullptr;
  const ctstream::TensorReport* worst_snr = nullptr;
  double snr_sum = 0;
  size_t lossy = 0;
  for (const auto& t : rep.tensors) {
    if (t.exact || (t.format == ctstream::Format::dense && t.input_dtype == t.output_dtype)) continue;
    ++lossy;
    if (!worst_err || t.max_abs_error > worst_err->max_abs_error) worst_err = &t;
    if (!worst_snr || t.snr_db < worst_snr->snr_db) worst_snr = &t;
    if (std::isfinite(t.snr_db)) snr_sum += t.snr_db;
  }
  if (!opt.compute_errors) {
    std::printf("error: not measured (--no-errors)\n");
  } else if (lossy == 0) {
    std::printf("error: none, every tensor decodes to exactly its input\n");
  } else {
    std::printf("error over %zu lossy tensors: mean SNR %.1f dB; lowest SNR %s (%s); largest max|err| %.4g (%s)\n",
                lossy, snr_sum / static_cast<double>(lossy), fmt_db(worst_snr->snr_db).c_str(), worst_snr->name.c_str(),
                worst_err->max_abs_error, worst_err->name.c_str());
  }
  if (!rep.copied.empty() || !rep.skipped.empty())
    std::printf("other files: %zu copied, %zu weight files left out\n", rep.copied.size(), rep.skipped.size());
}

}  // namespace

int cmd_compress(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kHelp, stdout);
      return 0;
    }
  std::vector<std::string> targets, ignore;
  std::vector<char*> rest = collect_targets(argc, argv, targets, ignore);
  Args a = parse(static_cast<int>(rest.size()), rest.data(), 2,
                 {"--asymmetric", "--symmetric", "--prune-24", "--weight-only", "--no-fuse-global-scale", "--overwrite",
                  "--no-copy", "--no-errors", "--quiet", "--pread"},
                 {"--format", "--bits", "--group-size", "--strategy", "--block", "--dtype", "--shard-size", "--report",
                  "--threads", "--rank", "--energy"});
  if (a.pos.size() != 2) throw std::invalid_argument("compress needs IN (file or model dir) and OUT_DIR");

  ctstream::CompressOptions opt = options_from(a, std::move(targets), std::move(ignore));
  const std::string scheme = ctstream::describe_scheme(opt);  // validates the combination early

  const bool quiet = a.has("--quiet");
  const bool tty = ::isatty(2) != 0;
  if (!quiet) opt.progress = [tty](const ctstream::CompressProgress& p) { print_progress(p, tty); };
  SignalCancel signals;
  opt.cancel = signals.flag();

  // The report path is checked before the work, and again when it is written.
  if (a.has("--report")) ctstream::check_report_path(a.get("--report"), a.pos[0], a.pos[1], opt.overwrite);
  ctstream::CompressReport rep;
  try {
    rep = ctstream::compress_checkpoint(a.pos[0], a.pos[1], opt);
  } catch (const ctstream::Error& e) {
    if (signals.cancelled()) {
      if (tty && !quiet) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "ctstream compress: interrupted; no output was written\n");
      return 130;
    }
    if (tty && !quiet) std::fprintf(stderr, "\n");
    throw;
  }

  if (a.has("--report")) {
    ctstream::write_report_json(a.get("--report"), rep, opt, a.pos[0], a.pos[1]);
  }
  if (quiet) return 0;
  print_summary(rep, opt, a.pos[1], scheme);
  return 0;
}

}  // namespace cli
