// format — the `targets` / `ignore` grammar of compressed-tensors (compressed_tensors/utils/
// match.py `match_name`, `_match_class`, `match_targets`), parsed in one place for the reader
// (config.json) and the writer (--targets / --ignore). An entry is
//   * an exact module name,
//   * `re:<pattern>`, tested like Python's `re.match`: anchored at the start of the name, not at
//     its end (a pattern without `$` also matches longer names), or
//   * a class name ("Linear", "Embedding": first letter upper-case, no dot), which cannot be
//     checked without the model; callers say which class names a module counts as.
// Patterns run on RE2 (Debian's libre2): matching costs time linear in the name whatever the
// pattern (Python's backtracking `re`, like std::regex, takes exponential time on `(a+)+$`, and
// std::regex also recurses once per character). RE2 has no backreferences or lookaround: such a
// pattern is refused when the list is parsed, never matched differently. All patterns of a list
// are matched in one pass (RE2::Set). Caps: kMaxPatternBytes per pattern, kMaxPatterns per list.
#pragma once
#include <cstddef>
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

struct Target {
  enum class Kind { name, regex, class_name } kind = Kind::name;
  std::string text;  ///< the name / the pattern without "re:" / the class name
};

class TargetList {
 public:
  /// True for the class names a module counts as (the reader cannot know: it says every one).
  using IsClass = std::function<bool(const std::string& class_name)>;

  TargetList();
  /// Parses a list; a bad entry throws Error{kind, file} naming `what` ("ignore", ...).
  static TargetList parse(const std::vector<std::string>& entries, ErrorKind kind, const std::string& file,
                          const std::string& what);

  const std::vector<Target>& targets() const noexcept { return targets_; }
  bool empty() const noexcept { return targets_.empty(); }

  /// The entry that decides for `module`, in the library's precedence: exact names, then
  /// patterns in alphabetical order, then class names in alphabetical order (among equal entries
  /// the later one, as the library's target -> scheme dict keeps the last). nullopt: none matches.
  std::optional<size_t> best_match(std::string_view module, const IsClass& is_class) const;
  bool matches(std::string_view module, const IsClass& is_class) const {
    return best_match(module, is_class).has_value();
  }

 private:
  struct Compiled;
  std::vector<Target> targets_;
  std::unordered_map<std::string, size_t> names_;  // exact name -> last entry index
  std::vector<size_t> classes_;                    // entry indices of class names
  std::shared_ptr<const Compiled> patterns_;       // RE2::Set over every pattern (null: none)
};

/// Class-name predicate of the reader: any class name may be the module's.
inline bool any_class(const std::string&) { return true; }

}  // namespace ctstream::format
