// ctstream CLI — shared helpers: argument parsing, number formatting, resource usage.
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ctstream/ctstream.hpp>

namespace cli {

/// Parsed command line: positionals plus --flag / --flag value options.
struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opt;  // "--json" -> "" for switches
  bool has(const std::string& k) const { return opt.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? def : it->second;
  }
};
/// `switches` take no value; every other --option takes the next argument. Throws on unknown.
Args parse(int argc, char** argv, int first, const std::vector<std::string>& switches,
           const std::vector<std::string>& valued);

std::string human_bytes(uint64_t n);
using ctstream::shape_str;
/// "int4 group128 asym" style summary of a tensor's scheme ("" for dense).
std::string scheme_str(const ctstream::TensorInfo& t);
/// The switches open_options() reads, which every command reading a user's checkpoint takes
/// besides its own: `own` plus these.
std::vector<std::string> with_open_switches(std::vector<std::string> own);
ctstream::OpenOptions open_options(const Args& a);
ctstream::DType parse_dtype(const std::string& s);
/// A decimal integer option value in [lo, hi], all of `v` (no sign, no trailing text, no
/// exponent); std::invalid_argument naming `flag` otherwise.
uint64_t parse_uint(const std::string& flag, const std::string& v, uint64_t lo = 0,
                    uint64_t hi = std::numeric_limits<uint64_t>::max());
/// Peak resident set size of this process so far, bytes (VmHWM since the last
/// reset_peak_rss(), else getrusage).
uint64_t peak_rss_bytes();
/// Starts a new peak-RSS window (Linux: /proc/self/clear_refs "5"); false when unsupported.
bool reset_peak_rss();
double now_seconds();
bool stdout_is_terminal();

/// A one-line progress bar on stderr for work that runs longer than a second: drawn only when
/// stderr is a terminal and only once the task has run 1 s; cleared when destroyed.
class Progress {
 public:
  Progress(std::string label, uint64_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// `total` != 0 replaces the total given at construction.
  void update(uint64_t done, uint64_t total = 0);

 private:
  std::string label_;
  uint64_t total_;
  double start_, last_ = 0;
  bool tty_, drawn_ = false;
};

/// While alive, SIGINT / SIGTERM / SIGHUP set flag(): the library stops at its next tensor and
/// removes its temporary output. A second signal removes every temporary file at once and ends
/// the process with the signal's default action. The previous handlers come back afterwards.
class SignalCancel {
 public:
  SignalCancel();
  ~SignalCancel();
  SignalCancel(const SignalCancel&) = delete;
  SignalCancel& operator=(const SignalCancel&) = delete;
  const std::atomic<bool>* flag() const noexcept;
  bool cancelled() const noexcept { return flag()->load(); }
};

int cmd_inspect(int argc, char** argv);
int cmd_decompress(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_compress(int argc, char** argv);

}  // namespace cli
