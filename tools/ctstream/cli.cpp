#include "cli.hpp"

#include <csignal>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace cli {

Args parse(int argc, char** argv, int first, const std::vector<std::string>& switches,
           const std::vector<std::string>& valued) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0 && s.size() > 2) {
      std::string val;
      if (auto eq = s.find('='); eq != std::string::npos) {
        val = s.substr(eq + 1);
        s = s.substr(0, eq);
      }
      if (std::find(switches.begin(), switches.end(), s) != switches.end()) {
        a.opt[s] = "";
      } else if (std::find(valued.begin(), valued.end(), s) != valued.end()) {
        if (val.empty()) {
          if (i + 1 >= argc) throw std::invalid_argument(s + " needs a value");
          val = argv[++i];
        }
        a.opt[s] = val;
      } else {
        throw std::invalid_argument("unknown option " + s);
      }
    } else {
      a.pos.push_back(s);
    }
  }
  return a;
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string scheme_str(const ctstream::TensorInfo& t) {
  if (t.format == ctstream::Format::low_rank && t.factors.size() == 2) {
    std::string s = "rank " + std::to_string(t.factors[0].shape.at(0));
    for (const auto& f : t.factors)
      if (f.format != ctstream::Format::dense) return s + ", factors " + scheme_str(f);
    return s;
  }
  if (!t.quantized) return "";
  const auto& q = t.quant;
  std::string s = (q.type == ctstream::QuantType::int_ ? "int" : "fp") + std::to_string(q.num_bits) + " " +
                  std::string(ctstream::strategy_name(q.strategy));
  if (q.strategy == ctstream::QuantStrategy::group || q.strategy == ctstream::QuantStrategy::tensor_group)
    s += std::to_string(q.group_size);
  if (q.strategy == ctstream::QuantStrategy::block)
    s += std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols);
  s += q.symmetric ? " sym" : " asym";
  if (q.actorder) s += " actorder";
  return s;
}

ctstream::DType parse_dtype(const std::string& s) {
  auto d = ctstream::dtype_from_user(s);
  if (!d || !ctstream::is_float_output(*d))
    throw std::invalid_argument("--dtype must be bf16, fp16 or fp32, got '" + s + "'");
  return *d;
}

uint64_t parse_uint(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
  size_t pos = 0;
  unsigned long long n = 0;
  const bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); });
  try {
    if (digits) n = std::stoull(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (!digits || pos != v.size()) throw std::invalid_argument(flag + " needs a non-negative integer, got '" + v + "'");
  if (n < lo || n > hi)
    throw std::invalid_argument(flag + " " + v + " is out of range (" + std::to_string(lo) + ".." + std::to_string(hi) +
                                ")");
  return n;
}

std::vector<std::string> with_open_switches(std::vector<std::string> own) {
  for (const char* s : {"--pread", "--stored-factors", "--stored-entries", "--file-alone"}) own.emplace_back(s);
  return own;
}

ctstream::OpenOptions open_options(const Args& a) {
  ctstream::OpenOptions o;
  if (a.has("--pread")) o.io = ctstream::IoMode::pread;
  if (a.has("--stored-factors")) o.low_rank = ctstream::LowRank::stored;
  if (a.has("--stored-entries")) o.stored_entries = true;  // the file's entries as safetensors reads them
  if (a.has("--file-alone")) o.sibling_shards = false;     // one shard without the parts the index puts elsewhere
  if (a.has("--threads"))
    o.threads = static_cast<unsigned>(parse_uint("--threads", a.get("--threads"), 0, ctstream::kMaxThreads));
  if (a.has("--module-classes")) {
    // {"model.layers.0.mlp.up_proj": ["Linear", "Module"], ...}: type(m).__mro__ names per module.
    o.module_classes = ctstream::module_classes_from_file(a.get("--module-classes"), o.max_json_bytes);
  }
  return o;
}

uint64_t peak_rss_bytes() {
  // VmHWM follows clear_refs resets; ru_maxrss never goes down.
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return kb * 1024;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

bool reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool stdout_is_terminal() { return ::isatty(1) != 0; }

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), start_(now_seconds()), tty_(::isatty(2) != 0) {}

Progress::~Progress() {
  if (drawn_) std::fprintf(stderr, "\r\033[K"), std::fflush(stderr);
}

void Progress::update(uint64_t done, uint64_t total) {
  if (total) total_ = total;
  if (!tty_) return;
  const double t = now_seconds();
  if (t - start_ < 1.0 || (t - last_ < 0.1 && done < total_)) return;
  last_ = t;
  const double frac = total_ ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total_)) : 1.0;
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(fill), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r\033[K%-28s [%s] %3.0f%%  %.1f s", label_.c_str(), bar.c_str(), frac * 100, t - start_);
  std::fflush(stderr);
  drawn_ = true;
}

namespace {
std::atomic<bool> g_cancel{false};
volatile std::sig_atomic_t g_signals = 0;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_old[3];
extern "C" void on_cancel_signal(int sig) {
  g_cancel.store(true);
  g_signals = g_signals + 1;
  if (g_signals >= 2) {  // asked twice: stop now, leaving no temporary file behind
    ctstream::remove_temporary_outputs();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}
}  // namespace

SignalCancel::SignalCancel() {
  g_cancel = false;
  g_signals = 0;
  struct sigaction sa {};
  sa.sa_handler = on_cancel_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &g_old[i]);
}
SignalCancel::~SignalCancel() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_old[i], nullptr);
}
const std::atomic<bool>* SignalCancel::flag() const noexcept { return &g_cancel; }

}  // namespace cli
