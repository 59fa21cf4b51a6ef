// format — the `targets` / `ignore` grammar of compressed-tensors (compressed_tensors/utils/
// match.py `match_name`, `_match_class`, `match_targets`), parsed in one place for the reader
// (config.json) and the writer (--targets / --ignore). An entry is
//   * an exact module name,
//   * `re:<pattern>`, tested like Python's `re.match`: anchored at the start of the name, not at
//     its end (a pattern without `$` also matches longer names), or
//   * a class name ("Linear", "Embedding": first letter upper-case, no dot), which cannot be
//     checked without the model; callers say which class names a module counts as.
// Patterns run on RE2 (Debian's libre2) whenever RE2 compiles them: matching costs time linear
// in the name whatever the pattern (Python's backtracking `re`, like std::regex, takes exponential
// time on `(a+)+$`, and std::regex also recurses once per character). All RE2 patterns of a list
// are matched in one pass (RE2::Set); identical patterns are compiled once.
// A pattern RE2 refuses (lookahead `(?!...)`, lookbehind, backreferences, `\Z`, possessive
// quantifiers: llm-compressor recipes write `re:.*(?!.*gate).*proj$`) runs on PCRE2 (Debian's
// libpcre2-8, JIT where the CPU has one), a backtracking engine bounded here: every match runs
// under a step limit (PCRE2's match limit; its depth, heap and JIT-stack limits too), and hitting
// one is an Error "too costly", never a hang and never "no match". Before PCRE2 sees a pattern
// it is read as Python's `re` reads it (python_pcre2 in targets.cpp): every construct the two
// read differently is respelled (`\Z` -> `\z`, `\v`, `\s` as Python's Unicode whitespace set) or
// refused (`(?i)`, `{,n}`, octal escapes, `\N{..}`, nested sets, conditionals, recursion, verbs,
// alternation at the top of a lookbehind, ...), so a pattern is matched as Python does or refused.
// Names are UTF-8 and `\d \w \b` are Unicode-aware (PCRE2_UTF | PCRE2_UCP), as Python's `re`
// on str; bytes that are not UTF-8 match no character (PCRE2_MATCH_INVALID_UTF).
// Bounds (a config.json is untrusted): kMaxPatternBytes per pattern, kMaxPatterns per list,
// kMaxProgramSize RE2 instructions for a whole list (compilation stops at the budget), and
// kMaxMatchWork for all the RE2 matching one list does: a name costs at most its length x the
// program size (an RE2 DFA that keeps thrashing its cache computes a state per byte), so a list
// refuses to match more names once their bytes x its instructions would pass the budget (a few
// seconds of the worst thrashing, ~8 ns per unit here; a real list, a few hundred instructions,
// matches megabytes of names: ~300 x 2.6 MB for a 47k-module MoE model is 0.8e9). PCRE2 matches
// are bounded alike: at most kMaxBacktrackSteps steps each and kMaxBacktrackWork for the list
// (each match is charged the step limit it ran under: limits start at 256 and grow x4 on a miss;
// ~17 ns per step at worst here, so a list stops after ~5 s of backtracking, while a recipe's
// `.*(?!.*gate).*proj$` costs 256 per 40-byte name: a million names).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ctstream/error.hpp"

namespace ctstream::format {

inline constexpr size_t kMaxPatternBytes = 4096;
inline constexpr size_t kMaxPatterns = 4096;
inline constexpr size_t kMaxProgramSize = size_t{1} << 15;
inline constexpr uint64_t kMaxMatchWork = uint64_t{1} << 30;
inline constexpr uint64_t kMaxBacktrackSteps = uint64_t{1} << 22;
inline constexpr uint64_t kMaxBacktrackWork = uint64_t{1} << 28;

struct Target {
  enum class Kind { name, regex, class_name } kind = Kind::name;
  std::string text;           ///< the name / the pattern without "re:" / the class name
  bool backtracking = false;  ///< a pattern RE2 refuses, matched by bounded PCRE2
};

class TargetList {
 public:
  /// True for the class names a module counts as (the writer, which knows the model).
  using IsClass = std::function<bool(const std::string& class_name)>;
  /// Which class names a module counts as: none, every one (the reader, which cannot know), or
  /// those `pred` accepts.
  struct Classes {
    enum class Kind : uint8_t { none, any, some } kind = Kind::none;
    IsClass pred;
    static Classes all() { return {Kind::any, {}}; }
    static Classes of(IsClass p) { return {Kind::some, std::move(p)}; }
  };

  TargetList();
  /// Parses a list; a bad entry throws Error{kind, file} naming `what` ("ignore", ...).
  static TargetList parse(const std::vector<std::string>& entries, ErrorKind kind, const std::string& file,
                          const std::string& what);

  const std::vector<Target>& targets() const noexcept { return targets_; }
  bool empty() const noexcept { return targets_.empty(); }

  /// The entry that decides for `module`, in the library's precedence: exact names, then
  /// patterns in alphabetical order, then class names in alphabetical order (among equal entries
  /// the later one, as the library's target -> scheme dict keeps the last). nullopt: none matches.
  /// Error{kind of parse()} once the list's matching work would pass kMaxMatchWork.
  std::optional<size_t> best_match(std::string_view module, const Classes& classes) const;
  bool matches(std::string_view module, const Classes& classes) const {
    return best_match(module, classes).has_value();
  }
  /// The class-name entries, in precedence order (what best_match tries last, first to last).
  const std::vector<size_t>& class_entries() const noexcept { return classes_; }

 private:
  struct Compiled;
  std::vector<Target> targets_;
  std::unordered_map<std::string, size_t> names_;  // exact name -> last entry index
  std::vector<size_t> classes_;                    // entry indices of class names, in precedence order
  std::shared_ptr<const Compiled> patterns_;       // RE2::Set + PCRE2 patterns (null: none)
  ErrorKind kind_ = ErrorKind::invalid_config;     // for errors while matching
  // One PCRE2 pattern against a module: bounded (Error past its limits or the list's budget).
  bool backtrack_match(size_t pcre_index, std::string_view module) const;
  std::string file_, what_;
};

}  // namespace ctstream::format
