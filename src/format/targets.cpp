#include "format/targets.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <new>

namespace ctstream::format {

namespace {
struct Pcre2CodeFree {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
}  // namespace

struct TargetList::Compiled {
  explicit Compiled(const RE2::Options& o) : set(o, RE2::ANCHOR_START) {}
  RE2::Set set;
  size_t re2_patterns = 0;  // patterns in `set` (none: it is never compiled nor matched)
  struct Backtracking {     // a pattern RE2 refuses, on PCRE2
    std::unique_ptr<pcre2_code, Pcre2CodeFree> code;
    size_t entry = 0;  // entry index (the last of equal patterns)
  };
  std::vector<Backtracking> pcre;                     // sorted by pattern text: tried only while one could win
  size_t pcre_bytes = 0;                              // compiled + JIT code of `pcre`
  mutable std::atomic<uint64_t> pcre_work{0};         // step limits charged so far
  size_t program = 0;                                 // instructions of the distinct patterns
  mutable std::atomic<uint64_t> work{0};              // name bytes x program matched so far
  std::vector<size_t> entry;                          // set index -> entry index (the last of equal patterns)
  std::unordered_map<std::string, size_t> set_index;  // pattern text -> set index (PCRE2: kPcreIndex + index)
};

namespace {
RE2::Options re2_options(int64_t max_mem) {
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(max_mem);
  return o;
}
// The whole set: its program (at most kMaxProgramSize instructions) and its DFA cache.
constexpr int64_t kSetMemory = int64_t{64} << 20;
// One pattern compiled alone, to check its syntax and measure it: RE2 stops compiling a program
// that outgrows this (about a tenth of it in instructions), so a huge pattern costs no time.
constexpr int64_t kPatternMemory = int64_t{8} << 20;
// set_index values from here on name a PCRE2 pattern (value - kPcreIndex), below an RE2 one.
constexpr size_t kPcreIndex = SIZE_MAX / 2;

std::string shortened(std::string_view s) {
  return s.size() <= 80 ? std::string(s) : std::string(s.substr(0, 80)) + "...";
}

// ---- PCRE2: patterns RE2 refuses, read as Python's `re` reads them (Lib/re/_parser.py) ----------

// A pattern Python's `re` and PCRE2 would read differently: refused with this reason.
struct Refused {
  std::string why;
};

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's `\s` on str: the characters str.isspace() accepts (_sre's SRE_UNI_IS_SPACE), spelled
// out because PCRE2_UCP's `\s` differs (it lacks \x1c-\x1f and has U+180E).
constexpr std::string_view kPythonSpace =
    "\\t\\n\\x0b\\f\\r\\x1c-\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}"
    "\\x{3000}";

// `\x..`, `\u....`, `\U........` (Python's fixed-width escapes) from p[i] (the letter) as PCRE2's
// `\x{...}`; i is left on the last digit.
std::string hex_escape(std::string_view p, size_t& i) {
  const size_t n = p[i] == 'x' ? 2 : p[i] == 'u' ? 4 : 8;
  if (i + n >= p.size()) throw Refused{"incomplete \\" + std::string(1, p[i]) + " escape"};
  for (size_t k = 1; k <= n; ++k)
    if (!is_hex(p[i + k])) throw Refused{"incomplete \\" + std::string(1, p[i]) + " escape"};
  std::string out = "\\x{" + std::string(p.substr(i + 1, n)) + "}";
  i += n;
  return out;
}

// The PCRE2 spelling of Python pattern `p`, walking it as Python's parser does; throws Refused for
// anything the two engines would not read alike (or that Python itself refuses and PCRE2 takes).
std::string python_pcre2(std::string_view p) {
  struct Group {
    bool capture = false, lookbehind = false, assertion = false;
    int number = 0;
    std::string name;
  };
  std::vector<Group> open;
  std::vector<int> closed;  // capture numbers closed so far
  std::vector<std::string> closed_names;
  int groups = 0;
  // What a quantifier here would repeat: nothing (start, `(`, `|`, a comment), an item, an
  // assertion (`^ $ \A \Z \b \B`, lookaround: Python says "nothing to repeat"), or a quantifier.
  enum class Last { none, item, assertion, quantifier } last = Last::none;
  std::string out;
  const auto in_lookbehind = [&] {
    return std::any_of(open.begin(), open.end(), [](const Group& g) { return g.lookbehind; });
  };
  const auto backref = [&](int n) {
    if (in_lookbehind()) throw Refused{"a group reference inside a lookbehind"};
    if (std::find(closed.begin(), closed.end(), n) == closed.end())
      throw Refused{"a reference to a group not closed before it"};
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (c == '{') {  // only {n} {n,} {n,m}: Python reads {,n} as {0,n} and PCRE2 10.42 as text
        size_t j = i + 1;
        while (j < p.size() && is_digit(p[j])) ++j;
        const bool lo = j > i + 1;
        if (j < p.size() && p[j] == ',') {
          ++j;
          while (j < p.size() && is_digit(p[j])) ++j;
        }
        if (!lo || j >= p.size() || p[j] != '}') throw Refused{"a '{' that is not a {n}, {n,} or {n,m} repeat"};
        if (last != Last::item) throw Refused{"a repeat of nothing, of an assertion or of a repeat"};
        out.append(p.substr(i, j + 1 - i));
        i = j;
      } else {
        if (last != Last::item) throw Refused{"a repeat of nothing, of an assertion or of a repeat"};
        out += c;
      }
      if (i + 1 < p.size() && (p[i + 1] == '?' || p[i + 1] == '+')) out += p[++i];  // lazy; possessive (3.11)
      last = Last::quantifier;
      continue;
    }
    switch (c) {
      case '|':
        if (!open.empty() && open.back().lookbehind)
          throw Refused{"alternation at the top of a lookbehind (Python needs one fixed width)"};
        out += c;
        last = Last::none;
        break;
      case '^':
      case '$':
        out += c;
        last = Last::assertion;
        break;
      case ')': {
        if (open.empty()) throw Refused{"an unbalanced ')'"};
        const Group g = open.back();
        open.pop_back();
        if (g.capture) closed.push_back(g.number);
        if (!g.name.empty()) closed_names.push_back(g.name);
        out += c;
        last = g.assertion ? Last::assertion : Last::item;
        break;
      }
      case '(': {
        Group g;
        if (i + 1 < p.size() && p[i + 1] == '?') {
          const std::string_view rest = p.substr(i + 2);
          size_t len = 0;  // bytes of the group's opening after "(?"
          if (rest.starts_with(":") || rest.starts_with(">")) {
            len = 1;
          } else if (rest.starts_with("=") || rest.starts_with("!")) {
            len = 1, g.assertion = true;
          } else if (rest.starts_with("<=") || rest.starts_with("<!")) {
            len = 2, g.assertion = g.lookbehind = true;
          } else if (rest.starts_with("P<") || rest.starts_with("P=")) {
            const size_t end = rest.find(rest[1] == '<' ? '>' : ')');
            const std::string_view name = rest.substr(2, end == std::string_view::npos ? 0 : end - 2);
            const bool ok = !name.empty() && name.size() <= 32 && !is_digit(name[0]) &&
                            std::all_of(name.begin(), name.end(), [](char ch) {
                              return ch == '_' || std::isalnum(static_cast<unsigned char>(ch)) != 0;
                            });
            if (!ok) throw Refused{"a group name that is not an ASCII identifier of at most 32 bytes"};
            if (rest[1] == '=') {
              if (in_lookbehind()) throw Refused{"a group reference inside a lookbehind"};
              if (std::find(closed_names.begin(), closed_names.end(), name) == closed_names.end())
                throw Refused{"a reference to a group not closed before it"};
              out.append(p.substr(i, 2 + end + 1));
              i += 2 + end;
              last = Last::item;
              break;
            }
            len = end + 1, g.capture = true, g.number = ++groups, g.name = std::string(name);
          } else if (rest.starts_with("#")) {
            const size_t end = rest.find(')');
            if (end == std::string_view::npos) throw Refused{"an unterminated comment"};
            i += 2 + end;  // dropped: a repeat right after it is refused, as `last` says nothing
            last = Last::none;
            break;
          } else {
            // Inline flags: `m` and `s` only (`i` folds non-ASCII case differently, `x` `a` `L` `u`
            // are not PCRE2's or not alike); global ones only at the very start (Python 3.11).
            size_t j = 0;
            while (j < rest.size() && (rest[j] == 'm' || rest[j] == 's')) ++j;
            if (j < rest.size() && rest[j] == '-') {
              const size_t on = j++;
              while (j < rest.size() && (rest[j] == 'm' || rest[j] == 's')) ++j;
              if (j == on + 1) throw Refused{"an inline flag group ctstream does not take (only m and s)"};
              if (j >= rest.size() || rest[j] != ':') throw Refused{"flags turned off outside a group"};
            }
            if (j == 0 && (rest.empty() || rest[0] != ':'))
              throw Refused{"a (? construct Python's re and PCRE2 do not read alike"};
            if (j < rest.size() && rest[j] == ')') {
              if (i != 0) throw Refused{"global flags not at the start of the pattern"};
              out.append(p.substr(0, j + 3));
              i += j + 2;
              last = Last::none;
              break;
            }
            if (j >= rest.size() || rest[j] != ':')
              throw Refused{"an inline flag group ctstream does not take (only m and s)"};
            len = j + 1;
          }
          out.append(p.substr(i, 2 + len));
          i += 1 + len;
        } else {
          g.capture = true, g.number = ++groups;
          out += c;
        }
        open.push_back(std::move(g));
        last = Last::none;
        break;
      }
      case '[': {
        out += c;
        size_t j = i + 1;
        if (j < p.size() && p[j] == '^') out += p[j++];
        if (j < p.size() && p[j] == ']') out += p[j++];  // a leading ']' is a literal in both
        bool closed_set = false;
        for (; j < p.size(); ++j) {
          const char d = p[j];
          if (d == ']') {
            out += d, closed_set = true;
            break;
          }
          if (d == '[') throw Refused{"'[' inside a set (POSIX classes in PCRE2, a nested set to come in Python)"};
          if (d != '\\') {
            out += d;
            continue;
          }
          if (++j >= p.size()) throw Refused{"a trailing backslash"};
          const char e = p[j];
          if (e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's') {
            // Python refuses a range to or from a class (`[\d-z]`); PCRE2 reads '-' as text
            if ((out.size() >= 2 && out.back() == '-' && out[out.size() - 2] != '[') ||
                (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']'))
              throw Refused{"a range to or from a class escape in a set"};
            if (e == 's') out += kPythonSpace;
            else out += '\\', out += e;
          } else if (e == 'x' || e == 'u' || e == 'U') {
            out += hex_escape(p, j);
          } else if (e == 'b') {
            out += "\\x08";  // backspace in a set, in both
          } else if (e == 'v') {
            out += "\\x0b";  // Python's vertical tab; PCRE2's \v is a class
          } else if (e == 'a' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            out += '\\', out += e;
          } else if (std::isalnum(static_cast<unsigned char>(e)) != 0) {
            throw Refused{std::string("the escape \\") + e + " in a set"};
          } else {
            out += '\\', out += e;
          }
        }
        if (!closed_set) throw Refused{"an unterminated set"};
        i = j;
        last = Last::item;
        break;
      }
      case '\\': {
        if (++i >= p.size()) throw Refused{"a trailing backslash"};
        const char e = p[i];
        last = Last::item;
        if (e == 'A' || e == 'b' || e == 'B') {
          out += '\\', out += e, last = Last::assertion;
        } else if (e == 'Z') {
          out += "\\z", last = Last::assertion;  // Python's \Z is the very end; PCRE2's \Z allows a final \n
        } else if (e == 'd' || e == 'D' || e == 'w' || e == 'W') {
          out += '\\', out += e;
        } else if (e == 's' || e == 'S') {
          out += e == 's' ? "[" : "[^", out += kPythonSpace, out += ']';
        } else if (e == 'x' || e == 'u' || e == 'U') {
          out += hex_escape(p, i);
        } else if (e == 'v') {
          out += "\\x0b";
        } else if (e == 'a' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
          out += '\\', out += e;
        } else if (e >= '1' && e <= '9' && (i + 1 >= p.size() || !is_digit(p[i + 1]))) {
          backref(e - '0');
          out += "\\g{", out += e, out += '}';
        } else if (std::isalnum(static_cast<unsigned char>(e)) != 0) {
          throw Refused{std::string("the escape \\") + e + (is_digit(e) ? "... (octal or a group past 9)" : "")};
        } else {
          out += '\\', out += e;  // an escaped punctuation or non-ASCII character: itself, in both
        }
        break;
      }
      default: out += c; last = Last::item;
    }
  }
  if (!open.empty()) throw Refused{"an unclosed '('"};
  return out;
}

// PCRE2 limits for one match. Steps: the match limit (kMaxBacktrackSteps at most); the
// interpreter's backtracking depth and heap (frames of the pattern's size), and the JIT's stack.
constexpr uint32_t kFirstSteps = 256;
constexpr uint32_t kDepthLimit = 100000;
constexpr uint32_t kHeapLimitKiB = 16 * 1024;
constexpr size_t kJitStackBytes = size_t{1} << 20;

// Per thread: the match context (limits change per call) and the JIT stack (not shareable).
struct Pcre2Scratch {
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit = pcre2_jit_stack_create(32 * 1024, kJitStackBytes, nullptr);
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);  // a match is rc >= 0, whatever the groups
  Pcre2Scratch() {
    if (!ctx || !data) throw std::bad_alloc();
    if (jit) pcre2_jit_stack_assign(ctx, nullptr, jit);  // without one, JIT uses 32 KiB on the machine stack
    pcre2_set_depth_limit(ctx, kDepthLimit);
    pcre2_set_heap_limit(ctx, kHeapLimitKiB);
  }
  ~Pcre2Scratch() {
    pcre2_match_data_free(data);
    pcre2_jit_stack_free(jit);
    pcre2_match_context_free(ctx);
  }
  Pcre2Scratch(const Pcre2Scratch&) = delete;
  Pcre2Scratch& operator=(const Pcre2Scratch&) = delete;
};

std::string pcre2_message(int rc) {
  PCRE2_UCHAR buf[256];
  return pcre2_get_error_message(rc, buf, sizeof buf) < 0 ? "PCRE2 error " + std::to_string(rc)
                                                          : std::string(reinterpret_cast<const char*>(buf));
}

// Compiles `python` (a pattern RE2 refused) for PCRE2, or says why not.
std::unique_ptr<pcre2_code, Pcre2CodeFree> compile_pcre2(const std::string& python, std::string& why) {
  std::string spelled;
  try {
    spelled = python_pcre2(python);
  } catch (const Refused& r) {
    why = r.why;
    return nullptr;
  }
  std::unique_ptr<pcre2_compile_context, decltype(&pcre2_compile_context_free)> cc(
      pcre2_compile_context_create(nullptr), &pcre2_compile_context_free);
  if (!cc) throw std::bad_alloc();
  pcre2_set_newline(cc.get(), PCRE2_NEWLINE_LF);  // `.` and `$` see only \n as a line end, as Python
  pcre2_set_max_pattern_length(cc.get(), 16 * kMaxPatternBytes);
  int err = 0;
  PCRE2_SIZE at = 0;
  // Anchored at the start only (re.match); UTF-8 names with Unicode \d \w \b (Python's str
  // patterns); `$` also before a final newline (no DOLLAR_ENDONLY), as Python's.
  std::unique_ptr<pcre2_code, Pcre2CodeFree> code(pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(),
      PCRE2_ANCHORED | PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C, &err, &at, cc.get()));
  if (!code) {
    why = pcre2_message(err);
    return nullptr;
  }
  (void)pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);  // without JIT (no support, no memory): the interpreter
  return code;
}
}  // namespace

TargetList::TargetList() = default;

TargetList TargetList::parse(const std::vector<std::string>& entries, ErrorKind kind, const std::string& file,
                             const std::string& what) {
  TargetList l;
  l.kind_ = kind, l.file_ = file, l.what_ = what;
  std::shared_ptr<Compiled> c;
  size_t program = 0;  // instructions of the distinct patterns so far
  for (const std::string& s : entries) {
    Target t;
    if (s.rfind("re:", 0) == 0) {
      t.kind = Target::Kind::regex;
      t.text = s.substr(3);
      if (t.text.size() > kMaxPatternBytes)
        throw Error(kind, file, "",
                    what + " pattern of " + std::to_string(t.text.size()) + " bytes is longer than the " +
                        std::to_string(kMaxPatternBytes) + "-byte limit");
      if (!c) c = std::make_shared<Compiled>(re2_options(kSetMemory));
      if (auto same = c->set_index.find(t.text); same != c->set_index.end()) {
        // equal patterns: the later entry decides
        if (same->second >= kPcreIndex)
          c->pcre[same->second - kPcreIndex].entry = l.targets_.size(), t.backtracking = true;
        else c->entry[same->second] = l.targets_.size();
      } else {
        if (c->entry.size() + c->pcre.size() >= kMaxPatterns)
          throw Error(kind, file, "", what + " holds more than " + std::to_string(kMaxPatterns) + " re: patterns");
        const RE2 one(t.text, re2_options(kPatternMemory));
        std::string err;
        if (one.ok()) program += static_cast<size_t>(std::max(0, one.ProgramSize()));
        if (one.error_code() == RE2::ErrorPatternTooLarge || program > kMaxProgramSize)
          throw Error(kind, file, "",
                      what + " re: patterns compile to more than " + std::to_string(kMaxProgramSize) +
                          " RE2 instructions (at '" + shortened(t.text) + "')");
        if (one.ok()) {
          if (c->set.Add(t.text, &err) < 0)
            throw Error(kind, file, "",
                        what + " pattern '" + shortened(t.text) + "' is not a regular expression ctstream can match (" +
                            err + ")");
          c->set_index.emplace(t.text, c->entry.size());
          c->entry.push_back(l.targets_.size());
          ++c->re2_patterns;
        } else {  // lookaround, backreferences, ...: bounded backtracking
          std::string why;
          auto code = compile_pcre2(t.text, why);
          if (!code)
            throw Error(kind, file, "",
                        what + " pattern '" + shortened(t.text) + "' is not a regular expression ctstream can match (" +
                            one.error() + "; and for backtracking: " + why +
                            "; ctstream takes Python's re syntax, less what Python's re and PCRE2 read differently)");
          size_t bytes = 0, jit = 0;
          (void)pcre2_pattern_info(code.get(), PCRE2_INFO_SIZE, &bytes);
          (void)pcre2_pattern_info(code.get(), PCRE2_INFO_JITSIZE, &jit);
          if ((c->pcre_bytes += bytes + jit) > static_cast<size_t>(kSetMemory))
            throw Error(kind, file, "",
                        what + " re: patterns compile to more than " + std::to_string(kSetMemory >> 20) +
                            " MiB for PCRE2 (at '" + shortened(t.text) + "')");
          t.backtracking = true;
          c->set_index.emplace(t.text, kPcreIndex + c->pcre.size());
          c->pcre.push_back({std::move(code), l.targets_.size()});
        }
      }
    } else if (!s.empty() && std::isupper(static_cast<unsigned char>(s[0])) && s.find('.') == std::string::npos) {
      t.kind = Target::Kind::class_name;  // "Linear", "Embedding", "LlamaDecoderLayer", ...
      t.text = s;
      l.classes_.push_back(l.targets_.size());
    } else {
      t.text = s;
      l.names_[s] = l.targets_.size();
    }
    l.targets_.push_back(std::move(t));
  }
  if (c) {
    c->program = program;
    std::sort(c->pcre.begin(), c->pcre.end(), [&l](const Compiled::Backtracking& a, const Compiled::Backtracking& b) {
      return l.targets_[a.entry].text < l.targets_[b.entry].text;
    });
    if (c->re2_patterns > 0 && !c->set.Compile())
      throw Error(kind, file, "", what + " patterns are too large to compile together (RE2 memory limit)");
    l.patterns_ = std::move(c);
  }
  // Class names in precedence order (alphabetical; equal names: the later entry first), so that
  // the first one a module counts as decides: one step for the reader, which counts every one.
  std::stable_sort(l.classes_.begin(), l.classes_.end(), [&l](size_t a, size_t b) {
    const std::string &ta = l.targets_[a].text, &tb = l.targets_[b].text;
    return ta < tb || (ta == tb && a > b);
  });
  return l;
}

bool TargetList::backtrack_match(size_t pcre_index, std::string_view module) const {
  const Compiled::Backtracking& b = patterns_->pcre[pcre_index];
  thread_local Pcre2Scratch scratch;
  const std::string& pattern = targets_[b.entry].text;
  // Step limits grow x4 from kFirstSteps: each match is charged at most ~5x the steps it took, so
  // the list's budget counts work done, not the worst case of every name.
  for (uint64_t steps = kFirstSteps;; steps *= 4) {
    steps = std::min(steps, kMaxBacktrackSteps);
    if (patterns_->pcre_work.fetch_add(steps) + steps > kMaxBacktrackWork)
      throw Error(kind_, file_, shortened(module),
                  "matching module names against " + what_ + " re: patterns would pass the backtracking budget of " +
                      std::to_string(kMaxBacktrackWork) + " steps (at '" + shortened(pattern) +
                      "'): use patterns RE2 can match (no lookaround or backreferences) or fewer names");
    pcre2_set_match_limit(scratch.ctx, static_cast<uint32_t>(steps));
    const int rc = pcre2_match(b.code.get(), reinterpret_cast<PCRE2_SPTR>(module.data()), module.size(), 0, 0,
                               scratch.data, scratch.ctx);
    if (rc >= 0) return true;
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc == PCRE2_ERROR_MATCHLIMIT && steps < kMaxBacktrackSteps) continue;
    const bool limit = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
                       rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_NOMEMORY;
    throw Error(kind_, file_, shortened(module),
                what_ + " pattern '" + shortened(pattern) + "' is " +
                    (limit ? "too costly to match (backtracking past PCRE2's limits: " : "not matchable (") +
                    pcre2_message(rc) + "); rewrite it without nested repeats under lookaround or backreferences");
  }
}

std::optional<size_t> TargetList::best_match(std::string_view module, const Classes& classes) const {
  if (auto it = names_.find(std::string(module)); it != names_.end()) return it->second;
  std::optional<size_t> best;
  if (patterns_) {
    if (patterns_->re2_patterns > 0) {
      const uint64_t cost = (module.size() + 1) * std::max<uint64_t>(1, patterns_->program);
      if (patterns_->work.fetch_add(cost) + cost > kMaxMatchWork)
        throw Error(kind_, file_, shortened(module),
                    "matching module names against " + what_ + " re: patterns would pass the work budget of " +
                        std::to_string(kMaxMatchWork) + " (name bytes x " + std::to_string(patterns_->program) +
                        " RE2 instructions): use shorter names or fewer patterns");
      std::vector<int> hits;
      RE2::Set::ErrorInfo info{};
      if (!patterns_->set.Match(re2::StringPiece(module.data(), module.size()), &hits, &info) &&
          info.kind != RE2::Set::kNoError)
        throw Error(kind_, file_, shortened(module),
                    what_ + " re: patterns could not be matched within RE2's memory budget");
      for (int h : hits) {  // alphabetical by text; equal text is one set entry (its last list entry)
        const size_t i = patterns_->entry[static_cast<size_t>(h)];
        if (!best || targets_[i].text < targets_[*best].text) best = i;
      }
    }
    // PCRE2 patterns in alphabetical order, only those that would come before the RE2 winner.
    for (size_t k = 0; k < patterns_->pcre.size(); ++k) {
      const size_t i = patterns_->pcre[k].entry;
      if (best && !(targets_[i].text < targets_[*best].text)) break;
      if (backtrack_match(k, module)) {
        best = i;
        break;
      }
    }
    if (best) return best;
  }
  switch (classes.kind) {
    case Classes::Kind::none: return std::nullopt;
    case Classes::Kind::any: return classes_.empty() ? std::nullopt : std::optional<size_t>(classes_.front());
    case Classes::Kind::some:
      for (size_t i : classes_)
        if (classes.pred(targets_[i].text)) return i;
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace ctstream::format
