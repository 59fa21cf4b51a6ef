#include "cli.hpp"

#include <csignal>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

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
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string shape_str(const ctstream::Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string scheme_str(const ctstream::TensorInfo& t) {
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

ctstream::OpenOptions open_options(const Args& a) {
  ctstream::OpenOptions o;
  if (a.has("--pread")) o.io = ctstream::IoMode::pread;
  if (a.has("--threads")) o.threads = static_cast<unsigned>(std::stoul(a.get("--threads")));
  return o;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool stdout_is_terminal() { return ::isatty(1) != 0; }

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
